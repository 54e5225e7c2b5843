"""No orphans when the runner and its sentinel are SIGKILLed together (issue 10).

With both gone, what is left of the run must still end: torchrun's keeper (a
single-threaded parent, ``runner.launch.keeper``) passes the runner's death on to torchrun
once, torchrun stops its workers, and the keeper SIGKILLs what is left after the grace
period, even when the workers and their children ignore SIGTERM. A later reader must see
the run as lost. Real runners, real torchrun; the worker script imports no torch, so a
trial costs little more than starting the runner and torchrun (torch's import: ~3 s of
CPU); trials run five at a time.
"""

from __future__ import annotations

import concurrent.futures
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from runner.store.liveness import effective_status
from runner.store.store import RunStore
from tests.jobs import SCRIPTS, processes_with_marker

pytestmark = pytest.mark.torchrun

TRIALS = 20
AT_ONCE = 5
SURVIVAL_LIMIT_SECONDS = 10.0
START_TIMEOUT_SECONDS = 120.0


def trial(number: int) -> tuple[list[str], str]:
    """Start a run, wait until its worker and the worker's child run, SIGKILL the runner and
    its sentinel together; returns what of the run is alive 10 s later, and the run's
    status as a reader sees it then."""
    runner = subprocess.Popen([sys.executable, "-m", "runner", "run", "--plain", "--nproc-per-node", "1",
                               str(SCRIPTS / "stubborn_worker.py")],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    run_key = None
    try:
        said = []
        for line in runner.stdout:
            said.append(line)
            if "stubborn worker up" in line:
                break
        else:
            pytest.fail(f"trial {number}: the runner ended before its worker was up: {''.join(said)}")
        with RunStore(readonly=True) as store:
            [run] = [run for run in store.runs(limit=100) if run["runner_pid"] == runner.pid]
        run_key = run["run_key"]
        [sentinel] = [process.pid for process in psutil.process_iter(["cmdline"])
                      if "runner.launch.sentinel" in (process.info["cmdline"] or [])
                      and run_key in process.info["cmdline"]]
        os.kill(runner.pid, signal.SIGKILL)
        os.kill(sentinel, signal.SIGKILL)
        deadline = time.monotonic() + SURVIVAL_LIMIT_SECONDS
        runner.wait(timeout=SURVIVAL_LIMIT_SECONDS)
        while processes_with_marker(run_key) and time.monotonic() < deadline:
            time.sleep(0.2)
        left = [" ".join(process.cmdline())[:100] for process in processes_with_marker(run_key)]
        with RunStore(readonly=True) as store:
            return left, effective_status(store.run(run["id"]))
    finally:
        if runner.poll() is None:
            runner.kill()
        runner.stdout.close()
        for process in processes_with_marker(run_key) if run_key else []:
            process.kill()


def test_twenty_trials_of_runner_and_sentinel_killed_together_leave_nothing_behind():
    RunStore().close()  # made (and migrated) once, before runners start side by side
    started = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(AT_ONCE) as pool:
        results = list(pool.map(trial, range(TRIALS)))
    survivors = {number: left for number, (left, _) in enumerate(results) if left}
    assert survivors == {}, f"alive {SURVIVAL_LIMIT_SECONDS:.0f} s after the kill, by trial: {survivors}"
    # not "running" forever: its runner is gone, so a reader sees the run as lost
    assert [status for _, status in results] == ["lost"] * TRIALS
    print(f"{TRIALS} trials in {time.monotonic() - started:.0f} s")
