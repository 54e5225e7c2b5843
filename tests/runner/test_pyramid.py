"""The metric pyramid on a real store: old detail becomes one point per bucket (its mean, count and
range), recent detail stays, counts and `runs show` stay right, and a long run stays small."""

from __future__ import annotations

import asyncio
import os
import statistics
import time

from rankwatch.protocol import MetricRecord
from runner.store.pyramid import DAY, compact_run, levels
from runner.store.rank_stats import run_statistics
from runner.store.store import RecordBatch, RunStore
from tests.hubs import open_hub

HOUR = 3600.0
NAMES = ("loss", "step_time", "data_wait")


def step_records(rank: int, start: float, seconds: float, per_second: float = 2.0) -> list[MetricRecord]:
    """A rank's zero-code records: every step a loss, a step time and a data wait, ``per_second`` steps."""
    steps = int(seconds * per_second)
    records = []
    for step in range(steps):
        t = start + step / per_second
        records += [MetricRecord(rank, t, step, "loss", 2.0 / (1 + step / 1000) + (step % 7) * 0.01, "auto"),
                    MetricRecord(rank, t, step, "step_time", 0.5 + (step % 5) * 0.01, "auto"),
                    MetricRecord(rank, t, step, "data_wait", 0.02, "auto")]
    return records


def new_run(store: RunStore) -> int:
    return store.create_run(run_key=f"k{time.time_ns()}", profile="p", spec_toml="", command=None, host="h",
                            workdir=None, runner_pid=os.getpid(), socket=None, world_size=2, status="running")


def write(store: RunStore, run_id: int, records: list[MetricRecord]) -> None:
    for start in range(0, len(records), 50_000):
        store.write_batch(run_id, RecordBatch(metrics=records[start:start + 50_000]))


def test_three_hours_keep_the_last_hour_in_full_and_the_rest_as_exact_bucket_summaries():
    end = time.time()
    start = end - 3 * HOUR
    with RunStore() as store:
        run_id = new_run(store)
        originals = {rank: step_records(rank, start, 3 * HOUR) for rank in (0, 1)}
        for records in originals.values():
            write(store, run_id, records)
        before_rows = store.count("metrics", run_id)
        stats_before, _ = run_statistics(store, run_id)

        replaced = compact_run(store.connection, run_id, now=end)
        rows = store.connection.execute(
            "SELECT rowid, rank, step, t, name, value, n, low, high FROM metrics WHERE run_id = ? ORDER BY rowid",
            (run_id,)).fetchall()
        stats_after, _ = run_statistics(store, run_id)

    last_hour, older_buckets = 2 * 3 * 7200, 2 * 3 * 720  # rows of the last hour; 10 s buckets of two hours
    assert before_rows == 3 * last_hour and len(rows) < last_hour + older_buckets + 6 * 2 * 10  # + a bucket's edge
    assert replaced == before_rows - len(rows) + sum(1 for r in rows if r["n"] is not None)
    full, points = [r for r in rows if r["n"] is None], [r for r in rows if r["n"] is not None]
    old_records = [r for r in full if r["t"] < end - HOUR - 10]  # beyond the last hour (and a bucket's edge)
    assert all(r["t"] < start + 10 for r in old_records)  # only a series' first record, alone in its bucket
    assert all(r["t"] < end - HOUR for r in points)
    # every record is counted once: per rank and name, the points' n plus the full rows
    for rank in (0, 1):
        for name in NAMES:
            counted = sum(r["n"] or 1 for r in rows if r["rank"] == rank and r["name"] == name)
            assert counted == len([x for x in originals[rank] if x.name == name])
    # a point is its bucket's mean and range, at the time and step of its newest record
    point = next(r for r in points if r["rank"] == 1 and r["name"] == "loss")
    width = levels()[0].width
    members = [x for x in originals[1] if x.name == "loss" and int(x.t // width) == int(point["t"] // width)]
    assert point["n"] == len(members) > 1
    assert abs(point["value"] - statistics.fmean(x.value for x in members)) < 1e-12
    assert (point["low"], point["high"]) == (min(x.value for x in members), max(x.value for x in members))
    assert (point["t"], point["step"]) == (max(x.t for x in members), max(x.step for x in members))
    # read in row order (as attach replays), each curve still goes forward in time
    for rank in (0, 1):
        for name in NAMES:
            times = [r["t"] for r in rows if r["rank"] == rank and r["name"] == name]
            assert times == sorted(times)
    # what `runs show` says is unchanged: steps, last loss; the median step time within its spread
    for before, after in zip(stats_before, stats_after, strict=True):
        assert (after.steps, after.last_step, after.last_loss) == (before.steps, before.last_step, before.last_loss)
        assert abs(after.median_step_time - before.median_step_time) <= 0.02


def test_a_simulated_three_day_run_stays_within_its_bound_and_compacting_again_changes_nothing():
    """One rank for three days at a step every 2 s (time-compressed: written a day at a time and
    compacted as the hub would have): 388,800 records become under 20,000 rows."""
    end, rate, per_day = time.time(), 0.5, int(DAY * 0.5)
    with RunStore() as store:
        run_id = new_run(store)
        for day in range(3):
            write(store, run_id, [MetricRecord(0, r.t, r.step + day * per_day, r.name, r.value, r.source)
                                  for r in step_records(0, end - (3 - day) * DAY, DAY, rate)])
            compact_run(store.connection, run_id, now=end - (2 - day) * DAY)  # the hub compacts as it goes
        compact_run(store.connection, run_id, now=end)
        rows = store.count("metrics", run_id)
        again = compact_run(store.connection, run_id, now=end)
        counted = store.connection.execute("SELECT SUM(COALESCE(n, 1)) FROM metrics WHERE run_id = ?",
                                           (run_id,)).fetchone()[0]
    assert counted == 3 * per_day * 3
    full_hour, ten_seconds, five_minutes = 3 * 3600 * rate, 3 * 23 * 360, 3 * 2 * 288  # per 3 series
    assert rows < (full_hour + ten_seconds + five_minutes) * 1.05
    assert again == 0


def test_the_hub_compacts_a_live_run_but_not_under_a_replay(tmp_path):
    async def scenario():
        hub, _socket = await open_hub(tmp_path)
        now = time.time()
        records = step_records(0, now - 2 * HOUR, HOUR)  # an hour of records from two hours ago
        await hub.writer.call(lambda store: write(store, hub.run_id, records))
        hub.compactor.replaying = lambda: True
        await hub.compactor.compact_now()
        waited = hub.stats["compacted_rows"]
        hub.compactor.replaying = lambda: False
        await hub.compactor.compact_now()
        compacted = hub.stats["compacted_rows"]
        await hub.close()
        return waited, compacted, len(records)
    waited, compacted, written = asyncio.run(scenario())
    assert waited == 0 and written - compacted < written / 100  # a bucket of one record stays as it came
    with RunStore(tmp_path / "runs.db", readonly=True) as store:
        assert store.connection.execute("SELECT COUNT(*) FROM metrics WHERE n IS NULL").fetchone()[0] == \
            written - compacted
