"""The rank table's filter: by state, by rank ranges, by any text of the row, against a real runner."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt

from gui.gateway.run_state import RankInfo, RunInfo, SnapshotMessage
from gui.models.monitor import RANK_COLUMNS, MonitorModel
from gui.models.rank_filter import RankFilter
from gui.widgets import rank_table
from gui.widgets.monitor_panel import MonitorPanel
from gui.widgets.rank_table import RankTable

pytestmark = pytest.mark.gui


def test_a_filter_reads_numbers_as_ranks_and_other_words_as_text_every_row_must_hold():
    stalled = RankFilter.parse("only stalled")
    assert stalled.ranks is None and stalled.words == ("stalled",)
    assert stalled.accepts(3, ["3", "Stalled", "node-a"]) and not stalled.accepts(4, ["4", "running"])
    ranges = RankFilter.parse("ranks 0-2, 512-513 7")
    assert ranges.ranks == frozenset({0, 1, 2, 7, 512, 513}) and ranges.words == ()
    both = RankFilter.parse("4-9 FAILED")
    assert both.accepts(5, ["failed"]) and not both.accepts(3, ["failed"]) and not both.accepts(5, ["running"])
    assert RankFilter.parse("  ").empty and RankFilter.parse("9-7").ranks == frozenset({7, 8, 9})


def test_the_rank_table_shows_only_the_ranks_the_filter_asks_for_and_counts_them(qtbot, live_run):
    panel = MonitorPanel()
    qtbot.addWidget(panel)
    panel.resize(1300, 900)
    panel.show()
    runner = live_run(ranks=16)
    panel.attach(runner.run_id)
    table = panel.rank_table
    qtbot.waitUntil(lambda: table.table_model.rowCount() == 16, timeout=8000)
    runner.fail_rank(3, exit_code=1)
    qtbot.waitUntil(lambda: table.cell_text(3, "State") == "failed", timeout=15_000)
    table.filter_edit.setText("failed")
    assert table.visible_ranks() == [3] and table.filter_count.text() == "1 of 16 ranks"
    table.filter_edit.setText("8-11")
    assert table.visible_ranks() == [8, 9, 10, 11]
    table.filter_edit.setText("8-11 running")
    assert table.visible_ranks() == [8, 9, 10, 11]
    table.filter_edit.setText("0-4 running")
    assert table.visible_ranks() == [0, 1, 2, 4]
    table.filter_edit.clear()
    assert len(table.visible_ranks()) == 16 and table.filter_count.text() == ""
    panel.detach()


def test_sorting_a_thousand_ranks_computes_each_rows_sort_keys_once(qtbot, monkeypatch):
    """Each of the sort's comparisons computed both rows' keys afresh: 28,980 computations for the
    rows' first sort and one by another column at 1,024 ranks, a fifth of the GUI's attach at that
    scale (``scale_gui.py --profile-history``)."""
    computed = []
    real = rank_table.rank_sort_keys
    monkeypatch.setattr(rank_table, "rank_sort_keys", lambda row, *rest: computed.append(row.rank) or real(row, *rest))
    model = MonitorModel()
    model.apply(SnapshotMessage(RunInfo(id=1, status="running", world_size=1024), tuple(
        RankInfo(rank=rank, state="running", step=10 + rank % 7, loss=1.0 + rank / 1000, step_time=0.5, pid=100 + rank)
        for rank in range(1024)), (), {}))
    table = RankTable(model)
    qtbot.addWidget(table)
    table.show()
    computed.clear()
    table.table_model.refresh()  # the rows come: sorted by rank
    table.view.sortByColumn(RANK_COLUMNS.index("Loss"), Qt.SortOrder.DescendingOrder)
    assert sorted(computed) == list(range(1024))
    assert table.table_model.rank_at(table.proxy.mapToSource(table.proxy.index(0, 0)).row()) == 1023
