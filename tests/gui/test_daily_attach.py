"""Leaving a run and coming back, like ``docker attach``: a real window, a real runner with fake
ranks (``live_run.py``), the History panel's own Attach button."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from live_run import LiveRun
from PySide6.QtCore import Qt

from gui.main_window import MainWindow
from gui.widgets.monitor_panel import MonitorPanel

pytestmark = [pytest.mark.gui, pytest.mark.usefixtures("unanswered_dialogs_cancel")]


@pytest.fixture
def window(example_window):
    yield example_window
    for panel in example_window.monitors.panels():
        panel.detach()


def launch_into(window: MainWindow, runner: LiveRun, monkeypatch) -> MonitorPanel:
    """Launch from the form; the panel it lands in watches ``runner`` (the runner with fake
    ranks stands in for the detached runner the real launch starts)."""
    monkeypatch.setattr(MonitorPanel, "launch", lambda panel, spec, name, base_dir: panel.attach(runner.run_id))
    window._on_launch_requested(window.form.evaluation.spec, "example", Path.cwd())
    return window.monitor


def test_attach_after_detach_replaces_the_stale_tab_in_place_with_a_live_one(qtbot, window, live_run, monkeypatch):
    runner = live_run(ranks=2, rate_hz=20)
    other = live_run(ranks=2, rate_hz=20)
    first = launch_into(window, other, monkeypatch)
    stale = launch_into(window, runner, monkeypatch)  # second tab: the run we leave and come back to
    qtbot.waitUntil(lambda: (stale.model.current_step() or 0) >= 3, timeout=15_000)
    index = window.monitors.indexOf(stale)
    qtbot.mouseClick(stale.detach_button, Qt.MouseButton.LeftButton)
    seen = stale.model.current_step() or 0
    qtbot.waitUntil(lambda: runner.step >= seen + 10, timeout=15_000)

    window.tabs.setCurrentWidget(window.history)
    window.history.refresh_now()
    qtbot.waitUntil(lambda: any(row.run_id == runner.run_id and row.live for row in window.history.rows()),
                    timeout=15_000)
    window.history.select_runs([runner.run_id])
    qtbot.mouseClick(window.history.open_button, Qt.MouseButton.LeftButton)  # History ▸ Attach

    fresh = window.monitor
    assert fresh is not stale and window.monitors.indexOf(fresh) == index
    assert window.monitors.count() == 2 and window.monitors.indexOf(first) == 0
    assert window.tabs.currentWidget() is window.monitors
    qtbot.waitUntil(lambda: (fresh.model.current_step() or 0) >= seen + 10, timeout=15_000)
    assert fresh.has_live_run() and not fresh.is_detached
    assert "when detached" not in fresh.progress.position_label.text()
    assert "not watched" not in fresh.progress.timing_label.text()


def test_the_detached_header_says_since_when_in_local_time(qtbot, window, live_run, monkeypatch):
    runner = live_run(ranks=2, rate_hz=20)
    panel = launch_into(window, runner, monkeypatch)
    qtbot.waitUntil(lambda: (panel.model.current_step() or 0) >= 3, timeout=15_000)
    panel.detach()
    expected = time.strftime("%H:%M:%S", time.localtime(panel.progress.detached_at))
    assert panel.progress.timing_label.text().endswith(f"not watched since {expected}")
