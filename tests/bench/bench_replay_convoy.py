"""What a replay's store reads cost beside a busy Python thread (the hub's event loop at 1,024 ranks).

Builds a store like a 1,024-rank run's first minute (13 series per rank, 120 steps: 1.6 million
metric records; kept at ``--store`` between runs), then times the replay's reads as the reader
thread makes them (``replay_window.plan_metrics``, then ``older_points`` per series): alone, and
beside a thread that runs Python without pause. Each SQLite call releases the GIL and must win it
back from the busy thread (``sys.getswitchinterval``): a replay of ~50,000 calls waits that often.

    .venv/bin/python tests/bench/bench_replay_convoy.py [--switch-interval 0.005]
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
for _path in (str(REPO), str(REPO / "runner" / "worker_path")):
    if _path not in sys.path:
        sys.path.insert(0, _path)

from rankwatch.protocol import MetricRecord  # noqa: E402
from runner.store import replay_window  # noqa: E402
from runner.store.replay_window import ReplayBudget  # noqa: E402
from runner.store.store import RecordBatch, RunStore  # noqa: E402

RANKS, STEPS = 1024, 120
NAMES = [f"metric_{index}" for index in range(13)]


def build(path: Path) -> None:
    with RunStore(path) as store:
        run_id = store.create_run(run_key="c" * 24, profile="bench", spec_toml="", command="", host="h",
                                  workdir=None, runner_pid=os.getpid(), socket=None, world_size=RANKS,
                                  status="running")
        start = time.time() - 100
        for step in range(STEPS):
            store.write_batch(run_id, RecordBatch(metrics=[
                MetricRecord(rank, start + step / 2, step, name, random.random(), "auto")
                for rank in range(RANKS) for name in NAMES]))


def replay_reads(path: Path) -> tuple[float, float, int]:
    """Seconds to plan the window, seconds to read its older points, points read."""
    with RunStore(path, readonly=True) as store:
        last = store.last_rowids(1)
        started = time.perf_counter()
        window = replay_window.plan_metrics(store.connection, 1, last["metrics"], ReplayBudget())
        planned = time.perf_counter()
        points = sum(len(replay_window.older_points(store.connection, 1, window, series)) for series in window.older)
        return planned - started, time.perf_counter() - planned, points


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", type=Path, default=Path("/tmp/rankwatch-convoy.db"))
    parser.add_argument("--switch-interval", type=float, default=sys.getswitchinterval())
    args = parser.parse_args()
    if not args.store.exists():
        build(args.store)
    sys.setswitchinterval(args.switch_interval)
    plan_s, older_s, points = replay_reads(args.store)
    print(f"alone: plan {plan_s:.2f} s, {points:,} older points {older_s:.2f} s", flush=True)
    stop = threading.Event()

    def busy() -> None:
        count = 0
        while not stop.is_set():
            count += 1

    thread = threading.Thread(target=busy, name="busy", daemon=True)
    thread.start()
    try:
        plan_s, older_s, points = replay_reads(args.store)
    finally:
        stop.set()
        thread.join()
    print(f"beside a busy thread (switch interval {args.switch_interval * 1000:g} ms): plan {plan_s:.2f} s, "
          f"{points:,} older points {older_s:.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
