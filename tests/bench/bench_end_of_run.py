"""The end of a big run: its statistics read off the hub's tally, against computed from the store.

A run's statistics (``runs show``, the History, the summary at the end of ``rankwatch run``) and
its runs-list figures were computed when it ended by reading every record back from the store;
now the hub tallies each record as ingest takes it (``runner.store.statistics_tally``). This
bench makes a run of ``--ranks`` x ``--steps`` step rows as the fake ranks of ``bench_scale.py``
send them (loss, step time, samples, data wait, the phases on the CPU clock: 12 records a step),
and measures:

* the tally's cost on the hub's hot path: microseconds per record of ``RunTally.add``, fed one
  message (``--batch`` steps of one rank) at a time, in rounds alternating with the same
  records going through nothing but a list append (the floor), raw per-round numbers printed;
* reading the statistics off the tally (``RunTally.statistics``);
* with ``--store PATH``: the records written to a real store (once; reused when it exists),
  then ``computed_run_statistics`` and ``computed_run_figures`` on it, what the hub did before.

    python tests/bench/bench_end_of_run.py --ranks 1024 --steps 1200 --store /tmp/big/runs.db
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO), str(REPO / "runner" / "worker_path")]

import psutil  # noqa: E402

from rankwatch import protocol  # noqa: E402
from runner.store import rank_stats, run_figures  # noqa: E402
from runner.store.statistics_tally import RunTally  # noqa: E402
from runner.store.store import RecordBatch, RunStore  # noqa: E402

SPLIT = (0.03, 0.30, 0.45, 0.10, 0.08, 0.04)
T0 = 1_700_000_000.0


def step_rows(ranks: int, steps: int) -> list[list[protocol.MetricRow]]:
    """Per step, every rank's records of that step (``step_row_records`` of a fake rank's row)."""
    rngs = [random.Random(rank) for rank in range(ranks)]
    by_step = []
    for step in range(steps):
        records: list[protocol.MetricRow] = []
        for rank in range(ranks):
            rng = rngs[rank]
            step_time = 0.5 * (1 + 0.1 * rng.random())
            wait = step_time * (0.05 + 0.05 * rng.random())
            loss = 2.3 * math.exp(-step / 500.0) + 0.05 * rng.random()
            row = [T0 + step * 0.5 + rank * 1e-5, step, loss, step_time, wait, 32, None, False,
                   [protocol.CLOCK_CPU, wait, *((step_time - wait) * share for share in SPLIT)]]
            records += protocol.step_row_records(rank, row)
        by_step.append(records)
    return by_step


def messages(by_step: list[list[protocol.MetricRow]], ranks: int, batch: int) -> list[tuple[int, list]]:
    """One rank's ``batch`` steps per message, ranks interleaved, as a hub receives them."""
    found = []
    for first in range(0, len(by_step), batch):
        for rank in range(ranks):
            found.append((rank, [record for records in by_step[first:first + batch]
                                 for record in records if record[0] == rank]))
    return found


def write_store(path: Path, by_step: list[list[protocol.MetricRow]], ranks: int) -> int:
    with RunStore(path) as store:
        run_id = store.create_run(run_key="bench-end", profile=None, spec_toml="", command=None, host="bench",
                                  workdir=None, runner_pid=1, socket=None, world_size=ranks, status="running")
        for step, records in enumerate(by_step):
            rows = [(rank, {"state": "running"}) for rank in range(ranks)] if step == 0 else []
            store.write_batch(run_id, RecordBatch(metrics=records), rows)
        return run_id


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=1200)
    parser.add_argument("--batch", type=int, default=2, help="steps of one rank in one message (default 2)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--store", type=Path, help="also write (or reuse) this store and time the computation")
    args = parser.parse_args()
    by_step = step_rows(args.ranks, args.steps)
    sent = messages(by_step, args.ranks, args.batch)
    total = sum(len(records) for _rank, records in sent)
    print(f"{args.ranks} ranks x {args.steps} steps: {total:,} records in {len(sent):,} messages", flush=True)
    tally_us, floor_us = [], []
    for round_number in range(args.rounds):
        floor: list = []
        started = time.perf_counter()
        for _rank, records in sent:
            floor += records
        floor_us.append((time.perf_counter() - started) / total * 1e6)
        tally = RunTally()
        started = time.perf_counter()
        for rank, records in sent:
            tally.add(rank, records)
        tally_us.append((time.perf_counter() - started) / total * 1e6)
        print(f"round {round_number + 1}: tally.add {tally_us[-1]:.3f} us/record, list append {floor_us[-1]:.3f}",
              flush=True)
    del tally  # the last round's: what one tally holds is measured from here
    before = psutil.Process().memory_info().rss
    tally = RunTally()
    for rank, records in sent:
        tally.add(rank, records)
    held_mb = (psutil.Process().memory_info().rss - before) / 1e6
    started = time.perf_counter()
    tallied = tally.statistics()
    read_s = time.perf_counter() - started
    print(f"tally: median {statistics.median(tally_us):.3f} us/record (floor {statistics.median(floor_us):.3f});"
          f" statistics read off in {read_s * 1000:.0f} ms; the tally holds ~{held_mb:.0f} MB (RSS growth)",
          flush=True)
    if args.store is None:
        return
    if not args.store.exists():
        started = time.perf_counter()
        write_store(args.store, by_step, args.ranks)
        print(f"store written in {time.perf_counter() - started:.0f} s", flush=True)
    with RunStore(args.store) as store:
        run_id = store.runs(limit=1)[0].id
        started = time.perf_counter()
        kept = rank_stats.statistics_with(store, run_id, tallied.ranks, tallied.logged)
        with_store_s = time.perf_counter() - started
        started = time.perf_counter()
        computed = rank_stats.computed_run_statistics(store, run_id)
        statistics_s = time.perf_counter() - started
        started = time.perf_counter()
        figures = run_figures.computed_run_figures(store, [run_id])[run_id]
        figures_s = time.perf_counter() - started
    same = [entry.steps for entry in kept[0]] == [entry.steps for entry in computed[0]] and all(
        math.isclose(ours.median_step_time or 0, theirs.median_step_time or 0, rel_tol=1e-3)
        for ours, theirs in zip(kept[0], computed[0], strict=True))
    print(f"tallied, with the store's rank rows and GPU samples: {with_store_s:.2f} s;"
          f" computed from the store: statistics {statistics_s:.1f} s + runs-list figures {figures_s:.1f} s;"
          f" steps and median step times agree: {same}; final loss {tallied.run.final_loss if tallied.run else None}"
          f" vs {figures.final_loss}", flush=True)


if __name__ == "__main__":
    main()
