"""Wording and layout found in daily use: verbs on the stop question, events in words rather than
the protocol's kind names, and a banner that appears without moving what is under the mouse.
Real panels watching a real runner with fake ranks (``live_run.py``)."""

from __future__ import annotations

import re

import pytest
from PySide6.QtWidgets import QMessageBox

from gui.gateway.probe import RunnerProbe
from gui.main_window import MainWindow
from gui.widgets.stop_dialog import stop_question

pytestmark = pytest.mark.gui


@pytest.fixture
def panel_size() -> tuple[int, int]:
    return (1280, 720)


def test_the_stop_question_answers_with_verbs(qtbot):
    for force, verbs in ((False, ["Stop run", "Keep running"]), (True, ["Kill now", "Keep waiting"])):
        box = stop_question(None, 12, force)
        qtbot.addWidget(box)
        texts = [button.text() for button in box.buttons()]
        assert sorted(texts) == sorted(verbs) and not {"&Yes", "&No", "Yes", "No"} & set(texts)
        assert box.escapeButton().text() == verbs[1]


def test_the_window_stop_action_asks_with_verbs_and_keep_running_keeps_it(qtbot, tmp_path, live_run, monkeypatch):
    window = MainWindow(probe=RunnerProbe(command=[str(tmp_path / "no-probe")]), initial_profile="example")
    qtbot.addWidget(window)
    runner = live_run(ranks=2)
    window.monitor.attach(runner.run_id)
    qtbot.waitUntil(lambda: window.monitor.model.status == "running", timeout=15_000)
    window._update_run_controls()
    asked: list[list[str]] = []

    def keep_running(box: QMessageBox) -> int:
        asked.append([button.text() for button in box.buttons()])
        for button in box.buttons():
            if button.text() == "Keep running":
                button.click()
        return 0

    monkeypatch.setattr(QMessageBox, "exec", keep_running)
    window.stop_action.trigger()
    assert asked and "Stop run" in asked[0] and "Keep running" in asked[0]
    assert not [message for message in runner.received if message["type"] == "stop"]
    window.monitor.detach()


def test_events_are_shown_in_words_not_kind_names(qtbot, panel, live_run):
    runner = live_run(ranks=2)
    panel.attach(runner.run_id)
    qtbot.waitUntil(lambda: panel.model.status == "running", timeout=15_000)
    runner.finish()
    qtbot.waitUntil(lambda: "Telemetry totals" in panel.events_view.toPlainText(), timeout=10_000)
    text = panel.events_view.toPlainText()
    assert "hub_stats" not in text and "hub counters" not in text
    assert re.search(r"Telemetry totals: [\d,]+ records stored", text)
    assert "Rank started: rank 0 started" in text and "Run finished" in text
    assert not re.search(r"\b[a-z]+_[a-z_]+\b:", text)  # no snake_case kind before a message


def test_the_failure_banner_appears_without_moving_what_is_below(qtbot, panel, live_run):
    runner = live_run(ranks=4, rate_hz=20)
    panel.attach(runner.run_id)
    qtbot.waitUntil(lambda: panel.model.status == "running" and not panel.banner.isVisible(), timeout=15_000)
    qtbot.wait(300)
    before = panel.splitter.geometry()
    assert not panel.failure_banner.isVisible()
    runner.fail_rank(1)  # the others go on: the banner appears mid-run
    qtbot.waitUntil(panel.failure_banner.isVisible, timeout=15_000)
    qtbot.wait(100)
    assert panel.splitter.geometry() == before


def test_the_end_of_run_notice_appears_without_moving_what_is_below(qtbot, panel, live_run):
    """Seen: "Run N finished successfully." pushed the charts down, and a click meant for the
    legend moved the smoothing slider."""
    runner = live_run(ranks=2, rate_hz=20)
    panel.attach(runner.run_id)
    qtbot.waitUntil(lambda: panel.model.status == "running" and panel.notice_text() is None, timeout=15_000)
    qtbot.wait(300)
    before = panel.splitter.geometry()
    runner.finish()
    qtbot.waitUntil(lambda: panel.model.finished and panel.notice_text() is not None, timeout=10_000)
    qtbot.wait(100)
    assert panel.failure_banner.isVisible() and panel.failure_banner.text() == panel.notice_text()
    assert panel.notice_text().startswith(f"Run {runner.run_id} ") and "succeeded" in panel.notice_text()
    assert not panel.failure_banner.details_button.isVisible()  # a notice: no diagnosis behind it
    assert panel.splitter.geometry() == before
