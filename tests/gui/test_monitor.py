"""The monitor against the real runner, and its Qt-free model.

The runner is the real one (``runner.run.Run``: its hub, store, stop and end) with fake
ranks that speak the real protocol (``live_run.py``); the panel subscribes through its
QLocalSocket. Tests drive the real widgets with qtbot and assert what they show.
"""

from __future__ import annotations

import os
import re
import signal
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
from live_run import LiveRun
from PySide6.QtCore import Qt

from gui.gateway.run_state import RankInfo, RunInfo, SnapshotMessage
from gui.models import monitor
from gui.models.monitor import RANK_COLUMNS, LogBuffer, LogEntry, MonitorModel
from gui.widgets.log_view import LogView
from gui.widgets.monitor_panel import DETACHED, DISCONNECTED, MonitorPanel
from gui.widgets.rank_table import state_tint
from rankwatch import protocol
from rankwatch.protocol import LogLine, MetricRecord, ProcessSample
from runner.profile.spec import LaunchSpec
from runner.store.rank_stats import RankStats, run_statistics
from runner.store.store import RunStore
from tests.hub_messages import rank_changes, update

pytestmark = pytest.mark.gui

LIVE_RUN = Path(__file__).with_name("live_run.py")




def test_eight_streamed_ranks_fill_the_charts_table_logs_and_progress(qtbot, panel, live_run):
    runner = live_run(ranks=8)
    states = []
    panel.run_state_changed.connect(states.append)
    panel.attach(runner.run_id)
    loss = panel.charts.charts["loss"]
    qtbot.waitUntil(lambda: len(loss.keys) == 8 and min(loss.curve_points(k) for k in range(8)) >= 15, timeout=8000)
    assert panel.has_live_run()
    assert states[0] == "running"
    # Every point the runner sent for rank 3 is in the model, in order (history + live).
    series = panel.model.series(protocol.LOSS)[3]
    sent = runner.sent(3, protocol.LOSS)
    assert list(series.values.values) == pytest.approx(sent[: len(series)])
    # The chart draws them (few points: no decimation yet).
    qtbot.waitUntil(lambda: loss.curve_points(3) >= len(series), timeout=15_000)

    table = panel.rank_table
    qtbot.waitUntil(lambda: table.table_model.rowCount() == 8, timeout=15_000)
    assert table.cell_text(3, "Host") == "localhost"  # the rank's hello: its node, its pid
    assert table.cell_text(3, "PID") == str(os.getpid())  # (the fake ranks live in this process)
    assert table.cell_text(3, "GPU") == "cpu"
    assert table.cell_text(3, "State") == "running"
    qtbot.waitUntil(lambda: int(table.cell_text(3, "Step")) >= 14, timeout=15_000)
    assert float(table.cell_text(5, "Step ms")) > 150  # the slow rank
    assert int(table.cell_text(5, "Data wait %")) == 55
    assert table.cell_text(3, "Heartbeat").endswith(" s")
    assert table.row_brush(3).color() == state_tint("running")

    runner.fail_rank(3, exit_code=1)
    qtbot.waitUntil(lambda: table.cell_text(3, "State") == "failed", timeout=15_000)
    assert table.cell_text(3, "Ended by") == "exit code 1"
    assert table.row_brush(3).color() == state_tint("failed")
    assert table.row_brush(0).color() == state_tint("running")
    assert state_tint("failed") != state_tint("running")

    # Tagged with the rank and the node's host, as the runner records every captured line.
    qtbot.waitUntil(lambda: "[localhost r0] epoch 0 step 10 loss:" in panel.log_view.shown_text(), timeout=15_000)
    assert "[localhost launcher] fake torchrun: 8 ranks, 50 steps per epoch" in panel.log_view.shown_text()
    qtbot.waitUntil(lambda: "Rank failed: rank 3 exited with code 1" in panel.events_view.toPlainText(), timeout=15_000)
    # 4 epochs (--epochs in the spec) x 50 steps per epoch (printed) = 200 steps.
    # The epoch as the script logs it (0 here), the steps counted as done.
    assert re.search(r"epoch 0/4 · \d+/200 steps", panel.progress.position_label.text())
    qtbot.waitUntil(lambda: "ETA" in panel.progress.timing_label.text(), timeout=15_000)
    assert panel.progress.bar.isVisible()


def test_the_rank_table_counts_steps_as_the_header_and_runs_show_do(qtbot, panel, live_run):
    """The rank table said "Step 639" under a header of "640/640 steps", and `runs show`
    said 640: a step index in one place, the steps done in the others. One count everywhere."""
    runner = live_run(ranks=2, rate_hz=50, total_steps=12, slow_rank=None)
    panel.attach(runner.run_id)
    qtbot.waitUntil(lambda: panel.model.status == "succeeded", timeout=20_000)
    table = panel.rank_table
    qtbot.waitUntil(lambda: table.table_model.rowCount() == 2, timeout=15_000)
    table.refresh()
    panel.progress.refresh()
    made = len(runner.sent(0, protocol.STEP_TIME))  # the steps `runs show` counts (its step rows)
    assert made == 12
    header = re.search(r"([\d,]+)(?:/[\d,]+)? steps", panel.progress.position_label.text())
    assert header is not None and header.group(1) == "12"
    assert [table.cell_text(rank, "Step") for rank in range(2)] == ["12", "12"]
    with RunStore(readonly=True) as store:
        assert [entry.steps for entry in run_statistics(store, runner.run_id)[0]] == [12, 12]


def test_the_logs_filter_offers_only_the_ranks_of_the_run_the_tab_shows(qtbot, panel, live_run):
    """After an 8-rank run, the next 2-rank run in the same tab offered "Rank 0 … Rank 7"."""
    def offered() -> list[str]:
        choice = panel.log_view.rank_choice
        return [choice.itemText(index) for index in range(choice.count())]

    first = live_run(ranks=8, rate_hz=20)
    panel.attach(first.run_id)
    qtbot.waitUntil(lambda: "Rank 7" in offered(), timeout=8000)
    first.finish()
    qtbot.waitUntil(lambda: panel.model.status == "succeeded", timeout=20_000)
    second = live_run(ranks=2, rate_hz=20)
    panel.attach(second.run_id)
    qtbot.waitUntil(lambda: panel.model.run_id == second.run_id and len(panel.model.ranks) == 2, timeout=8000)
    panel.log_view.refresh()
    assert offered() == ["All ranks", "Launcher", "Rank 0", "Rank 1"]


def test_launch_from_spec_runs_the_detached_runner_and_stops_it(qtbot, tmp_path, monkeypatch):
    # The runner's own launch, with fake ranks instead of torchrun (``live_run.py run --detach``).
    command = lambda spec_path: [sys.executable, str(LIVE_RUN), "run", "--detach", "--json", str(spec_path)]  # noqa: E731
    panel = MonitorPanel(command=command)
    qtbot.addWidget(panel)
    panel.show()
    states = []
    panel.run_state_changed.connect(states.append)
    (tmp_path / "train.py").write_text("print('hi')\n")
    panel.launch(LaunchSpec(script="train.py", nproc_per_node=4), "demo", tmp_path)
    assert states == ["launching"]
    assert panel.has_live_run()
    qtbot.waitUntil(lambda: "running" in states, timeout=10_000)
    loss = panel.charts.charts["loss"]
    qtbot.waitUntil(lambda: len(loss.keys) == 4 and loss.curve_points(0) >= 5, timeout=15_000)
    with RunStore(readonly=True) as store:
        run = store.stored_run(panel.run_id)
    assert run.profile == "demo"
    runner_pid = run.runner_pid
    assert runner_pid is not None
    try:
        monkeypatch.setattr(panel, "_confirm", lambda title, text: True)
        qtbot.mouseClick(panel.stop_button, Qt.MouseButton.LeftButton)
        qtbot.waitUntil(lambda: states[-1] == "stopped", timeout=15_000)
        assert "stopping" in states
        qtbot.waitUntil(lambda: not panel.has_live_run(), timeout=15_000)
        qtbot.waitUntil(lambda: panel.rank_table.cell_text(2, "State") == "stopped", timeout=15_000)
        assert not panel.stop_button.isEnabled()
    finally:
        try:
            os.kill(runner_pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_an_invalid_spec_reports_its_field_errors(qtbot, tmp_path):
    panel = MonitorPanel()  # the real `python -m runner run --detach --json SPEC`
    qtbot.addWidget(panel)
    with qtbot.waitSignal(panel.launch_failed, timeout=20_000) as failed:
        panel.launch(LaunchSpec(script="invalid.py"), None, tmp_path)
    # The runner's message for the field, with the path made absolute (relative paths were).
    assert f"script: {tmp_path / 'invalid.py'} does not exist" in failed.args[0]
    assert "Launch failed" in panel.banner.text()
    assert not panel.has_live_run()


def test_stop_asks_first_then_stops_gracefully_then_forces(qtbot, panel, live_run):
    runner = live_run(ranks=2, stop_delay_s=60)
    panel.attach(runner.run_id)
    qtbot.waitUntil(lambda: panel.model.status == "running" and panel.stop_button.isEnabled(), timeout=15_000)
    asked = []
    panel._confirm = lambda title, text: asked.append(title) or False
    qtbot.mouseClick(panel.stop_button, Qt.MouseButton.LeftButton)
    time.sleep(0.2)
    assert asked == ["Stop run"]
    assert not [m for m in runner.received if m["type"] == "stop"]  # declined: nothing sent

    panel._confirm = lambda title, text: asked.append(title) or True
    qtbot.mouseClick(panel.stop_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: panel.model.status == "stopping", timeout=15_000)
    assert [m["force"] for m in runner.received if m["type"] == "stop"] == [False]
    assert panel.stop_button.text() == "Force stop…"
    qtbot.mouseClick(panel.stop_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: panel.model.status == "stopped", timeout=15_000)
    assert asked == ["Stop run", "Stop run", "Force stop"]
    assert [m["force"] for m in runner.received if m["type"] == "stop"] == [False, True]
    qtbot.waitUntil(lambda: not panel.has_live_run(), timeout=15_000)


def test_detach_leaves_the_job_running_and_attach_replays_its_whole_history(qtbot, panel, live_run):
    runner = live_run(ranks=4, rate_hz=20)
    panel.attach(runner.run_id)
    qtbot.waitUntil(lambda: len(panel.model.series(protocol.LOSS).get(0, [])) >= 5, timeout=15_000)
    states = []
    panel.run_state_changed.connect(states.append)
    panel.detach()
    assert states == [DETACHED]
    assert not panel.has_live_run()
    assert "keeps running headless" in panel.notice_text() and panel.failure_banner.isVisible()
    # Not a green "running" badge with a frozen clock: it says nobody watches any more.
    assert panel.status_label.text() == "detached"
    panel.progress.refresh()
    assert panel.progress.position_label.text().endswith("when detached")
    assert "not watched since" in panel.progress.timing_label.text()
    qtbot.waitUntil(lambda: runner.subscriber_count() == 0, timeout=15_000)
    steps_at_detach = runner.step
    qtbot.wait(400)
    assert runner.step > steps_at_detach  # the job went on without us

    steps_before_attach = runner.step + 1
    panel.attach(runner.run_id)
    qtbot.waitUntil(lambda: panel.model.history_done, timeout=15_000)
    series = panel.model.series(protocol.LOSS)[0]
    sent = runner.sent(0, protocol.LOSS)
    assert len(series) >= steps_before_attach
    assert list(series.values.values) == pytest.approx(sent[: len(series)])  # no gap, no duplicate


def test_a_finished_run_opens_from_the_store(qtbot, panel, live_run):
    runner = live_run(ranks=8, rate_hz=200, total_steps=30)
    qtbot.waitUntil(lambda: runner.ended, timeout=20000)  # generous: the machine may be busy
    panel.attach(runner.run_id)
    loss = panel.charts.charts["loss"]
    qtbot.waitUntil(lambda: len(loss.keys) == 8 and loss.curve_points(7) == 30, timeout=20000)
    assert not panel.has_live_run()
    assert panel.model.status == "succeeded"
    assert panel.status_label.text() == "succeeded"
    qtbot.waitUntil(lambda: panel.rank_table.table_model.rowCount() == 8, timeout=15_000)
    qtbot.waitUntil(lambda: panel.rank_table.cell_text(4, "State") == "exited", timeout=15_000)
    assert panel.rank_table.cell_text(4, "Loss") != ""
    assert panel.rank_table.cell_text(4, "Step ms") == _whole_run_texts(runner, 4)[0]  # the whole run's median
    qtbot.waitUntil(lambda: "[localhost r0] epoch 0 step 20 loss:" in panel.log_view.shown_text(), timeout=15_000)
    assert not panel.stop_button.isEnabled()
    qtbot.waitUntil(lambda: "Run finished" in panel.events_view.toPlainText(), timeout=15_000)


def _whole_run_texts(runner: LiveRun, rank: int) -> tuple[str, str, str]:
    """What the rank table should show for ``rank`` once the run ended, from what it sent:
    its median step (ms) and the share of its whole run it waited for data; and the newest
    step's time, what it showed while the run went on."""
    step_times = runner.sent(rank, protocol.STEP_TIME)
    data_waits = runner.sent(rank, protocol.DATA_WAIT)
    return (f"{1000 * statistics.median(step_times):.1f}", f"{100 * sum(data_waits) / sum(step_times):.0f}",
            f"{1000 * step_times[-1]:.1f}")


def test_once_the_run_ends_the_rank_table_shows_each_ranks_whole_run_not_its_last_step(qtbot, panel, live_run):
    """A last step (a checkpoint, the final all-reduce) is no summary: while a rank runs, its
    row shows its newest step; once the runner said bye, its median step and its whole run's
    wait shares, read from the store as `rankwatch show` does (the header says which)."""
    runner = live_run(ranks=4, rate_hz=50)
    panel.attach(runner.run_id)
    table = panel.rank_table
    qtbot.waitUntil(lambda: table.table_model.rowCount() == 4 and int(table.cell_text(3, "Step") or 0) >= 10,
                    timeout=10_000)
    runner.finish()
    qtbot.waitUntil(lambda: panel.model.status == "succeeded", timeout=20_000)
    expected = {rank: _whole_run_texts(runner, rank) for rank in range(4)}
    qtbot.waitUntil(lambda: all(table.cell_text(rank, "Step ms") == expected[rank][0] for rank in range(4)),
                    timeout=15_000)
    assert {rank: table.cell_text(rank, "Data wait %") for rank in range(4)} == {
        rank: expected[rank][1] for rank in range(4)}
    assert any(expected[rank][0] != expected[rank][2] for rank in range(4))  # the newest step differs
    step_ms = RANK_COLUMNS.index("Step ms")
    assert "median step over the whole run" in table.table_model.headerData(
        step_ms, Qt.Orientation.Horizontal, Qt.ItemDataRole.ToolTipRole)
    row = next(row for row in range(4) if table.table_model.rank_at(row) == 1)
    steps = len(runner.sent(1, protocol.STEP_TIME))
    assert table.table_model.data(table.table_model.index(row, step_ms), Qt.ItemDataRole.ToolTipRole) == (
        f"Median over the run's {steps} steps")


def test_a_runner_that_vanishes_without_bye_is_reported(qtbot, panel, live_run):
    runner = live_run(ranks=2)
    panel.run_id = None
    panel.link.open(runner.socket_path)
    panel._live = True
    qtbot.waitUntil(lambda: panel.model.status == "running", timeout=15_000)
    with qtbot.waitSignal(panel.run_state_changed, timeout=10_000,
                          check_params_cb=lambda state: state == DISCONNECTED):
        runner.vanish()
    assert "Lost the connection" in panel.banner.text()
    assert not panel.has_live_run()


def test_log_view_keeps_memory_bounded_and_filters(qtbot):
    model = MonitorModel(log_limit=500)
    view = LogView(model)
    qtbot.addWidget(view)
    view.resize(800, 400)
    view.show()
    model.add_log_rows([[i % 4, 1000.0 + i, "stdout", f"step {i}", None] for i in range(1200)])
    view.refresh()
    assert view.shown_line_count() == 500
    assert view.text.document().blockCount() == 500
    assert "700 older lines are kept in the run store" in view.footer.text()
    assert view.shown_text().splitlines()[-1] == "[r3] step 1199"
    view.show_rank(2)
    lines = view.shown_text().splitlines()
    assert len(lines) == 125 and all(line.startswith("[r2] ") for line in lines)
    view.set_search("step 71")
    assert view.shown_text().splitlines() == ["[r2] step 710", "[r2] step 714", "[r2] step 718"]
    view.show_rank("all")
    view.set_search("")
    # Scrolling up stops following; new lines then do not move the view.
    bar = view.text.verticalScrollBar()
    bar.setValue(0)
    assert not view.follow.isChecked()
    model.add_log_rows([[0, 3000.0, "stdout", "newest", None]])
    view.refresh()
    assert bar.value() == 0
    view.follow.setChecked(True)
    assert bar.value() == bar.maximum()
    assert view.text.document().blockCount() == 500


# ---- the Qt-free model ---------------------------------------------------------------------


def snapshot(args: tuple[str, ...] | None = None, **run) -> dict:
    return SnapshotMessage(RunInfo(**{"id": 3, "status": "running", **run}), (RankInfo(rank=0, state="running"),),
                           spec={} if args is None else {"args": list(args)}).to_wire()


def test_model_pairs_step_time_and_data_wait_into_a_share():
    model = MonitorModel()
    model.apply(snapshot())
    model.apply(update(metrics=[MetricRecord(0, 1.0, 5, "step_time", 0.2, "auto")]).to_wire())
    assert monitor.DATA_WAIT_SHARE not in model.series_names()
    model.apply(update(metrics=[MetricRecord(0, 1.1, 5, "data_wait", 0.05, "auto")]).to_wire())
    share = model.series(monitor.DATA_WAIT_SHARE)[0]
    assert list(share.values.values) == [0.25]
    assert list(share.steps.values) == [5.0]


def test_the_timing_columns_are_the_whole_runs_only_for_a_rank_that_ended_with_results_read():
    running = RankInfo(rank=0, state="running", step_time=0.0215, data_wait_share=0.01, comm_wait_share=0.46)
    ended = replace(running, state="exited")
    result = RankStats(rank=0, steps=96, median_step_time=0.0159, data_wait_share=0.02, comm_wait_share=0.03)
    assert monitor.rank_timing(running, result) == monitor.RankTiming(0.0215, 0.01, 0.46)  # results of a past incarnation
    assert monitor.rank_timing(ended) == monitor.RankTiming(0.0215, 0.01, 0.46)  # not read yet
    assert monitor.rank_timing(ended, result) == monitor.RankTiming(0.0159, 0.02, 0.03, whole_run_steps=96)
    assert monitor.rank_timing(ended, RankStats(rank=0, steps=3, median_step_time=None)) == monitor.RankTiming(
        0.0215, 0.01, 0.46)  # no step time stored: nothing to summarise
    cells = dict(zip(RANK_COLUMNS, monitor.rank_cells(ended, 0.0, result=result), strict=True))
    assert (cells["Step ms"], cells["Data wait %"], cells["Comm wait %"]) == ("15.9", "2", "3")


def test_a_rank_working_without_steps_says_so_in_the_diagnosis_column_unless_a_finding_does():
    evaluating = RankInfo(rank=0, state="running", step=310, working_since=1000.0)
    cells = dict(zip(RANK_COLUMNS, monitor.rank_cells(evaluating, 1042.0), strict=True))
    assert cells["Diagnosis"] == "working without steps for 42 s (since step 311)"  # 311 steps done
    assert dict(zip(RANK_COLUMNS, monitor.rank_cells(replace(evaluating, step=None), 1042.0), strict=True))[
        "Diagnosis"] == "working for 42 s, no step yet"  # loading, before its first step
    noted = dict(zip(RANK_COLUMNS, monitor.rank_cells(evaluating, 1042.0, note="straggler"), strict=True))
    assert noted["Diagnosis"] == "straggler"
    ended = dict(zip(RANK_COLUMNS, monitor.rank_cells(replace(evaluating, state="exited"), 1042.0), strict=True))
    assert ended["Diagnosis"] == ""
    assert dict(zip(RANK_COLUMNS, monitor.rank_cells(replace(evaluating, working_since=None), 1042.0),
                    strict=True))["Diagnosis"] == ""


def test_the_memory_chart_of_a_process_that_is_gone_ends_at_its_last_known_value():
    """After Ctrl-C or `stop` the memory chart dropped to 0.0 (a sample of a process that
    was gone, all zeros, charted as a measurement)."""
    model = MonitorModel()
    model.apply(snapshot())
    model.apply(update(procs=[ProcessSample(1.0, 0, 42, 97.0, 300 << 20, 9)]).to_wire())
    model.apply(update(procs=[ProcessSample(2.0, 0, 42, 0.0, 0, 0)]).to_wire())
    rss = model.series(monitor.RSS_BYTES)[0]
    assert list(rss.values.values) == [300 << 20]
    assert list(model.series(monitor.CPU_PERCENT)[0].values.values) == [97.0]


def test_model_prefers_measured_loss_over_parsed_lines():
    model = MonitorModel()
    model.apply(update(metrics=[MetricRecord(0, 1.0, 1, "loss", 9.0, "parsed")]).to_wire())
    assert model.series("loss")[0].values.last == 9.0
    model.apply(update(metrics=[MetricRecord(0, 1.0, 1, "loss", 1.5, "auto")]).to_wire())
    assert model.series("loss")[0].values.last == 1.5


def test_a_new_snapshot_starts_the_model_over():
    model = MonitorModel()
    resets = []
    model.reset.connect(lambda: resets.append(True))
    model.apply(snapshot())
    model.apply(update(metrics=[MetricRecord(0, 1.0, 1, "loss", 1.0, "auto")],
                       logs=[LogLine(0, 1.0, "stdout", "hello", None)]).to_wire())
    model.apply(snapshot(status="stopping"))
    assert resets == [True, True]
    assert model.series_names() == [] and model.logs.total == 0
    assert model.status == "stopping"


def test_log_buffer_reports_what_is_new_and_what_fell_out():
    buffer = LogBuffer(limit=3)
    entries = [LogEntry(0, float(i), "stdout", str(i), None) for i in range(5)]
    buffer.extend(entries[:2])
    assert buffer.since(0) == (entries[:2], True)
    buffer.extend(entries[2:])
    assert buffer.since(2) == (entries[2:], True)
    assert buffer.since(1) == (entries[2:], False)  # entry 1 is gone: redraw
    assert buffer.dropped == 2


def test_progress_eta_from_epochs_argument_and_printed_steps_per_epoch():
    model = MonitorModel()
    model.apply(snapshot(args=("--epochs", "2", "--lr", "0.1"), started=1000.0))
    model.apply(update(logs=[LogLine(None, 1000.0, "stdout", "10 steps per epoch", None)]).to_wire())
    model.apply(update(metrics=[MetricRecord(0, 1000.0 + 2 * step, step, "loss", 1.0, "auto") for step in range(11)],
                       ranks=[rank_changes(0, step=10)]).to_wire())
    progress = model.progress(now=1020.0)
    # Step index 10 is the 11th step, in the second epoch of 10 steps.
    assert (progress.step, progress.steps_done, progress.total_steps) == (10, 11, 20)
    assert (progress.epoch, progress.total_epochs) == (2, 2)
    assert progress.elapsed_s == 20.0
    assert progress.steps_per_s == pytest.approx(0.5)
    assert progress.eta_s == pytest.approx(18.0)
    assert progress.fraction == pytest.approx(0.55)


def test_progress_has_no_eta_without_a_known_total():
    model = MonitorModel()
    model.apply(snapshot(started=0.0))
    model.apply(update(metrics=[MetricRecord(0, float(s), s, "loss", 1.0, "auto") for s in range(5)]).to_wire())
    progress = model.progress(now=10.0)
    assert progress.total_steps is None and progress.eta_s is None and progress.fraction is None
    assert progress.step == 4


def test_the_diagnosis_tab_never_moves_the_divider_and_the_panel_collapses_and_maximises(qtbot, panel):
    panel.set_panel_share(0.3)
    charts_before, tabs_before = panel.splitter.sizes()
    assert tabs_before == pytest.approx(0.3 * (charts_before + tabs_before), abs=2)
    panel._on_details_toggled(True)  # the failure banner's Details
    assert panel.tabs.currentWidget() is panel.diagnosis_panel
    assert panel.splitter.sizes() == [charts_before, tabs_before]  # charts keep their room
    panel._on_details_toggled(False)
    assert panel.splitter.sizes() == [charts_before, tabs_before]

    panel.collapse_button.click()
    _charts, tabs = panel.splitter.sizes()
    assert tabs < 60 and panel.tabs.tabBar().isVisible()  # only the tab bar is left
    assert panel.panel_share == pytest.approx(0.3)  # remembered
    panel.search_logs()  # opening a tab opens the panel again
    assert panel.panel_mode == "normal" and panel.tabs.currentWidget() is panel.log_view
    assert panel.splitter.sizes()[1] == pytest.approx(tabs_before, abs=2)

    panel.maximise_button.click()
    assert not panel.charts.isVisible() and panel.splitter.sizes()[1] > 0.9 * sum(panel.splitter.sizes())
    panel.maximise_button.click()
    assert panel.charts.isVisible() and panel.splitter.sizes()[1] == pytest.approx(tabs_before, abs=2)


def test_a_saved_share_that_squashed_the_charts_is_clamped(qtbot, panel):
    shares = []
    panel.panel_share_changed.connect(shares.append)
    panel.set_panel_share(0.97)  # a layout saved before the rule
    charts, tabs = panel.splitter.sizes()
    assert charts >= 0.4 * (charts + tabs) and charts >= 230
    panel.splitter.moveSplitter(40, 1)  # a drag to the very top: the charts' minimum holds
    qtbot.wait(10)
    assert panel.splitter.sizes()[0] >= 230
    assert shares and shares[-1] <= 0.55


def test_ctrl_f_searches_the_logs_highlights_and_counts(qtbot, panel):
    panel.model.add_log_rows([[rank, 1000.0 + i, "stdout", f"step {i} loss: {i / 10}", None]
                              for i in range(40) for rank in (0, 1)])
    panel.model.add_log_rows([[1, 2000.0, "stderr", "[rank1]: RuntimeError: NCCL timeout", None]])
    panel.search_logs()
    view = panel.log_view
    assert panel.tabs.currentWidget() is view and view.search.hasFocus()
    qtbot.keyClicks(view.search, "runtimeerror")
    view.refresh()
    assert view.shown_text() == "[r1] RuntimeError: NCCL timeout"  # torch's [rank1]: not repeated
    assert view.match_count.text() == "1 matching line"
    formats = view.text.document().firstBlock().layout().formats()
    highlighted = [(f.start, f.length) for f in formats if f.format.background().color().alpha() > 0]
    assert highlighted == [(5, len("RuntimeError"))]
    view.search.clear()
    qtbot.keyClicks(view.search, "step 1")
    view.refresh()
    assert view.match_count.text() == "22 matching lines"  # step 1, 10..19, on two ranks
    view.search.clear()
    view.refresh()
    assert view.match_count.text() == ""
