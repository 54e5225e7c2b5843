"""The monitor says when the history it was given came shortened (a big run's bounded replay),
in the banner row: the charts' older points are bucket ranges and the oldest lines are missing,
and the store keeps everything. The panel's link delivers the hub's messages as it decodes them."""

from __future__ import annotations

import pytest

from gui.gateway.run_state import HistoryEnd, RankInfo, RunInfo, SnapshotMessage

pytestmark = pytest.mark.gui

SNAPSHOT = SnapshotMessage(RunInfo(id=12, profile="big", status="running", started=1000.0),
                           (RankInfo(rank=0, state="running", step=3),), spec={"args": []})


@pytest.fixture
def panel_size() -> tuple[int, int]:
    return (1280, 720)


@pytest.mark.parametrize(("history_end", "shortened"), [
    (HistoryEnd(decimated=True, left_out={"logs": 2500}), True),
    (HistoryEnd(), False),
])
def test_a_shortened_history_is_said_in_the_banner_row_and_a_whole_one_is_not(qtbot, panel, history_end, shortened):
    for message in (SNAPSHOT, history_end):
        panel.link.message_received.emit(message)
    notice = panel.notice_text() or ""
    assert ("Attached with a shortened history" in notice) is shortened
    if shortened:
        assert "2,500 log lines are not shown" in notice and "rankwatch runs logs 12" in notice
        assert panel.failure_banner.isVisible() and panel.failure_banner.text() == notice
