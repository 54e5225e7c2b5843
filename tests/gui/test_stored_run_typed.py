"""A stored run is read into the same typed rows a live run arrives in (``runner.runstate.messages``).

The store is written as a newer Rankwatch would leave it (a column this version does not know)
and with a value of the wrong type; the run is then reopened as History reopens it.
"""

from __future__ import annotations

import pytest

from gui.gateway.run_state import NodeInfo, RankInfo, RunInfo
from gui.gateway.store_reads import StoreReads
from gui.models.exits import rank_ended_by
from gui.models.history import HISTORY_COLUMNS, RunRow, history_cells
from gui.models.monitor import NOT_MEASURED, MonitorModel, format_event, summary_lines
from rankwatch.protocol import Event, EventKind, LogLine, MetricRecord
from runner.diagnosis.hints import Hint, HintKey
from runner.diagnosis.summary import RunSummary
from runner.rank_failure import RankFailure
from runner.state import Outcome
from runner.store.rank_stats import RankStats
from runner.store.store import RecordBatch, RunStore

T0 = 1_700_000_000.0
STEPS = 6


@pytest.fixture
def newer_run(store: RunStore) -> int:
    """An ended 2-rank run whose rows carry a column a newer store adds, rank 1's pid stored as
    text, an event with a field a newer hub adds, and an event whose rank is stored as text."""
    run_id = store.create_run(run_key="typed-stored", profile="alpha", spec_toml='script = "train.py"',
                              command=None, host="h", workdir=None, runner_pid=1, socket=None, world_size=2,
                              status="running")
    store.update_run(run_id, started=T0, ended=T0 + STEPS, status="succeeded", exit_code=0)
    store.upsert_rank(run_id, 0, host="h", pid=4242, state="exited", exit_code=0, gpu_index=0)
    store.upsert_rank(run_id, 1, host="h", pid="not a pid", state="exited", exit_code=0)
    store.upsert_node(run_id, 0, "h", "finished", processes=2)
    batch = RecordBatch()
    for step in range(STEPS):
        for rank in range(2):
            batch.metrics.append(MetricRecord(rank, T0 + step, step, "step_time", 0.1, "auto"))
    batch.logs.append(LogLine(0, T0 + 1, "stdout", "epoch 1/3", None))
    batch.events.append(Event(T0 + 1, EventKind.WARNING, 1, "disk almost full", {"newer_field": 7}))
    batch.events.append(Event(T0 + 2, EventKind.STOP_REQUESTED, 0, "stop asked"))
    store.write_batch(run_id, batch)
    with store.connection:
        store.connection.execute("UPDATE events SET rank = 'not a rank' WHERE kind = 'stop_requested'")
        for table in ("runs", "ranks", "nodes"):
            store.connection.execute(f"ALTER TABLE {table} ADD COLUMN numa_node INTEGER")
            store.connection.execute(f"UPDATE {table} SET numa_node = 3")
    return run_id


def test_a_stored_run_is_read_into_the_hubs_typed_rows(newer_run):
    with RunStore(readonly=True) as store:
        records = StoreReads.run_records(store, newer_run, 100)
    assert isinstance(records.run, RunInfo) and (records.run.id, records.run.status) == (newer_run, "succeeded")
    assert records.spec_toml == 'script = "train.py"' and records.spec == {"script": "train.py"}
    assert "spec_toml" not in records.run.extra  # read apart, not sent on as a RUN key
    assert [(isinstance(row, RankInfo), row.rank) for row in records.ranks] == [(True, 0), (True, 1)]
    assert [type(node) for node in records.nodes] == [NodeInfo]
    assert [(type(line), line.line) for line in records.logs] == [(LogLine, "epoch 1/3")]
    assert [(event.kind, event.rank, event.message) for event in records.events] == [
        (EventKind.WARNING, 1, "disk almost full"), (EventKind.STOP_REQUESTED, None, "stop asked")]
    assert isinstance(records.rank_results[0], RankStats) and records.rank_results[0].steps == STEPS


def test_a_reopened_stored_run_keeps_a_newer_stores_keys(newer_run, qtbot, panel):
    panel.attach(newer_run)
    qtbot.waitUntil(lambda: panel.model.run_id == newer_run and panel.model.history_done, timeout=10_000)
    model = panel.model
    assert model.run is not None and model.run.extra["numa_node"] == 3
    assert model.ranks[0].extra["numa_node"] == 3
    assert model.nodes[0].extra["numa_node"] == 3
    event = model.events[0]
    assert isinstance(event, Event) and event.fields["newer_field"] == 7


def test_a_reopened_stored_run_shows_a_malformed_value_as_not_measured(newer_run, qtbot, panel):
    panel.attach(newer_run)
    qtbot.waitUntil(lambda: panel.model.run_id == newer_run and panel.model.history_done, timeout=10_000)
    assert panel.model.ranks[1].pid is None
    panel.rank_table.refresh()
    assert [panel.rank_table.cell_text(rank, "PID") for rank in range(2)] == ["4242", NOT_MEASURED]
    lines = [format_event(event) for event in panel.model.events]
    assert lines[0].endswith("  rank 1  Warning: disk almost full")
    assert lines[1].split("  ", 1)[1] == "Stop requested: stop asked"  # not "rank not a rank  Stop..."


def test_the_summary_lines_and_rank_endings_read_a_typed_summary_as_the_sent_one():
    failure = RankFailure(rank=1, exit_code=1, traceback="Traceback (most recent call last):\n  boom\n")
    summary = RunSummary(outcome=Outcome.FAILED, headline="rank 1 failed", exit_code=1, first_failure=failure,
                         hints=(Hint(HintKey.OTHER, "the data loader died", "look at rank 1"),))
    expected = ("rank 1 failed", ["Hint: the data loader died. look at rank 1", "Traceback of rank 1:",
                                  "Traceback (most recent call last):", "  boom"])
    assert summary_lines(summary) == summary_lines(summary.to_wire()) == expected
    assert rank_ended_by(RankInfo(rank=1, state="failed"), summary, finished=True) == "exit code 1"


def test_the_runs_list_shows_a_malformed_stored_value_as_not_measured(store, tmp_path):
    run_id = store.create_run(run_key="malformed-row", profile="alpha", spec_toml='script = "train.py"',
                              command=None, host="h", workdir=None, runner_pid=1, socket=None, world_size=2,
                              status="running")
    store.update_run(run_id, started=T0, ended=T0 + 9, status="succeeded", exit_code=0)
    with store.connection:
        store.connection.execute("UPDATE runs SET created = 'yesterday', world_size = 'two' WHERE id = ?", (run_id,))
    [listed] = StoreReads.runs(store, 10)
    row = RunRow.from_store(listed)
    cells = dict(zip(HISTORY_COLUMNS, history_cells(row), strict=True))
    assert (row.created, row.world_size) == (0.0, None)
    assert (cells["Run"], cells["Script"], cells["Duration"], cells["Ranks"]) == (str(run_id), "train.py", "0:09", "")


def test_an_event_of_a_newer_kind_is_titled_by_its_kind_live_and_stored(newer_run):
    with RunStore() as store, store.connection:
        store.connection.execute("UPDATE events SET kind = 'gpu_throttled' WHERE kind = 'warning'")
    with RunStore(readonly=True) as store:
        stored = MonitorModel.from_records(StoreReads.run_records(store, newer_run, 100))
    live = MonitorModel()
    live.apply({"type": "update", "t": T0 + 1, "events": [
        {"kind": "gpu_throttled", "t": T0 + 1, "rank": 1, "message": "disk almost full", "newer_field": 7}]})
    [shown] = [format_event(event) for event in live.events]
    assert shown.split("  ", 1)[1] == "rank 1  Gpu throttled: disk almost full"  # not "Warning: ..."
    assert format_event(stored.events[0]) == shown
