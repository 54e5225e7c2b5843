"""`rankwatch run` and `rankwatch command`: launch a job, or print what would launch it.

`run` in the foreground shows the terminal view and returns the job's exit status.
`run --detach` (what the GUI uses) starts the runner in a session of its own, waits
until its socket is listening, prints one line (JSON with ``--json``) with the run
id and socket, and returns at once; the runner goes on without a terminal.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

from runner import paths, priority
from runner.cli.output import EXIT_INVALID, fail, print_spec_errors, spec_errors_json
from runner.cli.spec_flags import flag_of_field, profile_from_args
from runner.exit_status import process_exit_code
from runner.profile.check import check_interpreter
from runner.profile.files import (
    Profile,
    ProfileError,
    fit_example,
    is_bundled_example,
    write_spec_file,
)
from runner.profile.oversubscription import oversubscription_warnings
from runner.profile.parse import SpecErrors
from runner.profile.resolve import absolute_paths
from runner.rows import StoredRun
from runner.run import Run, prepare_launch
from runner.sampling.nvml import shared_nvml
from runner.slurm.script import render_by_hand
from runner.state import RunStatus
from runner.store.rank_stats import run_statistics
from runner.store.schema import StoreError
from runner.store.store import RunStore, is_store_full
from runner.view.terminal import TerminalView, render_summary


def source_label(args: argparse.Namespace) -> str:
    """How error lines name what was given: the profile or file as typed, or the example."""
    return "example" if args.example else args.target or args.module or "command line"


def explain(errors: SpecErrors, args: argparse.Namespace, *, as_json: bool = False) -> int:
    """Print ``errors`` (a value given as a flag is named by its flag); the exit code."""
    return print_spec_errors(errors, source_label(args), as_json=as_json,
                             flag_of=lambda field: flag_of_field(field, args, args.spec_schema))


def load_or_explain(args: argparse.Namespace, *, as_json: bool = False):
    """The profile for these args, or an exit code after printing why not."""
    try:
        return fit_to_this_machine(profile_from_args(args), args), None
    except SpecErrors as errors:
        return None, explain(errors, args, as_json=as_json)
    except (ProfileError, ValueError) as error:
        return None, fail(str(error), as_json=as_json)


def warn_oversubscription(prepared) -> None:
    """More ranks than cores or GPUs here: allowed, but said before launch (as the launch form does)."""
    for warning in oversubscription_warnings(prepared.launch, prepared.machine.cpu_count):
        print(f"rankwatch: warning: {warning}", file=sys.stderr)


def fit_to_this_machine(profile: Profile, args: argparse.Namespace) -> Profile:
    """The bundled example with one rank per GPU here (at most its two; ``fit_example``), as
    the GUI shows it; a process count given with ``--nproc-per-node`` is kept as given."""
    if not is_bundled_example(profile) or args.nproc_per_node is not None:
        return profile
    return replace(profile, spec=fit_example(profile.spec, shared_nvml().report(with_processes=False)))


def command_main(args: argparse.Namespace) -> int:
    profile, code = load_or_explain(args)
    if profile is None:
        return code
    try:
        prepared = prepare_launch(profile, probe_interpreter=False)
        # no ssh preflight for a preview, but the head's interpreter must be a Python with torch
        if prepared.launch.head.is_local and (problems := check_interpreter(prepared.launch.head.python)):
            raise SpecErrors(problems)
    except SpecErrors as errors:
        return explain(errors, args)
    warn_oversubscription(prepared)
    if prepared.launch.spec.slurm is not None:  # the sbatch script, to submit the same job by hand
        print(render_by_hand(prepared.launch), end="")
        return 0
    commands = prepared.user_commands()
    print(f"# {prepared.launch.launch_mode.describe()}", file=sys.stderr)  # stdout: only what can be pasted
    for command in commands:
        if len(commands) > 1:
            print(f"# node {command.node.node_rank}: {command.node.host} ({command.node.processes} processes)")
        print(command.shell_text())
        for line in command.rank_lines:  # what each rank runs, its argument templates expanded
            print(f"#   {line}")
    return 0


def run_main(args: argparse.Namespace) -> int:
    profile, code = load_or_explain(args, as_json=args.json)
    if profile is None:
        return code
    try:
        # A detached runner's parent has just run every check (interpreter probe, SSH
        # preflight of remote nodes); the child only re-resolves and plans the rendezvous.
        prepared = prepare_launch(profile, probe_interpreter=args.ready_fd is None)
    except SpecErrors as errors:
        if args.ready_fd is not None:
            with os.fdopen(args.ready_fd, "w") as ready:
                ready.write(json.dumps(spec_errors_json(errors)))
            return EXIT_INVALID
        return explain(errors, args, as_json=args.json)
    if args.ready_fd is None:  # the detached runner's parent has said it
        warn_oversubscription(prepared)
    if args.detach:
        return _detach(profile, args.json)
    if args.ready_fd is not None:
        return _run_detached_child(prepared, args.ready_fd)
    view = None if args.no_view else TerminalView(live=False if args.plain else None,
                                                   multi_node=prepared.launch.spec.is_multi_node,
                                                   status_every=args.status_every,
                                                   interrupt_kills=True)
    run = Run(prepared, view=view)
    # The runner process (not a Run object, which tests also host in their own process):
    # below the ranks; the keeper gives them the user's scheduling back (runner.priority).
    priority.lower_runner_priority()
    if view:
        view.start()
    try:
        try:
            exit_code = asyncio.run(run.execute())
        except (StoreError, OSError) as error:
            if run.run_id is not None or not is_store_full(error):
                raise
            # the disk filled (or went read-only) between the checks and the store's first write
            return fail(f"cannot record the run in {run.store_path} ({error}): the disk holding it is full or "
                        "not writable; free some space there, or set RANKWATCH_HOME to a folder on another disk")
        # the whole run's figures come from the store: one that stopped taking records (disk full)
        # holds only the run's start, and the last frame would mix them with the live step
        if view and view.shows_results and run.run_id is not None and run.hub.store_incomplete is None:
            with RunStore(readonly=True) as store:  # before stop: the live table's last frame shows them
                view.show_results(run_statistics(store, run.run_id)[0])
    finally:
        if view:
            view.stop()
    if run.run_id is None:
        return exit_code
    with RunStore(readonly=True) as store:
        final = store.stored_run(run.run_id)
    render_summary(final, sys.stderr)
    return _process_exit_code(run, final)


def _process_exit_code(run: Run, final: StoredRun) -> int:
    """This process's exit code: the run's, or 128 + N when signal N to this process stopped it."""
    return process_exit_code(final.exit_code or 0, run.received_signal,
                             stopped=final.status == RunStatus.STOPPED.value)


def _detach(profile, as_json: bool) -> int:
    """Start ``rankwatch run`` in its own session and return once it listens."""
    folder = paths.data_dir() / "launch" / str(os.getpid())  # the file's stem is the run's profile name
    spec_file = write_spec_file(folder / f"{profile.name}.toml", absolute_paths(profile.spec, profile.base_dir))
    read_end, write_end = os.pipe()
    child = subprocess.Popen(
        [sys.executable, "-m", "runner", "run", "--no-view", "--ready-fd", str(write_end), str(spec_file)],
        pass_fds=(write_end,), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        start_new_session=True, cwd=str(profile.base_dir) if profile.path is None else None)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as ready:
        data = ready.read()
    spec_file.unlink(missing_ok=True)  # the runner has read it (and the store keeps the spec)
    with contextlib.suppress(OSError):
        folder.rmdir()
    errors = child.stderr
    assert errors is not None  # stderr=PIPE
    if not data:
        error = errors.read().decode(errors="replace").strip() if child.poll() is not None else ""
        return fail(f"the runner stopped before it was ready{': ' + error.splitlines()[-1] if error else ''}",
                    as_json=as_json)
    errors.close()
    info = json.loads(data)
    if "error" in info:
        if as_json:
            print(json.dumps(info))
        else:
            for item in info.get("errors") or [{"field": "", "message": info["error"]}]:
                print(f"rankwatch: {item['field']}: {item['message']}" if item["field"] else f"rankwatch: {item['message']}",
                      file=sys.stderr)
        return EXIT_INVALID
    if as_json:
        print(json.dumps(info))
    else:
        print(f"run {info['run_id']} started in the background (runner pid {info['pid']}); "
              f"follow it with `rankwatch attach {info['run_id']}`, stop it with `rankwatch stop {info['run_id']}`")
    return 0


def _run_detached_child(prepared, ready_fd: int) -> int:
    """The detached runner: report readiness on ``ready_fd``, log to the run folder."""
    def on_ready(info: dict) -> None:
        log_path = Path(info["log"])
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with os.fdopen(ready_fd, "w") as ready:
            ready.write(json.dumps(info))
        log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(log)

    run = Run(prepared, view=None, on_ready=on_ready)
    priority.lower_runner_priority()  # as in the foreground runner
    exit_code = asyncio.run(run.execute())
    if run.run_id is None:
        return exit_code
    with RunStore(readonly=True) as store:
        return _process_exit_code(run, store.stored_run(run.run_id))
