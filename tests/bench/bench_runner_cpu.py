"""CPU that Rankwatch itself takes during a job: two checkouts side by side, alternating.

Run on demand (not part of the test suite; about 6 minutes for the defaults)::

    git worktree add --detach /tmp/rw-before <commit>
    .venv/bin/python tests/bench/bench_runner_cpu.py /tmp/rw-before . [--rounds 3] [--steps 5000]

Step times cannot resolve a few per cent on a shared 2-core machine (see PERFORMANCE.md,
"What the step times can and cannot say"); CPU seconds per second of run, read from
``/proc`` by ``bench_job_overhead.ProcMonitor``, can. Each round runs the ddp model of
``bench_job_overhead`` (2 ranks, gloo, ``rankwatch run --plain``) once under each
checkout's runner (``python -m runner`` from that checkout), order reversed every other
round, and prints one table row per run: steady step time, the runner process's CPU,
its main thread, its other threads (the store's writer, samplers), each rank's reporter
thread, and the runner main thread's wake-ups per second; then the medians per checkout.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

import bench_job_overhead as job


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkouts", nargs="+", type=Path, help="repository roots to compare")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=5000)
    options = parser.parse_args()
    monitor = argparse.Namespace(sample_every=1.0, timeout=900, startup_seconds=5.0)
    rows: dict[Path, list[tuple[float, ...]]] = {checkout: [] for checkout in options.checkouts}
    print("| checkout | round | steady ms/step | runner CPU ms/s | runner main | other runner threads "
          "| each reporter | runner main wake-ups/s |")
    print("|---|---|---|---|---|---|---|---|")
    for round_number in range(options.rounds):
        order = options.checkouts if round_number % 2 == 0 else options.checkouts[::-1]
        for checkout in order:
            job.REPO = checkout.resolve()
            with tempfile.TemporaryDirectory(dir="/tmp") as folder_name:
                folder = Path(folder_name)
                script = folder / "ddp.py"
                script.write_text(job.DDP_SCRIPT)
                result = job.run_once("rankwatch", script, options.steps, ["512"], folder, monitor)
            threads = result["proc"]["threads"]
            row = (job.step_figures(result["ranks"], 50, 1000)["steady_mean"] * 1e3,
                   result["proc"]["root_cpu_per_s"] * 1e3,
                   threads["runner/main"]["cpu_per_s"] * 1e3,
                   threads["runner/other"]["cpu_per_s"] * 1e3,
                   threads["rank/rankwatch-repor"]["cpu_per_s"] * 1e3,
                   threads["runner/main"]["voluntary_per_s"])
            rows[checkout].append(row)
            print(f"| {checkout} | {round_number + 1} | " + " | ".join(f"{value:.2f}" for value in row) + " |",
                  flush=True)
    print()
    for checkout, measured in rows.items():
        medians = [statistics.median(row[column] for row in measured) for column in range(6)]
        print(f"{checkout} medians: " + ", ".join(f"{value:.2f}" for value in medians))
    return 0


if __name__ == "__main__":
    sys.exit(main())
