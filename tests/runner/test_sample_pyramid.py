"""The sample pyramid on a real store: GPU and process samples older than the full-detail window
become one row per GPU or rank and bucket (the mean, at the newest sample's time, pid and row
id), recent samples stay, and a long run's samples stop growing with time."""

from __future__ import annotations

import asyncio
import time

from rankwatch.protocol import GpuSample, ProcessSample
from runner.store.pyramid import DAY, levels
from runner.store.sample_pyramid import compact_samples
from runner.store.store import RecordBatch, RunStore
from tests.hubs import open_hub
from tests.runner.test_pyramid import new_run

HOUR = 3600.0


def gpu_samples(start: float, seconds: float, gpus: int = 2) -> list[GpuSample]:
    """A sample a second per GPU: utilisation cycling 0..99, memory growing a MiB a second."""
    return [GpuSample(start + second, gpu, float((second + gpu) % 100), 2**30 + second * 2**20, 80 * 2**30,
                      300.0 + gpu, 60.0, 1980.0)
            for second in range(int(seconds)) for gpu in range(gpus)]


def process_samples(start: float, seconds: float, ranks: int = 2, restart_at: int | None = None) -> list[ProcessSample]:
    """A sample a second per rank; the rank's pid changes at ``restart_at`` seconds (a restart)."""
    return [ProcessSample(start + second, rank, 1000 + rank + (500 if restart_at is not None and second >= restart_at
                                                                 else 0),
                          float(second % 200), 2**31 + second, 8)
            for second in range(int(seconds)) for rank in range(ranks)]


def write(store: RunStore, run_id: int, gpus: list[GpuSample], procs: list[ProcessSample]) -> None:
    for start in range(0, max(len(gpus), len(procs)), 50_000):
        store.write_batch(run_id, RecordBatch(gpu_samples=gpus[start:start + 50_000],
                                              process_samples=procs[start:start + 50_000]))


def rows(store: RunStore, sql: str, *params: object) -> list[tuple[object, ...]]:
    return [tuple(row) for row in store.connection.execute(sql, params).fetchall()]


def test_three_hours_of_samples_keep_the_last_hour_in_full_and_the_rest_as_bucket_means():
    end = float(int(time.time() // 10 * 10))
    start = end - 3 * HOUR
    restart = int(1.5 * HOUR) + 4  # mid-bucket: the bucket keeps the newest pid
    with RunStore() as store:
        run_id = new_run(store)
        write(store, run_id, gpu_samples(start, 3 * HOUR), process_samples(start, 3 * HOUR, restart_at=restart))
        old = (run_id, end - HOUR)
        before = rows(store, "SELECT gpu_index, AVG(utilization), AVG(memory_used) FROM gpu_samples"
                             " WHERE run_id = ? AND t < ? GROUP BY gpu_index ORDER BY gpu_index", *old)
        cpu_before = rows(store, "SELECT rank, AVG(cpu_percent) FROM process_samples WHERE run_id = ? AND t < ?"
                                 " GROUP BY rank ORDER BY rank", *old)
        replaced = compact_samples(store.connection, run_id, now=end)
        per_gpu = rows(store, "SELECT gpu_index, COUNT(*) FROM gpu_samples WHERE run_id = ? AND t < ?"
                              " GROUP BY gpu_index", *old)
        recent = rows(store, "SELECT COUNT(*) FROM gpu_samples WHERE run_id = ? AND t >= ?", *old)
        after = rows(store, "SELECT gpu_index, AVG(utilization), AVG(memory_used) FROM gpu_samples"
                            " WHERE run_id = ? AND t < ? GROUP BY gpu_index ORDER BY gpu_index", *old)
        cpu_after = rows(store, "SELECT rank, AVG(cpu_percent) FROM process_samples WHERE run_id = ? AND t < ?"
                                " GROUP BY rank ORDER BY rank", *old)
        restarted_bucket = rows(store, "SELECT pid, t FROM process_samples WHERE run_id = ? AND rank = 0"
                                       " AND t >= ? AND t < ?", run_id, start + restart - 4, start + restart + 6)
        in_row_order = [t for (t,) in rows(store, "SELECT t FROM process_samples WHERE run_id = ? AND rank = 1"
                                                  " ORDER BY rowid", run_id)]
        memory_types = {type(value) for (value,) in rows(store, "SELECT memory_used FROM gpu_samples")}
        again = compact_samples(store.connection, run_id, now=end)
    assert per_gpu == [(0, 2 * 360), (1, 2 * 360)]  # two hours of 10 s buckets per GPU
    assert recent == [(2 * 3600,)]  # the last hour as it came
    assert replaced == 2 * 2 * 2 * 3600  # both tables, two keys each, two hours a sample a second
    for (gpu, utilization, memory), (gpu_after, utilization_after, memory_after) in zip(before, after, strict=True):
        assert gpu == gpu_after and abs(utilization - utilization_after) < 1e-9
        assert abs(memory - memory_after) < 1.0  # whole bytes, rounded per bucket
    assert [(rank, round(cpu, 9)) for rank, cpu in cpu_before] == [(rank, round(cpu, 9)) for rank, cpu in cpu_after]
    assert restarted_bucket == [(1500, start + restart + 5)]  # the newest sample's pid and time
    assert in_row_order == sorted(in_row_order)
    assert memory_types == {int}
    assert again == 0


def test_three_days_of_samples_stay_within_their_bound():
    """One GPU and one rank for three days, a sample every 2 s (time-compressed: written a day at
    a time and compacted as the hub would have): the rows kept are the last hour in full, 10 s
    buckets to a day and 5 min buckets beyond, whatever the run's length."""
    end = float(int(time.time() // 300 * 300))
    with RunStore() as store:
        run_id = new_run(store)
        for day in range(3):
            day_start = end - (3 - day) * DAY
            write(store, run_id, [s for s in gpu_samples(day_start, DAY, gpus=1) if int(s.t) % 2 == 0],
                  [s for s in process_samples(day_start, DAY, ranks=1) if int(s.t) % 2 == 0])
            compact_samples(store.connection, run_id, now=end - (2 - day) * DAY)
        compact_samples(store.connection, run_id, now=end)
        kept = {table: store.count(table, run_id) for table in ("gpu_samples", "process_samples")}
    full_hour, ten_seconds, five_minutes = 1800, 23 * 360, 2 * 288
    assert kept == {"gpu_samples": full_hour + ten_seconds + five_minutes,
                    "process_samples": full_hour + ten_seconds + five_minutes}


def test_the_hub_compacts_a_live_runs_samples_but_not_under_a_replay(tmp_path):
    now = time.time()
    gpus, procs = gpu_samples(now - 2 * HOUR, HOUR), process_samples(now - 2 * HOUR, HOUR)

    async def scenario():
        hub, _socket = await open_hub(tmp_path)
        await hub.writer.call(lambda store: write(store, hub.run_id, gpus, procs))
        hub.compactor.replaying = lambda: True
        await hub.compactor.compact_now(now)
        waited = hub.stats["compacted_samples"]
        hub.compactor.replaying = lambda: False
        await hub.compactor.compact_now(now)
        compacted = hub.stats["compacted_samples"]
        run_id = hub.run_id
        await hub.close()
        return waited, compacted, run_id
    waited, compacted, run_id = asyncio.run(scenario())
    width = levels()[0].width
    cutoff = (now - HOUR) // width * width
    expected = {(key, t // width if t < cutoff else t) for key, t in
                [(("gpu", s.gpu_index), s.t) for s in gpus] + [(("rank", s.rank), s.t) for s in procs]}
    assert waited == 0
    old = sum(1 for s in [*gpus, *procs] if s.t < cutoff)
    assert old - 4 <= compacted <= old  # all but a first bucket of one sample per GPU or rank
    with RunStore(tmp_path / "runs.db", readonly=True) as store:
        kept = store.count("gpu_samples", run_id) + store.count("process_samples", run_id)
    assert kept == len(expected)  # one row per GPU or rank and old bucket, the rest as it came
