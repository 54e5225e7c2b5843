"""Writing a big run into the store as it grows: the log's checkpoint size, SQLite's default (which
the store keeps) against a 64k-page log.

Each commit of a big run touches one index page per series (``metrics_by_series``: rank and
metric name), wherever that series' newest records are; once the index is larger than a
commit, that is a page per series per commit. This bench writes ``--ranks`` fake ranks'
step rows (12 records each, as ``bench_scale.py``'s fake ranks send them) into a fresh store,
one commit per step as the hub's writer does at that rate, and prints the milliseconds per
step over the first and the last 50 steps, the p95 and the slowest commit (a checkpoint stalls
the commit that triggers it), and the total (the last checkpoint included). It
alternates, round by round, SQLite's default checkpoint (1,000 pages) with a 64k-page log, each
round in a fresh file. The bigger log made the average commit twice as cheap, and its
checkpoints stalled the commits that fell due (p95 and slowest worse): not kept.

    python tests/bench/bench_store_growth.py --ranks 1024 --steps 300 --rounds 2 --dir /tmp/growth
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO), str(REPO / "runner" / "worker_path")]

from rankwatch import protocol  # noqa: E402
from runner.store.store import RecordBatch, RunStore  # noqa: E402

SPLIT = (0.03, 0.30, 0.45, 0.10, 0.08, 0.04)
SQLITE_DEFAULT_PAGES = 1000
BIG_LOG_PAGES = 65_536


def write_run(path: Path, ranks: int, steps: int, checkpoint_pages: int) -> dict:
    for suffix in ("", "-wal", "-shm", "-reserve"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    rng = random.Random(0)
    per_step: list[float] = []
    started = time.perf_counter()
    cpu = time.process_time()
    with RunStore(path) as store:
        store.connection.execute(f"PRAGMA wal_autocheckpoint={checkpoint_pages}")
        run_id = store.create_run(run_key="growth", profile=None, spec_toml="", command=None, host="bench",
                                  workdir=None, runner_pid=1, socket=None, world_size=ranks, status="running")
        for step in range(steps):
            records: list[protocol.MetricRow] = []
            for rank in range(ranks):
                step_time = 0.5 * (1 + 0.1 * rng.random())
                wait = 0.05 * step_time
                row = [1.7e9 + step * 0.5 + rank * 1e-5, step, 2.0 - step / steps, step_time, wait, 32, None, False,
                       [protocol.CLOCK_CPU, wait, *((step_time - wait) * share for share in SPLIT)]]
                records += protocol.step_row_records(rank, row)
            begun = time.perf_counter()
            store.write_batch(run_id, RecordBatch(metrics=records))
            per_step.append(time.perf_counter() - begun)
    ordered = sorted(per_step)
    return {"first_ms": statistics.median(per_step[:50]) * 1000, "last_ms": statistics.median(per_step[-50:]) * 1000,
            "p95_ms": ordered[int(0.95 * (len(ordered) - 1))] * 1000, "max_ms": ordered[-1] * 1000,
            "total_s": time.perf_counter() - started, "cpu_s": time.process_time() - cpu}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--dir", type=Path, default=Path("/tmp/rankwatch-store-growth"))
    args = parser.parse_args()
    args.dir.mkdir(parents=True, exist_ok=True)
    results: dict[str, list[dict]] = {"sqlite default": [], "64k pages": []}
    for round_number in range(1, args.rounds + 1):
        for name, pages in (("sqlite default", SQLITE_DEFAULT_PAGES), ("64k pages", BIG_LOG_PAGES)):
            found = write_run(args.dir / "runs.db", args.ranks, args.steps, pages)
            results[name].append(found)
            print(f"round {round_number} {name} ({pages} pages): first 50 steps {found['first_ms']:.0f} ms,"
                  f" last 50 {found['last_ms']:.0f} ms a step; p95 {found['p95_ms']:.0f}, slowest {found['max_ms']:.0f} ms;"
                  f" total {found['total_s']:.1f} s"
                  f" (CPU {found['cpu_s']:.1f} s)", flush=True)
    old, new = results["sqlite default"], results["64k pages"]
    print("ratios default/64k, per round: last-50 ms " + ", ".join(
        f"{a['last_ms'] / b['last_ms']:.2f}" for a, b in zip(old, new, strict=True)) + "; total " + ", ".join(
        f"{a['total_s'] / b['total_s']:.2f}" for a, b in zip(old, new, strict=True)))


if __name__ == "__main__":
    main()
