"""Helpers for tests that run real jobs: the runner as a subprocess, the job's processes."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import psutil

from runner.rows import StoredRun
from runner.store.store import RunStore

REPO = Path(__file__).resolve().parent.parent
SCRIPTS = REPO / "tests" / "scripts"


UPSTREAM_SHUTDOWN_ABORT = "terminate called without an active exception"
"""About 1 run in 50 on this machine, one rank aborts in gloo's teardown after its last step,
with or without Rankwatch (a plain torchrun job does it too; see tests/bench/PERFORMANCE.md):
a ``rankwatch run`` that ends so is run once more, as the framework tests always did. Rankwatch
reports such a run as failed (rank N crashed in native code, SIGABRT), which is what it was."""


def rankwatch(*args: str, env: dict | None = None, timeout: float = 180, cwd: str | None = None
              ) -> subprocess.CompletedProcess:
    for _attempt in range(2):
        result = subprocess.run([sys.executable, "-m", "runner", *args], capture_output=True, text=True,
                                timeout=timeout, env=env, cwd=cwd)
        if (args[:1] != ("run",) or result.returncode == 0
                or UPSTREAM_SHUTDOWN_ABORT not in result.stdout + result.stderr):
            break
    return result


def start_rankwatch(*args: str, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "runner", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)


def processes_with_marker(run_key: str) -> list[psutil.Process]:
    """Every live process whose environment says RANKWATCH_RUN_KEY=<run_key> (independent of the
    runner's own cleanup code, so the test checks it rather than trusting it)."""
    found = []
    for process in psutil.process_iter():
        try:
            if process.environ().get("RANKWATCH_RUN_KEY") == run_key and process.status() != psutil.STATUS_ZOMBIE:
                found.append(process)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def wait_for(predicate, timeout: float, interval: float = 0.1, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def latest_run(home: Path | None = None) -> StoredRun | None:
    store_file = (home or Path(os.environ["RANKWATCH_HOME"])) / "data" / "runs.db"
    if not store_file.exists():
        return None
    try:
        with RunStore(store_file, readonly=True) as store:
            runs = store.runs(limit=1)
            return runs[0] if runs else None
    except Exception:
        return None


def ranks_running(run_id: int, count: int) -> bool:
    with RunStore(readonly=True) as store:
        ranks = store.ranks(run_id)
    return len([r for r in ranks if r.state == "running" and r.pid]) >= count
