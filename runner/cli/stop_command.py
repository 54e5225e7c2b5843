"""`rankwatch stop RUN`: stop a run from anywhere, however it was started.

A run started from the GUI, with ``run --detach`` or in another terminal has a
runner with a private socket; ``stop`` subscribes to it and sends ``stop``, exactly
what the GUI's Stop button does, then waits for the runner to say ``bye`` (it has
ended every process of the job and recorded the end). The runner then records the
same thing whoever asked (``runner.exit_status``): ``stopped``, exit code 143, or
137 when it had to kill.

When the socket cannot be reached but the runner process is alive (it is still
starting, or its socket was removed), ``stop`` sends SIGTERM to the runner instead
(twice with ``--force``: a second signal means "kill now"), after checking that the
pid is that run's runner and not a later process that reused the number.

Without RUN, ``stop`` stops the live run when exactly one is live (``runner.cli.run_choice``);
with several it names them and stops none (exit code 2).

Exit codes: 0 the run has ended (stopped now, or it ended on its own meanwhile);
1 no such run, or it did not end in time; 2 RUN left out while several runs are live;
3 the run is not running, or RUN left out and none is (nothing to stop).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import signal
import sys
import time

from rankwatch import protocol
from runner.cli.output import EXIT_FAILED, EXIT_INVALID, fail
from runner.cli.run_choice import NoLiveRun, SeveralLiveRuns, chosen_run
from runner.launch.process_tree import end_job, find_job_pids, signal_pids
from runner.rows import StoredRun
from runner.runstate.messages import Bye, decode_hub_line
from runner.state import RunStatus
from runner.store.liveness import effective_status, is_runner_process, runner_alive
from runner.store.store import RunNotFound, RunStore

EXIT_NOT_RUNNING = 3
DEFAULT_TIMEOUT_SECONDS = 30.0
POLL_SECONDS = 0.1


def add_parser(commands) -> None:
    stop = commands.add_parser(
        "stop", help="stop a running job (graceful; --force kills at once)",
        description="Stop a run, however it was started (the GUI, `run --detach`, another terminal): every process "
                    "of the job gets SIGTERM, and SIGKILL after 5 s. Without RUN: the live run, when exactly one is live. "
                    "Exit code 0 once the run has ended, 1 when there is no such run or it did not end in time, "
                    f"2 when RUN is left out and several runs are live, {EXIT_NOT_RUNNING} when it is not running.")
    stop.add_argument("run", metavar="RUN", nargs="?", default=None,
                      help="a run id (see `rankwatch runs list --live`), 'last' or 'last-N' "
                           "(default: the live run, when exactly one is live)")
    stop.add_argument("--force", action="store_true", help="kill every process of the job at once (SIGKILL)")
    stop.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_SECONDS, metavar="SECONDS",
                      help=f"how long to wait for the run to end (default {DEFAULT_TIMEOUT_SECONDS:.0f})")
    stop.set_defaults(handler=stop_main)


def stop_main(args: argparse.Namespace) -> int:
    if args.timeout <= 0:
        return fail("--timeout: must be more than 0 seconds")
    try:
        with RunStore(readonly=True) as store:
            run = chosen_run(store, args.run, command="stop", live_only=True)
    except NoLiveRun as error:
        return fail(str(error), code=EXIT_NOT_RUNNING)
    except SeveralLiveRuns as error:
        return fail(str(error), code=EXIT_INVALID)
    except RunNotFound as error:
        return fail(str(error), code=EXIT_FAILED)
    run_id = run.id
    if not runner_alive(run):
        return _not_running(run)
    started = time.monotonic()
    print(f"stopping run {run_id}{' (kill at once)' if args.force else ''}…", file=sys.stderr, flush=True)
    if not _ask_over_socket(run, args.force, args.timeout) and not _signal_runner(run, args.force):
        return fail(f"cannot reach the runner of run {run_id} (pid {run.runner_pid}) and it is not "
                    "a Rankwatch runner any more; nothing was stopped", code=EXIT_FAILED)
    final = _wait_until_ended(run_id, started + args.timeout)
    seconds = time.monotonic() - started
    if final is None:
        advice = ("its processes may need `kill -KILL`" if args.force
                  else f"try `rankwatch stop {run_id} --force`")
        return fail(f"run {run_id} did not end within {args.timeout:.0f} s; {advice}", code=EXIT_FAILED)
    if final.status == RunStatus.LOST.value:
        return _not_running(final) if final.run_key and find_job_pids(final.run_key) else fail(
            f"the runner of run {run_id} died before recording the end (lost); no process of the job is left",
            code=EXIT_FAILED)
    if final.status == RunStatus.STOPPED.value:
        print(f"run {run_id} stopped in {seconds:.1f} s (exit code {final.exit_code})", file=sys.stderr)
    else:
        print(f"run {run_id} ended on its own before the stop took effect: {final.status} "
              f"(exit code {final.exit_code})", file=sys.stderr)
    return 0


def _not_running(run: StoredRun) -> int:
    """A run whose runner is gone: finished, or lost (then end any process it left behind)."""
    status = effective_status(run)
    if status == RunStatus.LOST.value:
        leftovers = find_job_pids(run.run_key) if run.run_key else []
        if leftovers:
            # Nobody asked these to stop yet (their runner is gone): one SIGTERM each, as a stop
            # would have sent, then end_job's SIGKILL for what is still there after the grace.
            signal_pids(leftovers, signal.SIGTERM)
            killed = end_job(run.run_key or "", grace=2.0)
            print(f"run {run.id} was lost (its runner died); ended {len(leftovers)} process(es) it left behind"
                  f"{f', {len(killed)} with SIGKILL' if killed else ''}", file=sys.stderr)
            return 0
        print(f"rankwatch: run {run.id} is not running (lost: its runner died without recording an end); "
              "nothing to stop", file=sys.stderr)
        return EXIT_NOT_RUNNING
    code = run.exit_code
    print(f"rankwatch: run {run.id} is not running ({status}{'' if code is None else f', exit code {code}'}); "
          "nothing to stop", file=sys.stderr)
    return EXIT_NOT_RUNNING


def _ask_over_socket(run: StoredRun, force: bool, timeout: float) -> bool:
    """Send ``stop`` as a subscriber and wait for ``bye``; False when the socket cannot be reached."""
    socket_path = run.socket
    if not socket_path:
        return False
    try:
        asyncio.run(_send_stop(socket_path, force, timeout))
    except (OSError, ConnectionError, asyncio.TimeoutError):
        return False
    return True


async def _send_stop(socket_path: str, force: bool, timeout: float) -> None:
    """Raises OSError when the socket cannot be opened (gone, refused)."""
    reader, writer = await asyncio.wait_for(
        asyncio.open_unix_connection(socket_path, limit=protocol.MAX_LINE_BYTES + 1), timeout=5.0)
    try:
        writer.write(protocol.encode("subscribe", history=False))
        writer.write(protocol.encode("stop", force=force))
        await writer.drain()
        deadline = time.monotonic() + timeout
        while (remaining := deadline - time.monotonic()) > 0:
            try:
                line = await asyncio.wait_for(reader.readline(), remaining)
            except (asyncio.TimeoutError, ValueError):  # ValueError: a line over the limit, skipped
                if time.monotonic() >= deadline:
                    return
                continue
            if not line:
                return  # the runner closed the connection: it has ended
            try:
                if isinstance(decode_hub_line(line), Bye):
                    return
            except protocol.ProtocolError:
                continue
    finally:
        writer.close()


def _signal_runner(run: StoredRun, force: bool) -> bool:
    """SIGTERM to the run's runner (twice with ``force``); False when the pid is not its runner."""
    if not is_runner_process(run):
        return False
    pid = int(run.runner_pid or 0)
    try:
        os.kill(pid, signal.SIGTERM)
        if force:
            time.sleep(0.2)  # the runner treats a second signal during a stop as "kill now"
            os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return True  # it ended meanwhile
    except PermissionError:
        return False
    return True


def _wait_until_ended(run_id: int, deadline: float) -> StoredRun | None:
    """The run's row once it has an end (or its runner is gone); None at the deadline."""
    while True:
        with RunStore(readonly=True) as store:
            run = store.stored_run(run_id)
        if run.ended is not None:
            return run
        if not runner_alive(run):
            return dataclasses.replace(run, status=effective_status(run))
        if time.monotonic() >= deadline:
            return None
        time.sleep(POLL_SECONDS)
