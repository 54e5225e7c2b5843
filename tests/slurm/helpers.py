"""Running Rankwatch against the test's Slurm cluster, and reading back what it recorded."""

from __future__ import annotations

import os
import sys
import tempfile
import threading
import time
from pathlib import Path

from rankwatch import protocol
from runner.rows import StoredRun
from runner.store.store import RunStore
from tests.jobs import SCRIPTS
from tests.slurm.cluster import LocalSlurm

POLL_SECONDS = "0.5"


def runner_env(home: Path, cluster: LocalSlurm, **extra: str) -> dict[str, str]:
    """A runner's environment: its own Rankwatch home, the test cluster, brisk polling."""
    return {**os.environ, "RANKWATCH_HOME": str(home), **cluster.env, "RANKWATCH_SLURM_POLL_SECONDS": POLL_SECONDS,
            "RANKWATCH_SOCKET_DIR": tempfile.mkdtemp(prefix="rw-", dir="/tmp"), **extra}


def slurm_flags(workdir: Path, nodes: int = 1, nproc: int = 1, *extra: str) -> list[str]:
    """``workdir``: where the job runs and Slurm writes its output file (never the repository)."""
    return ["--slurm", "--nodes", str(nodes), "--nproc-per-node", str(nproc), "--interpreter", sys.executable,
            "--omp-num-threads", "1", "--workdir", str(workdir), *extra]


def slurm_run(script: str, *script_args: str, workdir: Path, nodes: int = 1, nproc: int = 1,
              extra: tuple[str, ...] = ()) -> list[str]:
    """``rankwatch run --plain --slurm ...`` for one of the tests' scripts."""
    return ["run", "--plain", *slurm_flags(workdir, nodes, nproc, *extra), str(SCRIPTS / script), *script_args]


def store_of(home: Path) -> Path:
    return home / "data" / "runs.db"


def read_store(home: Path, function):
    """``function(store)`` on a fresh read-only connection (``None`` while there is no store)."""
    if not store_of(home).exists():
        return None
    try:
        with RunStore(store_of(home), readonly=True) as store:
            return function(store)
    except Exception:
        return None


def run_by_profile(home: Path, script: str) -> StoredRun | None:
    """The newest run of ``script`` (profile names are the script's stem)."""
    stem = Path(script).stem

    def find(store):
        return next((run for run in store.runs(limit=20) if run.profile == stem), None)
    return read_store(home, find)


def slurm_job_id(home: Path, run_id: int) -> str | None:
    events = read_store(home, lambda store: store.stored_events(run_id, kind="slurm_submitted")) or []
    return events[0].fields["job_id"] if events else None


def running_ranks(home: Path, run_id: int) -> int:
    ranks = read_store(home, lambda store: store.ranks(run_id)) or []
    return len([row for row in ranks if row.state == "running"])


def send_stop(socket_path: str) -> None:
    """What `rankwatch stop` and the GUI's Stop send: subscribe, then ``stop``."""
    import socket
    with socket.socket(socket.AF_UNIX) as client:
        client.connect(socket_path)
        client.sendall(protocol.encode("subscribe", history=False) + protocol.encode("stop", force=False))
        time.sleep(0.5)


class StatusRecorder:
    """The run's status as the store shows it, every change, from a background thread."""

    def __init__(self, home: Path, run_id: int):
        self.home = home
        self.run_id = run_id
        self.seen: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        while not self._stop.is_set():
            run = read_store(self.home, lambda store: store.stored_run(self.run_id))
            if run is not None and (not self.seen or self.seen[-1] != run.status):
                self.seen.append(run.status)
            time.sleep(0.1)

    def stop(self) -> list[str]:
        self._stop.set()
        self._thread.join()
        return self.seen


def lines_until(stream, needle: str, timeout: float) -> tuple[bool, list[str]]:
    """Read ``stream`` line by line (in a thread) until a line holds ``needle``."""
    lines: list[str] = []
    found = threading.Event()

    def read() -> None:
        for line in stream:
            lines.append(line)
            if needle in line:
                found.set()
                return
    threading.Thread(target=read, daemon=True).start()
    found.wait(timeout)
    return found.is_set(), lines
