"""A stored run bigger than a replay's budget opens bounded, as attaching to it would: the older
metrics thinned per series with each series' last value exact, the oldest samples left out, and
the panel says so. A run within the budget still opens whole (``test_stored_run_typed``)."""

from __future__ import annotations

import pytest

from gui.gateway.store_reads import StoreReads
from gui.models.monitor import MonitorModel
from rankwatch.protocol import GpuSample, MetricRecord
from runner.store.replay_window import DEFAULT_KEEP, ReplayBudget
from runner.store.store import RecordBatch, RunStore

T0 = 1_700_000_000.0
RANKS, STEPS, GPUS = 8, 3_000, 2
NAMES = ("loss", "step_time", "data_wait")
GPU_SECONDS = DEFAULT_KEEP["gpu_samples"] // GPUS + 1_000


@pytest.fixture
def big_run(store: RunStore) -> int:
    """An ended 8-rank run of 72,000 metric records and 12,000 GPU samples: past the default
    budget (20,000 recent records, 30,000 older points, 10,000 GPU samples)."""
    run_id = store.create_run(run_key="big-stored", profile="big", spec_toml="", command=None, host="h", workdir=None,
                              runner_pid=1, socket=None, world_size=RANKS, status="running")
    store.update_run(run_id, started=T0, ended=T0 + STEPS, status="succeeded", exit_code=0)
    for rank in range(RANKS):
        store.upsert_rank(run_id, rank, host="h", state="exited", exit_code=0)
    batch = RecordBatch()
    for step in range(STEPS):
        for rank in range(RANKS):
            batch.metrics += [MetricRecord(rank, T0 + step, step, name, 1.0 + rank + step / STEPS, "auto")
                              for name in NAMES]
    batch.gpu_samples += [GpuSample(T0 + second, gpu, 50.0, 2**30, 80 * 2**30, 300.0, 60.0, 1980.0)
                          for second in range(GPU_SECONDS) for gpu in range(GPUS)]
    store.write_batch(run_id, batch)
    return run_id


def test_a_big_stored_run_is_read_within_the_replay_budget(big_run):
    budget = ReplayBudget()
    with RunStore(readonly=True) as store:
        model = MonitorModel.from_records(StoreReads.run_records(store, big_run, 100))
    points = sum(len(series.values) for name in NAMES for series in model.series(name).values())
    assert points <= budget.metric_tail + 2 * budget.metric_older_points
    end = model.state.history_end
    assert end is not None and end.decimated
    assert end.left_out["gpu_samples"] == GPUS * GPU_SECONDS - DEFAULT_KEEP["gpu_samples"]
    assert end.left_out["metrics"] == RANKS * STEPS * len(NAMES) - points
    last = STEPS - 1
    assert {rank: series.values.last for rank, series in model.series("loss").items()} == {
        rank: 1.0 + rank + last / STEPS for rank in range(RANKS)}  # tables stay exact


def test_the_panel_says_a_big_stored_run_opened_shortened(big_run, qtbot, panel):
    panel.attach(big_run)
    qtbot.waitUntil(lambda: panel.model.run_id == big_run and panel.model.history_done, timeout=20_000)
    qtbot.waitUntil(lambda: "Opened with a shortened history" in panel.failure_banner.text(), timeout=5_000)
    assert f"rankwatch runs logs {big_run}" in panel.failure_banner.text()
