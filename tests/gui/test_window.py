"""The window's desktop habits against real panels and real runners with fake ranks (``live_run.py``):
several runs at once in tabs, a notification and the title when a run ends unseen, the Help menu, Ctrl+F."""

from __future__ import annotations

from pathlib import Path

import pytest
from live_run import LiveRun
from PySide6.QtGui import QKeySequence
from PySide6.QtWidgets import QApplication, QMessageBox

from gui.gateway.probe import RunnerProbe
from gui.main_window import LEAVE_RUNNING, MainWindow, app_version
from gui.widgets.monitor_panel import MonitorPanel

pytestmark = [pytest.mark.gui, pytest.mark.usefixtures("unanswered_dialogs_cancel")]


def answer_with(box: QMessageBox, text: str) -> int:
    """Click the dialog's button labelled ``text``, as a person would (a dialog without one, as
    the close at the end of a test asks, is left unanswered: cancelled)."""
    for button in box.buttons():
        if button.text() == text:
            button.click()
    return 0


@pytest.fixture
def runners():
    started: list[LiveRun] = []

    def start(**options) -> LiveRun:
        runner = LiveRun(**options).start()
        started.append(runner)
        return runner

    yield start
    for runner in started:
        runner.close()


@pytest.fixture
def window(qtbot, tmp_path, monkeypatch):
    window = MainWindow(probe=RunnerProbe(command=[str(tmp_path / "no-probe")]), initial_profile="example")
    qtbot.addWidget(window)
    window.resize(1300, 900)
    window.show()
    yield window
    for panel in window.monitors.panels():
        panel.detach()


def launch_into(window: MainWindow, runner: LiveRun, monkeypatch) -> MonitorPanel:
    """Launch from the form as Ctrl+R does; the panel it lands in watches ``runner`` (a runner
    with fake ranks stands in for the detached runner the real launch starts)."""
    monkeypatch.setattr(MonitorPanel, "launch", lambda panel, spec, name, base_dir: panel.attach(runner.run_id))
    window._on_launch_requested(window.form.evaluation.spec, "example", Path.cwd())
    return window.monitor


def test_launching_while_a_run_is_live_opens_a_tab_for_each_run(qtbot, window, runners, monkeypatch):
    assert window.monitors.count() == 1 and window.monitors.tabBar().isHidden()
    first_runner, second_runner = runners(ranks=2), runners(ranks=4)
    first = launch_into(window, first_runner, monkeypatch)
    qtbot.waitUntil(lambda: first.model.status == "running", timeout=15_000)
    second = launch_into(window, second_runner, monkeypatch)
    assert second is not first and window.monitors.count() == 2
    qtbot.waitUntil(lambda: second.model.status == "running", timeout=15_000)
    assert first.has_live_run() and second.has_live_run()  # both watched at once
    assert window.monitors.tabText(0) == f"Run {first_runner.run_id}"
    assert window.monitors.tabText(1) == f"Run {second_runner.run_id}"
    assert not window.monitors.tabBar().isHidden()
    assert f"Run {second_runner.run_id}: running" in window.run_label.text() and "2 runs live" in window.run_label.text()

    # History opens a run in its tab; the stop action acts on the tab in front.
    window._on_open_run_requested(first_runner.run_id)
    assert window.monitor is first and window.monitors.count() == 2
    stopped = []
    monkeypatch.setattr(QMessageBox, "exec", lambda box: answer_with(box, "Stop run"))
    monkeypatch.setattr(first, "request_stop", lambda force=False: stopped.append(first.run_id))
    window.stop_action.trigger()
    assert stopped == [first_runner.run_id]

    # Closing a live run's tab asks; "leave it running" detaches and the job goes on.
    monkeypatch.setattr(window.monitors, "ask_live_run_choice", lambda text: LEAVE_RUNNING)
    window.close_run_action.trigger()
    assert window.monitors.count() == 1 and window.monitor is second
    qtbot.waitUntil(lambda: first_runner.subscriber_count() == 0, timeout=15_000)
    assert not first_runner.ended


def test_a_run_that_ends_unseen_is_notified_and_named_in_the_title(qtbot, window, runners, monkeypatch):
    runner = runners(ranks=2)
    panel = launch_into(window, runner, monkeypatch)
    qtbot.waitUntil(lambda: panel.model.status == "running", timeout=15_000)
    window.tabs.setCurrentWidget(window.launch_panel)  # looking at the form meanwhile
    assert window.notifier.sent == []
    runner.finish(exit_code=1)  # every rank fails: the run failed
    qtbot.waitUntil(lambda: bool(window.notifier.sent), timeout=15_000)
    notice = window.notifier.sent[0]
    assert notice.title == f"Run {runner.run_id} (fake) failed" and notice.urgent
    assert window.windowTitle().startswith(f"✗ Run {runner.run_id} failed — example")
    # Once the run is looked at, the title is the profile's again.
    window.activateWindow()
    qtbot.waitUntil(window.isActiveWindow, timeout=15_000)
    window.tabs.setCurrentWidget(window.monitors)
    qtbot.waitUntil(lambda: window.windowTitle() == "example[*] — Rankwatch", timeout=15_000)
    assert len(window.notifier.sent) == 1


def test_a_run_ending_in_front_of_the_person_is_not_notified(qtbot, window, runners, monkeypatch):
    runner = runners(ranks=2)
    panel = launch_into(window, runner, monkeypatch)
    window.activateWindow()
    qtbot.waitUntil(window.isActiveWindow, timeout=15_000)
    qtbot.waitUntil(lambda: panel.model.status == "running", timeout=15_000)
    runner.finish()  # every rank exits 0: the run succeeded
    qtbot.waitUntil(lambda: panel.model.status == "succeeded", timeout=15_000)
    assert window.notifier.sent == [] and not window.windowTitle().startswith("✓")
    assert "finished" in window.statusBar().currentMessage()


def test_a_detached_run_opened_from_history_is_watched_again_and_a_detached_tab_follows_its_end(
        qtbot, window, runners, monkeypatch):
    """After Detach, History ▸ Attach brought back the stale tab ("970/2,560 steps when
    detached") and nothing updated; once the run ended the tab still showed "running" rows while
    History said succeeded."""
    runner = runners(ranks=2, rate_hz=20)
    panel = launch_into(window, runner, monkeypatch)
    qtbot.waitUntil(lambda: (panel.model.current_step() or 0) >= 3, timeout=15_000)
    panel.detach()
    seen = panel.model.current_step() or 0
    qtbot.waitUntil(lambda: runner.step >= seen + 10, timeout=15_000)
    window._on_open_run_requested(runner.run_id)  # History ▸ Attach (or a double-click)
    assert window.monitors.count() == 1
    panel = window.monitor  # a fresh panel in the stale one's place
    qtbot.waitUntil(lambda: (panel.model.current_step() or 0) >= seen + 10, timeout=15_000)
    assert panel.has_live_run() and not panel.is_detached

    panel.detach()
    runner.finish()
    qtbot.waitUntil(lambda: runner.ended, timeout=10_000)
    window.history.refresh_now()
    qtbot.waitUntil(lambda: panel.model.status == "succeeded", timeout=10_000)
    assert {row.state for row in panel.model.rank_rows()} == {"exited"}


def test_help_lists_the_shortcuts_and_the_version(qtbot, window):
    menus = {action.text(): action.menu() for action in window.menuBar().actions()}
    assert [action.text() for action in menus["&Help"].actions()] == ["&Keyboard shortcuts", "&About Rankwatch"]
    rows = dict(window.shortcut_rows())
    find = QKeySequence(QKeySequence.StandardKey.Find).toString(QKeySequence.SequenceFormat.NativeText)
    assert rows["Search logs"] == find and rows["Launch"] == "Ctrl+R" and rows["Toggle bottom panel"] == "Ctrl+J"
    assert rows["Monitor tab"] == "Ctrl+2"
    assert rows["New profile"] == QKeySequence(QKeySequence.StandardKey.New).toString(
        QKeySequence.SequenceFormat.NativeText)
    dialog = window.show_shortcuts()
    qtbot.addWidget(dialog)
    table = dialog.layout().itemAt(0).widget()
    texts = [table.item(row, 0).text() for row in range(table.rowCount())]
    assert "Search logs" in texts and any(table.item(r, 1).text() == "Mouse wheel" for r in range(table.rowCount()))
    assert app_version() != "unknown" and app_version() in window.about_text()


def test_ctrl_f_goes_to_the_logs_search_of_the_run_in_front(qtbot, window):
    window.activateWindow()
    qtbot.waitUntil(window.isActiveWindow, timeout=15_000)
    window.search_logs_action.trigger()
    assert window.tabs.currentWidget() is window.monitors
    panel = window.monitor
    assert panel.tabs.currentWidget() is panel.log_view
    qtbot.waitUntil(lambda: QApplication.focusWidget() is panel.log_view.search, timeout=15_000)
    window.toggle_panel_action.trigger()
    assert panel.panel_mode == "collapsed"
    window.toggle_panel_action.trigger()
    assert panel.panel_mode == "normal"
