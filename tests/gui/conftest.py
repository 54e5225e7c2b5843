"""Fixtures the GUI tests share."""

from __future__ import annotations

import pytest
from live_run import LiveRun
from PySide6.QtWidgets import QMessageBox

from gui.gateway.probe import RunnerProbe
from gui.main_window import MainWindow
from gui.widgets.history_panel import HistoryPanel
from gui.widgets.monitor_panel import MonitorPanel
from runner.store.store import RunStore


@pytest.fixture
def live_run():
    """Start a real runner whose ranks are fake workers (``LiveRun``); each is closed after the test."""
    runs: list[LiveRun] = []

    def start(**options) -> LiveRun:
        run = LiveRun(**options).start()
        runs.append(run)
        return run

    yield start
    for run in runs:
        run.close()


@pytest.fixture
def store():
    """The run store of this test's RANKWATCH_HOME, open for writing the runs a test compares."""
    with RunStore() as opened:
        yield opened


@pytest.fixture
def history_panel(qtbot):
    """The History panel, shown, polling the store every 0.2 s."""
    widget = HistoryPanel(poll_interval_s=0.2)
    qtbot.addWidget(widget)
    widget.resize(1400, 900)
    widget.show()
    qtbot.waitExposed(widget)
    yield widget
    widget.poller.stop()


@pytest.fixture
def unanswered_dialogs_cancel(monkeypatch):
    """A modal dialog that no test answers would hang the run: it answers Cancel instead."""
    cancel = QMessageBox.StandardButton.Cancel
    for name in ("question", "warning", "critical", "information"):
        monkeypatch.setattr(QMessageBox, name, lambda *args, **kwargs: cancel)
    monkeypatch.setattr(QMessageBox, "exec", lambda self: int(cancel))


@pytest.fixture
def example_window(qtbot, tmp_path):
    """The main window on the bundled example at 1280x720, shown (its probe finds nothing)."""
    window = MainWindow(probe=RunnerProbe(command=[str(tmp_path / "no-probe")]), initial_profile="example")
    qtbot.addWidget(window)
    window.resize(1280, 720)
    window.show()
    qtbot.waitExposed(window)
    return window



@pytest.fixture
def panel_size() -> tuple[int, int]:
    """The size of the monitor panel of a test (a module that needs another defines its own)."""
    return (1300, 900)


@pytest.fixture
def panel(qtbot, panel_size):
    """A monitor panel, shown at ``panel_size``; it detaches from its run after the test."""
    widget = MonitorPanel()
    qtbot.addWidget(widget)
    widget.resize(*panel_size)
    widget.show()
    qtbot.waitExposed(widget)
    yield widget
    widget.detach()
