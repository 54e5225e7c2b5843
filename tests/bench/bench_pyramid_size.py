"""The store size of a long run with the metric pyramid (``runner.store.pyramid``).

One rank, three days at 2 steps/s with three metrics per step, written a day at a time into a
real store (time stamps three days back) and compacted after each day as the hub would have,
then once more at the end and ``VACUUM``ed. Prints the size of one day in full and of the three
days kept, and how long each day's compaction took.

    .venv/bin/python tests/bench/bench_pyramid_size.py
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "runner" / "worker_path"))

from rankwatch.protocol import MetricRecord
from runner.store.prune import store_bytes
from runner.store.pyramid import DAY, compact_run
from runner.store.store import RunStore
from tests.runner.test_pyramid import new_run, step_records, write


def main() -> None:
    os.environ["RANKWATCH_HOME"] = tempfile.mkdtemp(prefix="rankwatch-pyramid-")
    end = time.time()
    with RunStore() as store:
        run_id = new_run(store)
        one_day_full = 0
        for day in range(3):
            write(store, run_id, [MetricRecord(0, r.t, r.step + day * 172_800, r.name, r.value, r.source)
                                  for r in step_records(0, end - (3 - day) * DAY, DAY)])
            if day == 0:
                store.connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                one_day_full = store_bytes(store.path)
            started = time.perf_counter()
            compact_run(store.connection, run_id, now=end - (2 - day) * DAY)
            print(f"day {day}: compacted in {time.perf_counter() - started:.1f} s", flush=True)
        compact_run(store.connection, run_id, now=end)
        rows = store.count("metrics", run_id)
        store.connection.execute("VACUUM")
        store.connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        print(f"one day in full: {one_day_full:,} bytes; three days kept: {store_bytes(store.path):,} bytes, "
              f"{rows:,} rows")


if __name__ == "__main__":
    main()
