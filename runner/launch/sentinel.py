"""The job's watchdog: ends the job if the runner dies without ending it.

The runner starts this tiny process (its own session, no job marker) with a pipe
on its stdin and keeps the write end open for its whole life. A clean runner
writes ``done`` before it exits. If the pipe closes without ``done``, the runner
was killed (SIGKILL, OOM killer, a crash): torchrun got SIGTERM from its
parent-death signal and stops its workers; the sentinel gives it ``GRACE_SECONDS``,
SIGKILLs every process still carrying the job's marker, and records in the run
store that the run was lost, when and how (``runner.store.lost_run``).

If the sentinel dies with the runner, torchrun and its keeper end the job: torchrun
SIGKILLs its workers' process groups after its own bounded grace period (the runner
starts it with ``TORCH_ELASTIC_SHUTDOWN_TIMEOUT``), and the keeper
(``runner.launch.keeper``) SIGKILLs whatever still carries the marker after its own,
torchrun's exit notwithstanding; readers see the run as lost because its runner is
gone (``runner.store.liveness``).

Usage: ``python -m runner.launch.sentinel JOB_KEY [STORE_PATH RUN_ID]``
Standard library only, so it starts in ~20 ms.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time

from runner.launch.process_tree import end_job
from runner.store.lost_run import record_lost_run
from runner.store.schema import StoreError

GRACE_SECONDS = 3.0


def runner_ended_cleanly() -> bool:
    """Block until the runner's pipe on stdin closes; True when it wrote ``done`` first.

    Signals that reach the whole session (Ctrl-C, a closed terminal, a stop) are ignored:
    only the runner's pipe decides. Shared with the Slurm job's watchdog.
    """
    for number in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM):
        signal.signal(number, signal.SIG_IGN)
    received = b""
    while True:
        chunk = os.read(0, 64)
        if not chunk:
            break
        received += chunk
    return b"done" in received


def _record_lost(store_path: str, run_id: int, died: float, processes_killed: int) -> None:
    with contextlib.suppress(StoreError):  # nobody to tell: readers see the run as lost anyway
        record_lost_run(store_path, run_id, died=died, processes_killed=processes_killed)


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: python -m runner.launch.sentinel JOB_KEY [STORE_PATH RUN_ID]", file=sys.stderr)
        return 2
    run_key = argv[0]
    if runner_ended_cleanly():
        return 0
    died = time.time()
    killed = end_job(run_key, grace=GRACE_SECONDS)
    if len(argv) >= 3:
        _record_lost(argv[1], int(argv[2]), died, len(killed))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
