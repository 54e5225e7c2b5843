"""The runs list as a comparison table against a real run store: summary columns, a filter,
sortable figures, tags and notes stored with the run."""

from __future__ import annotations

import time

import pytest
from PySide6.QtCore import Qt
from test_history import dead_pid

from gui.models.history import HISTORY_COLUMNS
from gui.widgets.history_panel import HistoryPanel
from rankwatch.protocol import MetricRecord
from runner.store.store import RecordBatch, RunStore

pytestmark = pytest.mark.gui


def add_run(store: RunStore, profile: str, losses: list[float], *, ranks: int = 2, samples_per_s: float = 100.0,
            script: str = "train.py", outcome: str = "succeeded") -> int:
    """A finished run whose every rank reports ``losses`` (one a step), with timed steps."""
    run_id = store.create_run(run_key=f"{profile}-{time.time_ns()}", profile=profile,
                              spec_toml=f'script = "{script}"\n', command="torchrun", host="testhost",
                              workdir="/tmp", runner_pid=dead_pid(), socket=None, world_size=ranks, status="running")
    started = 1_700_000_000.0
    store.update_run(run_id, started=started, ended=started + 90.0, status=outcome, exit_code=0,
                     summary={"outcome": outcome, "headline": outcome, "exit_code": 0})
    batch = RecordBatch()
    for step, loss in enumerate(losses):
        for rank in range(ranks):
            t = started + step
            batch.metrics.append(MetricRecord(rank, t, step, "loss", loss, "auto"))
            batch.metrics.append(MetricRecord(rank, t, step, "step_time", 0.2, "auto"))
            batch.metrics.append(MetricRecord(rank, t, step, "samples_per_s", samples_per_s, "auto"))
    store.write_batch(run_id, batch)
    return run_id




def shown_cells(history_panel: HistoryPanel, column: str) -> list[str]:
    """The column's texts in the order the table shows them (sorted and filtered)."""
    position = HISTORY_COLUMNS.index(column)
    return [history_panel.proxy.index(row, position).data() for row in range(history_panel.proxy.rowCount())]


def cell(history_panel: HistoryPanel, run_id: int, column: str) -> str:
    ids = shown_cells(history_panel, "Run")
    return shown_cells(history_panel, column)[ids.index(str(run_id))]


def test_runs_list_shows_final_and_best_loss_steps_throughput_and_outcome(qtbot, store, history_panel):
    dipping = add_run(store, "alpha", [3.0, 1.5, 0.5, 0.75], ranks=2, samples_per_s=100.0)
    failing = add_run(store, "beta", [2.0, 4.0], ranks=4, samples_per_s=50.0, outcome="failed")
    qtbot.waitUntil(lambda: len(history_panel.rows()) == 2, timeout=15_000)
    assert cell(history_panel, dipping, "Final loss") == "0.75"
    assert cell(history_panel, dipping, "Best loss") == "0.5"
    assert cell(history_panel, dipping, "Steps") == "4"
    assert cell(history_panel, dipping, "Samples/s") == "200"  # two ranks of 100 each
    assert cell(history_panel, dipping, "Outcome") == "succeeded"
    assert cell(history_panel, dipping, "Duration") == "1:30"
    assert (cell(history_panel, failing, "Final loss"), cell(history_panel, failing, "Best loss")) == ("4", "2")
    assert cell(history_panel, failing, "Samples/s") == "200"  # four ranks of 50
    assert cell(history_panel, failing, "Outcome") == "failed"


def test_figure_columns_sort_as_numbers(qtbot, store, history_panel):
    for loss in (10.0, 9.0, 100.0):
        add_run(store, f"p{loss}", [loss])
    qtbot.waitUntil(lambda: len(history_panel.rows()) == 3, timeout=15_000)
    history_panel.view.sortByColumn(HISTORY_COLUMNS.index("Final loss"), Qt.SortOrder.AscendingOrder)
    assert shown_cells(history_panel, "Final loss") == ["9", "10", "100"]  # not "10" < "100" < "9"
    history_panel.view.sortByColumn(HISTORY_COLUMNS.index("Final loss"), Qt.SortOrder.DescendingOrder)
    assert shown_cells(history_panel, "Final loss") == ["100", "10", "9"]


def test_filter_box_keeps_runs_matching_id_profile_script_status_or_tag(qtbot, store, history_panel):
    resnet = add_run(store, "resnet", [1.0], script="train_resnet.py")
    vit = add_run(store, "vit", [1.0], script="train_vit.py", outcome="failed")
    other = add_run(store, "bert", [1.0], script="lm.py")
    store.set_run_notes(other, tags=["baseline"])
    qtbot.waitUntil(lambda: len(history_panel.rows()) == 3, timeout=15_000)

    def shown_ids() -> set[int]:
        return {int(text) for text in shown_cells(history_panel, "Run")}

    qtbot.keyClicks(history_panel.filter_edit, "VIT")
    assert shown_ids() == {vit}
    for text, expected in (("train", {resnet, vit}), ("failed", {vit}), ("baseline", {other}),
                           (str(resnet), {resnet}), ("train resnet", {resnet}), ("", {resnet, vit, other})):
        history_panel.filter_edit.setText(text)
        assert shown_ids() == expected, text


def test_tags_and_notes_are_edited_in_the_panel_and_kept_in_the_store(qtbot, store, history_panel):
    run_id = add_run(store, "alpha", [1.0])
    qtbot.waitUntil(lambda: len(history_panel.rows()) == 1, timeout=15_000)
    history_panel.select_runs([run_id])
    assert history_panel.tags_edit.isEnabled() and history_panel.tags_edit.text() == ""
    history_panel.tags_edit.setText("baseline, lr=3e-4")
    history_panel.notes_edit.setText("warmup too short")
    with qtbot.waitSignal(history_panel.run_notes_saved, timeout=15_000) as saved:
        qtbot.mouseClick(history_panel.save_notes_button, Qt.MouseButton.LeftButton)
    assert saved.args == [run_id]
    with RunStore(readonly=True) as reader:
        assert reader.stored_run(run_id).tags == ("baseline", "lr=3e-4")
        assert reader.stored_run(run_id).notes == "warmup too short"
    qtbot.waitUntil(lambda: cell(history_panel, run_id, "Tags") == "baseline, lr=3e-4", timeout=15_000)

    fresh = HistoryPanel(poll_interval_s=0.2)  # another window reads them back from the store
    qtbot.addWidget(fresh)
    try:
        qtbot.waitUntil(lambda: len(fresh.rows()) == 1, timeout=15_000)
        fresh.select_runs([run_id])
        assert (fresh.tags_edit.text(), fresh.notes_edit.text()) == ("baseline, lr=3e-4", "warmup too short")
    finally:
        fresh.poller.stop()
