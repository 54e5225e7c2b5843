"""Kill trials: a real run whose ranks each have a child that ignores SIGTERM, ended
one of five ways; what of the run is alive 10 s later.

Shared by ``tests/integration/test_orphans.py`` (each ending once) and
``tests/bench/bench_kill_trials.py`` (each ending many times). The ranks are
``tests/scripts/orphan_maker.py``: no torch import, so a trial costs starting the runner and
torchrun (~3 s of CPU for torch's import) plus the ending itself. What is alive is read from
``/proc`` by psutil (``tests.jobs.processes_with_marker``), independently of the runner's own
cleanup code.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field

import psutil

from runner.store.store import RunStore
from tests.jobs import SCRIPTS, processes_with_marker

ENDINGS = ("failure", "success", "runner_and_sentinel_killed", "torchrun_killed", "stop")
"""How a trial's job ends: rank 1 raises; both ranks return; the runner and its sentinel are
SIGKILLed together; torchrun is SIGKILLed; Ctrl-C (SIGINT) of the runner."""
SCRIPT_MODE = {"failure": "fail", "success": "succeed"}
"""``orphan_maker.py``'s mode per ending (``wait`` for the others)."""
RANKS = 2
SURVIVAL_LIMIT_SECONDS = 10.0
START_TIMEOUT_SECONDS = 120.0
END_TIMEOUT_SECONDS = 60.0
ASYNCIO_TRACEBACK_WORDS = ("CancelledError", "Exception in callback", "Task exception was never retrieved",
                           "Unhandled exception in client_connected_cb")
"""What the runner's terminal must never show: asyncio's own tracebacks."""
ASYNCIO_TRACEBACK_HEADERS = ASYNCIO_TRACEBACK_WORDS[1:]
"""The first line of each such traceback (to count them)."""


@dataclass
class Trial:
    """What one trial saw."""

    ending: str
    survivors: list[str] = field(default_factory=list)
    """Command lines of the processes with the run's marker still alive ``SURVIVAL_LIMIT_SECONDS``
    after the ending (for a job that ends by itself: after the runner returned)."""
    output: str = ""
    """Everything the runner printed (its stdout and stderr)."""
    exit_code: int | None = None
    """The runner's exit status (``None``: it was SIGKILLed)."""
    end_seconds: float | None = None
    """From the last rank's end (its children up, plus its planned run time) or the kill/stop to
    the runner's return; ``None`` when the runner was SIGKILLed."""
    gone_seconds: float | None = None
    """From the ending (as for ``survivors``) until no process with the run's marker was alive;
    ``None`` when some survived."""
    node_state: str | None = None
    """The local node's state as the store recorded it."""
    run_key: str = ""

    @property
    def asyncio_tracebacks(self) -> list[str]:
        """The lines of the runner's output that belong to asyncio's tracebacks."""
        return [line for line in self.output.splitlines() if any(word in line for word in ASYNCIO_TRACEBACK_WORDS)]

    @property
    def asyncio_traceback_count(self) -> int:
        """How many tracebacks those lines are (at least one when there are any)."""
        lines = self.asyncio_tracebacks
        return max(sum(any(word in line for word in ASYNCIO_TRACEBACK_HEADERS) for line in lines), bool(lines))


class _Output:
    """The runner's output, read on a thread as it comes; says when every rank's child is up."""

    def __init__(self, stream):
        self.lines: list[str] = []
        self.up = threading.Event()
        self.up_at: float | None = None
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True, name="trial-output")
        self._thread.start()

    def _read(self, stream) -> None:
        for line in stream:
            self.lines.append(line)
            if sum("orphan maker up" in seen for seen in self.lines) >= RANKS and not self.up.is_set():
                self.up_at = time.monotonic()
                self.up.set()
        self.up.set()  # the runner ended (its output with it)

    def text(self, timeout: float = 5.0) -> str:
        self._thread.join(timeout)
        return "".join(self.lines)


def _child_with(parent: int, word: str) -> int | None:
    try:
        for child in psutil.Process(parent).children():
            if any(word in part for part in child.cmdline()):
                return child.pid
    except psutil.Error:
        pass
    return None


def _torchrun_pid(runner: int) -> int | None:
    """torchrun: the keeper's child (the keeper is the runner's child)."""
    keeper = _child_with(runner, "runner.launch.keeper")
    if keeper is None:
        return None
    try:
        children = psutil.Process(keeper).children()
    except psutil.Error:
        return None
    return children[0].pid if children else None


def _sentinel_pid(run_key: str) -> int | None:
    for process in psutil.process_iter(["cmdline"]):
        cmdline = process.info["cmdline"] or []
        if "runner.launch.sentinel" in cmdline and run_key in cmdline:
            return process.pid
    return None


def _wait_until_gone(run_key: str, deadline: float) -> list[str]:
    while processes_with_marker(run_key) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = []
    for process in processes_with_marker(run_key):
        try:
            left.append(f"{process.pid} {' '.join(process.cmdline()).replace(chr(10), ' ')[:120]}")
        except psutil.Error:
            continue
    return left


def run_trial(ending: str) -> Trial:
    """Start a run of ``orphan_maker.py`` (2 ranks), end it as ``ending`` says once every rank's child
    is up, and see what is left. Kills what it left behind (by the run's marker only) before returning.

    Raises:
        AssertionError: the run did not get as far as every rank's child being up.
    """
    trial = Trial(ending)
    script_mode = SCRIPT_MODE.get(ending, "wait")
    runner = subprocess.Popen([sys.executable, "-m", "runner", "run", "--plain", "--nproc-per-node", str(RANKS),
                               str(SCRIPTS / "orphan_maker.py"), script_mode],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    output = _Output(runner.stdout)
    try:
        if not output.up.wait(START_TIMEOUT_SECONDS) or output.up_at is None:
            raise AssertionError(f"{ending}: the ranks' children never came up:\n{output.text(1.0)}")
        with RunStore(readonly=True) as store:
            [run] = [run for run in store.runs(limit=100) if run.runner_pid == runner.pid]
        trial.run_key = run.run_key
        killed_runner = False
        if ending == "runner_and_sentinel_killed":
            sentinel = _sentinel_pid(trial.run_key)
            assert sentinel is not None, "no sentinel"
            os.kill(runner.pid, signal.SIGKILL)
            os.kill(sentinel, signal.SIGKILL)
            killed_runner = True
            event = time.monotonic()
        elif ending == "torchrun_killed":
            torchrun = _torchrun_pid(runner.pid)
            assert torchrun is not None, "no torchrun"
            os.kill(torchrun, signal.SIGKILL)
            event = time.monotonic()
        elif ending == "stop":
            os.kill(runner.pid, signal.SIGINT)
            event = time.monotonic()
        else:  # the job ends by itself: rank 1 raises 2 s after its child is up, or both return after 1 s
            runner.wait(END_TIMEOUT_SECONDS)
            event = time.monotonic()
        if not killed_runner:
            runner.wait(END_TIMEOUT_SECONDS)
            trial.exit_code = runner.returncode
            planned = 2.0 if ending == "failure" else 1.0 if ending == "success" else 0.0
            job_end = output.up_at + planned if ending in SCRIPT_MODE else event
            trial.end_seconds = time.monotonic() - job_end
        else:
            runner.wait(SURVIVAL_LIMIT_SECONDS)
        trial.survivors = _wait_until_gone(trial.run_key, event + SURVIVAL_LIMIT_SECONDS)
        trial.gone_seconds = None if trial.survivors else max(0.0, time.monotonic() - event)
        trial.output = output.text()
        with RunStore(readonly=True) as store:
            nodes = store.stored_nodes(run.id)
        trial.node_state = nodes[0].state if nodes else None
        return trial
    finally:
        if runner.poll() is None:
            runner.kill()
            runner.wait()
        for process in processes_with_marker(trial.run_key) if trial.run_key else []:
            with contextlib.suppress(psutil.Error):
                process.kill()
        if runner.stdout is not None:
            runner.stdout.close()
