"""The job's watchdog: ends the job if the runner dies without ending it.

The runner starts this tiny process (its own session, no job marker) with a pipe
on its stdin and keeps the write end open for its whole life. A clean runner
writes ``done`` before it exits. If the pipe closes without ``done``, the runner
was killed (SIGKILL, OOM killer, a crash): torchrun got SIGTERM from its
parent-death signal and stops its workers; the sentinel gives it ``GRACE_SECONDS``,
SIGKILLs every process still carrying the job's marker, and records in the run
store that the run was lost.

If the sentinel dies with the runner, torchrun alone ends the job: it SIGKILLs its
workers' process groups after its own bounded grace period (the runner starts it
with ``TORCH_ELASTIC_SHUTDOWN_TIMEOUT``), and readers see the run as lost because
its runner is gone (``runner.store.liveness``).

Usage: ``python -m runner.launch.sentinel JOB_KEY [STORE_PATH RUN_ID]``
Standard library only, so it starts in ~20 ms.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import sys
import time

from runner.launch.process_tree import end_job

GRACE_SECONDS = 3.0


def _record_lost(store_path: str, run_id: int) -> None:
    try:
        connection = sqlite3.connect(store_path, timeout=10)
        with connection:
            connection.execute(
                "UPDATE runs SET status = 'lost', ended = ?, summary = COALESCE(summary, ?)"
                " WHERE id = ? AND ended IS NULL",
                (time.time(), '{"outcome": "lost", "headline": "the runner died; its watchdog stopped the job"}',
                 run_id))
        connection.close()
    except sqlite3.Error:
        pass


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: python -m runner.launch.sentinel JOB_KEY [STORE_PATH RUN_ID]", file=sys.stderr)
        return 2
    run_key = argv[0]
    for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)  # only the runner's pipe decides
    received = b""
    while True:
        chunk = os.read(0, 64)
        if not chunk:
            break
        received += chunk
    if b"done" in received:
        return 0
    end_job(run_key, grace=GRACE_SECONDS)
    if len(argv) >= 3:
        _record_lost(argv[1], int(argv[2]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
