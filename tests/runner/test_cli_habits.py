"""The CLI as people who use git, docker and torchrun expect it: a profile with flags and ``--``
script arguments after it, flags never abbreviated, two-line errors worded as the flag, --version,
`stop` of the one live run, an interpreter that is checked, the over-subscription warning, and
per-rank placeholders in `run --help`. In-process or `command` (nothing launched), except one
real run for the profile overrides."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from importlib import metadata
from pathlib import Path

import pytest

from runner import paths
from runner.cli import main as cli_main
from runner.cli.main import build_parser, main
from runner.cli.stop_command import EXIT_NOT_RUNNING
from runner.profile.resolve import usable_cpus
from runner.store.store import RunStore
from tests.jobs import REPO

SLEEPER = [sys.executable, "-c", "import time; time.sleep(60)"]


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    """``rankwatch ARGV`` in this process: (exit code, stdout, stderr)."""
    try:
        code = main(list(argv))
    except SystemExit as exit_:  # argparse errors, --help, --version
        code = exit_.code
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture
def script(tmp_path) -> Path:
    path = tmp_path / "train.py"
    path.write_text("import sys\nprint('args:', ' '.join(sys.argv[1:]), flush=True)\n")
    return path


@pytest.fixture
def saved_profile(script) -> Path:
    """A saved profile ``nightly``: one CPU rank, ``--epochs 10``."""
    path = paths.profiles_dir() / "nightly.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f'script = "{script}"\nargs = ["--epochs", "10"]\nnproc_per_node = 1\ngpus = "cpu"\n')
    return path


def torchrun_line(out: str) -> str:
    [line] = [line for line in out.splitlines() if "torch.distributed.run" in line]
    return line


# ---- 1. a profile, then flags that override it, then -- and the script's arguments --------------

def test_flags_after_a_profile_override_it_and_args_after_double_dash_replace_its_script_args(
        capsys, saved_profile):
    before = saved_profile.read_text()
    code, out, err = run_cli(capsys, "command", "nightly", "--nproc-per-node", "2", "--", "--epochs", "20")
    assert code == 0, err
    line = torchrun_line(out)
    assert "--nproc-per-node=2" in line
    assert line.endswith("train.py --epochs 20")
    assert saved_profile.read_text() == before  # for this run only


def test_a_script_argument_after_a_profile_without_double_dash_says_where_it_goes(capsys, saved_profile):
    """Seen: `rankwatch command hang --foo 1` failed with "arguments after a profile are not allowed"."""
    code, out, err = run_cli(capsys, "command", "nightly", "--foo", "1")
    assert (code, out) == (2, "")
    assert err.splitlines() == ["rankwatch command: unknown flag --foo; it looks like a script argument",
                                "hint: script arguments go after -- : `rankwatch command nightly -- --foo ...`"]
    code, out, err = run_cli(capsys, "command", "nightly", "20")
    assert (code, out) == (2, "")
    assert err.startswith("rankwatch command: '20' after nightly: a profile's script arguments go after --\n")


def test_a_profile_saved_from_another_takes_its_overrides_and_double_dash_args(capsys, saved_profile):
    code, _out, err = run_cli(capsys, "profiles", "save", "quick", "--from", "nightly", "--nproc-per-node", "2",
                              "--", "--epochs", "1")
    assert code == 0, err
    quick = (paths.profiles_dir() / "quick.toml").read_text()
    assert "nproc_per_node = 2" in quick and '"--epochs",\n    "1",' in quick
    assert 'args = ["--epochs", "10"]' in saved_profile.read_text()


def test_args_after_double_dash_replace_the_examples_script_args(capsys):
    """Seen: `rankwatch run --detach --example -- --epochs 20` ran with --epochs 10 (exit 0)."""
    code, out, err = run_cli(capsys, "command", "--example", "--nproc-per-node", "1", "--", "--epochs", "20")
    assert code == 0, err
    line = torchrun_line(out)
    assert line.endswith("ddp_train.py --epochs 20") and "--nproc-per-node=1" in line


def test_a_real_run_of_a_profile_with_overrides_runs_them_and_warns_of_more_ranks_than_cores(
        tmp_path, script):
    """The one real job here: the overrides reach torchrun and the script, the file is unchanged,
    and two ranks on one usable core are warned about before the launch (points 1 and 7)."""
    profile = tmp_path / "job.toml"
    profile.write_text(f'script = "{script}"\nargs = ["--epochs", "10"]\nnproc_per_node = 1\ngpus = "cpu"\n')
    before = profile.read_text()
    one_core = min(os.sched_getaffinity(0))
    result = subprocess.run(
        [sys.executable, "-m", "runner", "run", "--plain", str(profile), "--nproc-per-node", "2", "--",
         "--epochs", "1"],
        capture_output=True, text=True, timeout=180, preexec_fn=lambda: os.sched_setaffinity(0, {one_core}))
    assert result.returncode == 0, result.stderr
    assert ("rankwatch: warning: 2 processes on 1 CPU core: each rank gets less than a core in CPU mode"
            in result.stderr)
    assert result.stdout.count("args: --epochs 1\n") == 2  # both ranks, the script's arguments replaced
    with RunStore(readonly=True) as store:
        command = store.stored_run(store.resolve_run_id("last")).command
    assert "--nproc-per-node=2" in command and command.endswith("train.py --epochs 1")
    assert profile.read_text() == before


# ---- 2. flags are never abbreviated; a script's flag before the script says where it goes -------

def _parsers(parser, prefix="rankwatch"):
    yield prefix, parser
    for action in parser._actions:
        if hasattr(action, "choices") and isinstance(action.choices, dict):
            for name, sub in action.choices.items():
                yield from _parsers(sub, f"{prefix} {name}")


def test_every_parser_refuses_abbreviated_flags():
    from runner.cli.profile_commands import _save_flags_parser
    from runner.cli.spec_flags import add_spec_flags
    parsers = dict(_parsers(build_parser()))
    parsers["rankwatch profiles save NAME"] = _save_flags_parser(add_spec_flags)
    assert {name for name, parser in parsers.items() if parser.allow_abbrev} == set()


def test_a_double_dash_right_after_a_script_only_marks_where_its_arguments_begin(capsys, script):
    """`rankwatch run train.py -- 10 1 --losses DIR` ran `train.py 10 1 --losses DIR` before the
    arguments were sorted by hand, and must still: the DDP tutorial's test script is run so."""
    code, out, err = run_cli(capsys, "command", "--nproc-per-node", "1", str(script), "--", "10", "--losses", "x")
    assert code == 0, err
    assert torchrun_line(out).endswith(f"{script} 10 --losses x")
    code, out, err = run_cli(capsys, "command", "--nproc-per-node", "1", str(script), "10", "--", "--x")
    assert code == 0, err
    assert torchrun_line(out).endswith(f"{script} 10 -- --x")  # a later one is the script's own


def test_a_scripts_flag_before_the_script_says_where_script_arguments_go(capsys, script):
    """Seen: `--epochs` before the script got "did you mean '--qos'?"."""
    code, out, err = run_cli(capsys, "run", "--epochs", "3", str(script))
    assert (code, out) == (2, "")
    assert err.splitlines() == [
        "rankwatch run: unknown flag --epochs; it looks like a script argument",
        "hint: script arguments go after the script (`rankwatch run [FLAGS] SCRIPT --epochs ...`), "
        "or after -- with a profile (`rankwatch run PROFILE -- --epochs ...`)"]


# ---- 3. two-line errors, worded as the flag, exit code 2 ------------------------------------------

@pytest.mark.parametrize(("argv", "first_line"), [
    (["--backend", "ncl", "SCRIPT"], "rankwatch command: --backend: 'ncl' is not one of auto, nccl, gloo, mpi; "
                           "did you mean 'nccl'?"),
    (["--nproc-per-node", "x", "SCRIPT"], "rankwatch command: --nproc-per-node: expected an integer or \"auto\", got 'x'"),
    (["--master-port", "abc", "SCRIPT"], "rankwatch command: --master-port: expected an integer, got 'abc'"),
    (["--example", "--backend"], "rankwatch command: --backend: needs a value"),
])
def test_an_argument_error_is_one_line_worded_as_the_flag_and_one_hint(capsys, script, argv, first_line):
    code, out, err = run_cli(capsys, "command", *(str(script) if word == "SCRIPT" else word for word in argv))
    assert (code, out) == (2, "")
    assert err.splitlines() == [first_line, "hint: see `rankwatch command --help`"]


def test_an_invalid_flag_value_found_by_the_spec_check_is_worded_as_the_flag(capsys, script):
    """Not "train.py: nproc_per_node: ...": the user typed a flag, not a field of a file."""
    code, out, err = run_cli(capsys, "command", "--nproc-per-node", "0", str(script))
    assert (code, out) == (2, "")
    assert err.splitlines() == ["rankwatch: --nproc-per-node: 0 is out of range; must be between 1 and 1024"]
    code, out, err = run_cli(capsys, "command", "--env", "RANK=3", str(script))
    assert (code, out) == (2, "")
    assert err.splitlines() == ["rankwatch: --env RANK: set by torchrun for each worker; remove it from env"]


# ---- 4. --version --------------------------------------------------------------------------------

def test_version_prints_the_installed_packages_version(capsys):
    code, out, _err = run_cli(capsys, "--version")
    assert (code, out) == (0, f"rankwatch {metadata.version('rankwatch')}\n")


def test_version_in_a_source_tree_that_was_never_installed_is_the_one_pyproject_declares(monkeypatch):
    monkeypatch.setattr(cli_main, "DISTRIBUTION", "rankwatch-never-installed")
    declared = next(line.split('"')[1] for line in (REPO / "pyproject.toml").read_text().splitlines()
                    if line.startswith("version = "))
    assert cli_main.package_version() == f"{declared} (source tree, not installed)"


# ---- 5. stop (and stacks) without RUN: the live run ----------------------------------------------

@pytest.fixture
def sleepers():
    started: list[subprocess.Popen] = []
    yield lambda: started.append(subprocess.Popen(SLEEPER)) or started[-1]
    for process in started:
        process.kill()
        process.wait()


def record_run(runner_pid: int, *, ended: bool = False) -> int:
    with RunStore() as store:
        run_id = store.create_run(run_key=uuid.uuid4().hex[:24], profile="p", spec_toml="", command="", host="h",
                                  workdir="/", runner_pid=runner_pid, socket=None, world_size=1, status="starting")
        if ended:
            store.update_run(run_id, started=time.time() - 2, ended=time.time(), exit_code=0, status="succeeded")
        return run_id


def test_stop_without_run_stops_the_one_live_run(capsys, sleepers):
    runner = sleepers()
    time.sleep(0.05)
    live = record_run(runner.pid)
    record_run(runner.pid, ended=True)  # a later run that has ended: not the one to stop
    code = main(["stop", "--timeout", "5"])
    assert runner.wait(timeout=5) == -15  # the live run's runner got SIGTERM
    # this stand-in runner cannot record an end, so the run then reads as lost (exit code 1)
    assert code == 1 and f"stopping run {live}" in capsys.readouterr().err


def test_stop_without_run_while_several_are_live_names_them_and_stops_none(capsys, sleepers):
    first, second = sleepers(), sleepers()
    time.sleep(0.05)
    ids = [record_run(first.pid), record_run(second.pid)]
    code, _out, err = run_cli(capsys, "stop")
    assert code == 2
    assert err == f"rankwatch: 2 runs are live ({ids[1]}, {ids[0]}); say which: `rankwatch stop {ids[1]}`\n"
    assert first.poll() is None and second.poll() is None


def test_stop_without_run_while_none_is_live_has_nothing_to_stop(capsys):
    record_run(os.getpid(), ended=True)
    code, _out, err = run_cli(capsys, "stop")
    assert code == EXIT_NOT_RUNNING and "no run is live, so there is nothing to stop" in err


def test_stacks_without_run_takes_the_live_run_not_a_later_finished_one(capsys, sleepers):
    runner = sleepers()
    time.sleep(0.05)
    live = record_run(runner.pid)
    record_run(os.getpid(), ended=True)
    code, out, err = run_cli(capsys, "stacks")
    assert (code, out) == (1, "")
    assert f"run {live}" in err and "has ended" not in err


# ---- 6. the interpreter of `command` is checked ---------------------------------------------------

def test_command_refuses_an_interpreter_that_is_not_python(capsys, script):
    """Seen: `rankwatch command --interpreter /bin/ls script.py` printed `/bin/ls -m torch.distributed.run`."""
    code, out, err = run_cli(capsys, "command", "--interpreter", "/bin/ls", str(script))
    assert (code, out) == (2, "")
    assert err.splitlines() == ["rankwatch: --interpreter: /bin/ls is not a working Python: it did not answer as "
                                "one (no answer); give the path of a Python with torch"]


def test_command_refuses_a_python_without_torch(capsys, script, tmp_path):
    bare = tmp_path / "bare-python"  # this Python without its site-packages: no torch
    bare.write_text(f'#!/bin/sh\nexec {sys.executable} -S "$@"\n')
    bare.chmod(0o755)
    code, out, err = run_cli(capsys, "command", "--interpreter", str(bare), str(script))
    assert (code, out) == (2, "")
    assert err.startswith(f"rankwatch: --interpreter: torch is not installed for {bare}; install it there")


# ---- 7. over-subscription, before launch -----------------------------------------------------------

def test_command_warns_of_more_processes_than_cores(capsys, script):
    cores = usable_cpus()
    code, out, err = run_cli(capsys, "command", "--gpus", "cpu", "--nproc-per-node", str(cores + 1), str(script))
    assert code == 0 and f"--nproc-per-node={cores + 1}" in out
    assert (f"rankwatch: warning: {cores + 1} processes on {cores} CPU core{'s' if cores != 1 else ''}: "
            f"each rank gets less than a core in CPU mode and steps will be slow; use at most {cores}\n") in err


# ---- 8. run --help names the per-rank placeholders ---------------------------------------------------

def test_run_help_names_the_per_rank_placeholders_with_an_example(capsys):
    code, out, _err = run_cli(capsys, "run", "--help")
    assert code == 0 and out.startswith("usage: rankwatch run ")  # help stays whole, usage and all
    assert "--nproc-per-node" in out and "--telemetry-route" in out
    for placeholder in ("{rank}", "{local_rank}", "{world_size}", "{node_rank}", "{master_addr}", "{master_port}",
                        "{init_method}", "{init_method:file}"):
        assert placeholder in out
    assert "train.py --rank {rank} --world_size {world_size} --init_method {init_method}" in out
    assert "arguments after -- replace its script arguments" in " ".join(out.split())
