"""The Slurm job's watchdog: cancels the job if the runner dies without ending it.

The runner starts it right after ``sbatch`` (its own session, no job marker) with a
pipe on its stdin that the runner holds open for its whole life, and writes
``done`` once the job has ended or been cancelled. If the pipe closes without
``done``, the runner was killed (SIGKILL, the OOM killer, a crash): the watchdog
runs ``scancel`` for the job (here, or on the login host over ssh), so a job that
is still queued does not start hours later for nobody. A job that is already
running ends anyway: its agents stop their workers when their connection to the
runner drops.

Usage: ``python -m runner.slurm.watchdog SCANCEL_ARGV_JSON``. Standard library only (and the
sentinel's stdlib-only wait on the runner's pipe).
"""

from __future__ import annotations

import json
import subprocess
import sys

from runner.launch.sentinel import runner_ended_cleanly

SCANCEL_TIMEOUT_SECONDS = 60


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m runner.slurm.watchdog SCANCEL_ARGV_JSON", file=sys.stderr)
        return 2
    command = json.loads(argv[0])
    if runner_ended_cleanly():
        return 0
    try:
        subprocess.run(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       timeout=SCANCEL_TIMEOUT_SECONDS)
    except (OSError, subprocess.TimeoutExpired):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
