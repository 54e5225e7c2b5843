"""A real 2-rank CPU run of the bundled example, from the Launch button to the finished state.

Everything is real: the window, the runner's probe, ``python -m runner run --detach``,
torchrun with gloo, the worker bootstrap, the hub's socket, the store. ~15-30 s.
"""

from __future__ import annotations

import numpy as np
import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QFileDialog, QMessageBox

from gui.main_window import MainWindow
from rankwatch import protocol
from runner.store.store import RunStore

pytestmark = [pytest.mark.torchrun, pytest.mark.gui]


@pytest.fixture(autouse=True)
def unanswered_dialogs_cancel(monkeypatch):
    """A modal dialog nobody answers would hang the run: it answers Cancel."""
    cancel = QMessageBox.StandardButton.Cancel
    for name in ("question", "warning", "critical", "information"):
        monkeypatch.setattr(QMessageBox, name, lambda *args, **kwargs: cancel)
    monkeypatch.setattr(QMessageBox, "exec", lambda self: int(cancel))
    monkeypatch.setattr(QFileDialog, "getSaveFileName", lambda *args, **kwargs: ("", ""))


def test_launch_button_runs_the_example_to_the_end_with_loss_curves_for_both_ranks(qtbot):
    window = MainWindow(initial_profile="example")
    qtbot.addWidget(window)
    window.resize(1400, 950)
    window.show()
    launch = window.launch_panel
    qtbot.waitUntil(lambda: launch.launch_button.isEnabled(), timeout=60_000)
    launch.args.selectAll()
    qtbot.keyClicks(launch.args, "--epochs 3")  # 3 x 64 steps: a short run
    qtbot.waitUntil(lambda: launch.launch_button.isEnabled(), timeout=30_000)
    monitor = window.monitor
    states: list[str] = []
    monitor.run_state_changed.connect(states.append)

    qtbot.mouseClick(launch.launch_button, Qt.MouseButton.LeftButton)
    assert window.tabs.currentWidget() is window.monitors and window.monitor is monitor
    qtbot.waitUntil(lambda: "running" in states, timeout=60_000)
    assert monitor.has_live_run()
    # Leave it running headless for a moment, then attach again: the history is read from
    # the store, the live updates follow it, so the charts end up with every point all the same.
    qtbot.waitUntil(lambda: len(monitor.model.series(protocol.LOSS).get(1, ())) >= 20, timeout=60_000)
    run_id = monitor.run_id
    monitor.detach()
    assert not monitor.has_live_run()
    qtbot.wait(1000)
    monitor.attach(run_id)
    assert monitor.has_live_run()  # still going: subscribed again, history first
    qtbot.waitUntil(lambda: monitor.model.finished, timeout=180_000)
    # the history is read from the store beside the live updates: the run may end before it is in
    qtbot.waitUntil(lambda: monitor.model.history_done, timeout=30_000)
    assert monitor.model.status == "succeeded", monitor.banner.text()
    qtbot.waitUntil(lambda: not monitor.has_live_run(), timeout=15_000)

    monitor.charts.refresh()
    loss = monitor.charts.charts["loss"]
    assert sorted(loss.keys) == [0, 1]
    for rank in (0, 1):
        series = monitor.model.series(protocol.LOSS)[rank]
        assert len(series) >= 150, f"rank {rank}: {len(series)} loss points"
        assert loss.curve_points(rank) == len(series)  # few points: drawn raw
        _, values = loss.curve_data(rank)
        assert np.mean(values[-20:]) < np.mean(values[:20])  # it learned
    qtbot.waitUntil(lambda: monitor.rank_table.cell_text(1, "State") == "exited", timeout=15_000)
    assert monitor.rank_table.cell_text(0, "Ended by") == "exit code 0"
    # A finished run reads every step and epoch done (not "epoch 2/3 · step 191/192").
    monitor.progress.refresh()
    assert monitor.progress.position_label.text() == "epoch 3/3 · 192/192 steps"
    assert monitor.progress.bar.text() == "100%"
    qtbot.waitUntil(lambda: "done:" in monitor.log_view.shown_text(), timeout=15_000)
    # Where the steps went, as the workers timed them on the CPU's clock: the whole run's bars
    # (read from the store), and the run's verdict with it.
    qtbot.waitUntil(lambda: all(p.whole_run for p in monitor.rank_table.table_model.phases()), timeout=15_000)
    for phases in monitor.rank_table.table_model.phases():
        assert phases.measured and phases.clock == protocol.CLOCK_CPU and phases.segments()
        assert {"forward", "backward"} <= {segment.phase for segment in phases.segments()}
    assert "on the CPU clock" in monitor.rank_table.legend.text()
    qtbot.waitUntil(lambda: monitor.rank_table.verdict.startswith("Bottleneck (whole run"),
                    timeout=15_000)
    with RunStore(readonly=True) as store:
        run = store.stored_run(monitor.run_id)
        for rank in (0, 1):
            stored = store.metrics(run_id, name=protocol.LOSS, rank=rank)
            assert len(monitor.model.series(protocol.LOSS)[rank]) == len(stored)
    assert run.status == "succeeded" and run.exit_code == 0
