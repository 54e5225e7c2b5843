"""A catch-up (the rows committed while a replay went on) sends the newest row of each metric
series, GPU and rank's process in its range, and how many rows they stand for: it reads the
range, not the run (``replay_window.latest_rows``). A real SQLite store, written through its API.
"""

from __future__ import annotations

import os

from rankwatch.protocol import GpuSample, MetricRecord, ProcessSample
from runner.store import replay_window
from runner.store.store import RECORD_CLASSES, RecordBatch, RunStore


def columns(table: str) -> str:
    return RunStore.RECORD_TABLES[table][1]


def test_a_catch_up_sends_the_newest_row_of_each_series_gpu_and_process_in_its_range(tmp_path):
    with RunStore(tmp_path / "runs.db") as store:
        run_id = store.create_run(run_key="c" * 24, profile="p", spec_toml="", command="", host="h", workdir=None,
                                  runner_pid=os.getpid(), socket=None, world_size=2, status="running")
        store.write_batch(run_id, RecordBatch(  # before the range: a replay sent these
            metrics=[MetricRecord(rank, 1.0, 1, "loss", 9.0, "auto") for rank in range(2)],
            gpu_samples=[GpuSample(1.0, gpu, 9.0, 1, 2, None, None, None) for gpu in range(2)],
            process_samples=[ProcessSample(1.0, rank, 100 + rank, 9.0, 1, 1) for rank in range(2)]))
        before = store.last_rowids(run_id)
        for step in range(2, 12):
            store.write_batch(run_id, RecordBatch(
                metrics=[MetricRecord(rank, float(step), step, name, float(step), "auto")
                         for rank in range(2) for name in ("loss", "lr")],
                gpu_samples=[GpuSample(float(step), gpu, float(step), 1, 2, None, None, None) for gpu in range(2)],
                process_samples=[ProcessSample(float(step), rank, 100 + rank, float(step), 1, 1) for rank in range(2)]))
        last = store.last_rowids(run_id)

        newest = {table: replay_window.latest_rows(store.connection, table, columns(table), RECORD_CLASSES[table],
                                                   run_id, before[table], last[table])
                  for table in ("metrics", "gpu_samples", "process_samples")}

    assert sorted(newest["metrics"].rows) == sorted(MetricRecord(rank, 11.0, 11, name, 11.0, "auto")
                                                    for rank in range(2) for name in ("loss", "lr"))
    assert newest["metrics"].records == 40
    assert sorted(newest["gpu_samples"].rows) == [GpuSample(11.0, gpu, 11.0, 1, 2, None, None, None) for gpu in range(2)]
    assert newest["gpu_samples"].records == 20
    assert sorted(newest["process_samples"].rows) == [ProcessSample(11.0, rank, 100 + rank, 11.0, 1, 1)
                                                      for rank in range(2)]
    assert newest["process_samples"].records == 20
    assert all(type(row) is RECORD_CLASSES[table] for table, latest in newest.items() for row in latest.rows)
