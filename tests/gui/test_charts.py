"""The chart widgets against real models: decimated drawing, legend toggles, linked zoom,
x by step or time, smoothing, redraw on a timer."""

from __future__ import annotations

import numpy as np
import pytest
from PySide6.QtCore import QEvent, QPoint, QPointF, Qt
from PySide6.QtGui import QWheelEvent
from PySide6.QtWidgets import QApplication

from gui.charts.chart import MetricChart
from gui.charts.grid import REFRESH_HZ, ChartGrid
from gui.charts.readout import format_value
from gui.charts.smoothing import ema
from gui.models import monitor
from gui.models.monitor import MonitorModel
from gui.models.series import STEP, TIME, Series
from rankwatch.protocol import GpuSample, MetricRecord, ProcessSample
from runner.runstate.messages import RunInfo, SnapshotMessage
from tests.hub_messages import update

pytestmark = pytest.mark.gui

T0 = 1_700_000_000.0


def model_with_loss(ranks: int = 4, steps: int = 200) -> MonitorModel:
    model = MonitorModel()
    model.apply(SnapshotMessage(RunInfo(id=7, status="running", world_size=ranks, started=T0)).to_wire())
    rows = []
    for step in range(steps):
        for rank in range(ranks):
            t = T0 + 0.5 * step
            rows.append(MetricRecord(rank, t, step, "loss", 2.0 - step / steps + 0.01 * rank, "auto"))
            rows.append(MetricRecord(rank, t, step, "step_time", 0.1 + 0.01 * rank, "auto"))
            rows.append(MetricRecord(rank, t, step, "data_wait", 0.02, "auto"))
    model.apply(update(metrics=rows).to_wire())
    return model


@pytest.fixture
def grid(qtbot):
    def make(model: MonitorModel) -> ChartGrid:
        widget = ChartGrid(model)
        qtbot.addWidget(widget)
        widget.resize(1200, 800)
        widget.show()
        qtbot.waitExposed(widget)
        widget.refresh()
        return widget

    return make


def test_a_million_points_are_drawn_as_about_two_per_pixel(qtbot):
    chart = MetricChart("Loss")
    qtbot.addWidget(chart)
    chart.resize(900, 300)
    chart.show()
    qtbot.waitExposed(chart)
    series = Series()
    steps = np.arange(1_000_000, dtype=np.float64)
    values = np.cos(steps / 50_000.0)
    values[777_777] = 9.0  # one bad step must stay visible
    series.append(steps, T0 + steps, values)
    chart.set_series(0, "r0", series)
    chart.refresh()
    pixels = chart.pixels()
    assert 300 < pixels < 900
    assert pixels <= chart.curve_points(0) <= 2 * pixels + 4
    x, y = chart.curve_data(0)
    assert y.max() == 9.0 and y.min() == pytest.approx(-1.0, abs=1e-6)
    assert x[0] == 0.0 and x[-1] >= 999_000
    assert chart.curve_pen(0).width() == 1 and chart.curve_pen(0).isCosmetic()


def test_curves_follow_new_points_on_the_timer_not_per_message(qtbot, grid):
    model = model_with_loss(ranks=4, steps=50)
    charts = grid(model)
    assert 1000 / 20 <= charts.timer.interval() <= 1000 / 10
    assert charts.timer.interval() == int(1000 / REFRESH_HZ)
    loss = charts.charts["loss"]
    assert loss.keys == [0, 1, 2, 3]
    assert loss.curve_points(2) == 50
    model.apply(update(metrics=[MetricRecord(2, T0 + 100, 50 + i, "loss", 0.5, "auto")
                                for i in range(10)]).to_wire())
    assert loss.curve_points(2) == 50  # nothing drawn by the message itself
    qtbot.waitUntil(lambda: loss.curve_points(2) == 60, timeout=15_000)
    x, y = loss.curve_data(2)
    assert x[-1] == 59 and y[-1] == 0.5


def test_derived_data_wait_share_and_scaled_step_time(grid):
    charts = grid(model_with_loss(ranks=2, steps=20))
    _, step_ms = charts.charts["step_time"].curve_data(1)
    assert step_ms == pytest.approx(np.full(20, 110.0))
    _, wait_percent = charts.charts[monitor.DATA_WAIT_SHARE].curve_data(0)
    assert wait_percent == pytest.approx(np.full(20, 20.0))


def test_clicking_a_legend_entry_toggles_that_rank_on_every_chart(qtbot, grid):
    charts = grid(model_with_loss(ranks=3, steps=30))
    legend = charts.rank_legend
    assert legend.labels() == ["rank 0", "rank 1", "rank 2"]
    loss, step_time = charts.charts["loss"], charts.charts["step_time"]
    point = legend.entry_rect(1).center()
    qtbot.mouseClick(legend, Qt.MouseButton.LeftButton, pos=point)
    assert not legend.is_visible(1)
    assert not loss.is_curve_visible(1) and not step_time.is_curve_visible(1)
    assert loss.is_curve_visible(0) and loss.is_curve_visible(2)
    charts.model.apply(update(metrics=[MetricRecord(1, T0 + 99, 30, "loss", 1.0, "auto")]).to_wire())
    charts.refresh()
    assert loss.curve_points(1) == 30  # a hidden curve is not redrawn
    qtbot.mouseClick(legend, Qt.MouseButton.LeftButton, pos=point)
    assert loss.is_curve_visible(1) and step_time.is_curve_visible(1)
    charts.refresh()
    assert loss.curve_points(1) == 31
    # Double click: only that rank; again: all.
    qtbot.mouseDClick(legend, Qt.MouseButton.LeftButton, pos=legend.entry_rect(2).center())
    assert [loss.is_curve_visible(k) for k in range(3)] == [False, False, True]
    qtbot.mouseDClick(legend, Qt.MouseButton.LeftButton, pos=legend.entry_rect(2).center())
    assert [loss.is_curve_visible(k) for k in range(3)] == [True, True, True]


def test_a_standalone_chart_has_its_own_clickable_legend(qtbot):
    chart = MetricChart("Loss overlay")
    qtbot.addWidget(chart)
    chart.resize(700, 300)
    chart.show()
    qtbot.waitExposed(chart)
    for key in range(2):
        series = Series()
        series.append([0, 1, 2], [0.0, 1.0, 2.0], [3.0, 2.0, 1.0 + key])
        chart.set_series(key, f"run {key}", series)
    chart.refresh()
    assert chart.legend.labels() == ["run 0", "run 1"]
    qtbot.mouseClick(chart.legend, Qt.MouseButton.LeftButton, pos=chart.legend.entry_rect(1).center())
    assert not chart.is_curve_visible(1) and chart.is_curve_visible(0)
    assert chart.curve_set.visible_bounds()[1] == (1.0, 3.0)  # the hidden curve no longer counts


def wheel(widget, steps: int) -> None:
    viewport = widget.plot_widget.viewport()
    center = QPointF(viewport.width() / 2, viewport.height() / 2)
    event = QWheelEvent(center, QPointF(viewport.mapToGlobal(center.toPoint())), QPoint(0, 0),
                        QPoint(0, 120 * steps), Qt.MouseButton.NoButton, Qt.KeyboardModifier.NoModifier,
                        Qt.ScrollPhase.NoScrollPhase, False)
    QApplication.sendEvent(viewport, event)


def test_zooming_one_chart_zooms_every_chart_on_the_same_x_axis(qtbot, grid):
    model = model_with_loss(ranks=2, steps=400)
    model.apply(update(procs=[ProcessSample(T0 + i, 0, 100, 50.0, 1 << 30, 4) for i in range(50)]).to_wire())
    charts = grid(model)
    loss, step_time = charts.charts["loss"], charts.charts["step_time"]
    cpu = charts.charts[monitor.CPU_PERCENT]
    cpu_range_before = cpu.view_box.viewRange()[0]
    wide = loss.view_box.viewRange()[0][1] - loss.view_box.viewRange()[0][0]
    wheel(loss, 3)
    low, high = loss.view_box.viewRange()[0]
    assert high - low < 0.8 * wide
    assert step_time.view_box.viewRange()[0] == pytest.approx([low, high])
    assert cpu.view_box.viewRange()[0] == pytest.approx(cpu_range_before)  # time axis: not linked to steps
    charts.refresh()
    x, _ = step_time.curve_data(0)
    assert x[0] >= low - 1 and x[-1] <= high + 1  # only the zoomed range is drawn
    charts.reset_zoom()
    charts.refresh()
    assert step_time.curve_data(0)[0][-1] == 399


def test_x_by_time_plots_seconds_since_the_start(grid):
    charts = grid(model_with_loss(ranks=2, steps=10))
    charts.set_x_axis(TIME)
    assert charts.charts["loss"].x_axis == TIME
    x, _ = charts.charts["loss"].curve_data(0)
    assert x == pytest.approx(0.5 * np.arange(10))
    charts.set_x_axis(STEP)
    assert charts.charts["loss"].curve_data(0)[0] == pytest.approx(np.arange(10))
    assert charts.charts[monitor.CPU_PERCENT].x_axis == TIME  # samples have no step


def test_smoothing_control_draws_the_moving_average(grid):
    model = MonitorModel()
    rng = np.random.default_rng(4)
    values = rng.normal(size=300)
    model.apply(update(metrics=[MetricRecord(0, T0 + i, i, "loss", float(v), "auto")
                                for i, v in enumerate(values)]).to_wire())
    charts = grid(model)
    charts.smoothing_slider.setValue(90)
    charts.refresh()
    assert charts.smoothing_label.text() == "0.90"
    _, y = charts.charts["loss"].curve_data(0)
    assert y == pytest.approx(ema(values, 0.9))
    charts.set_smoothing(0.0)
    charts.refresh()
    assert charts.charts["loss"].curve_data(0)[1] == pytest.approx(values)


def test_gpu_samples_switch_the_last_charts_to_gpu_use(grid):
    model = model_with_loss(ranks=2, steps=5)
    charts = grid(model)
    assert charts.mode == "cpu"
    assert charts.charts[monitor.CPU_PERCENT].isVisible()
    gib = 1 << 30
    model.apply(update(gpus=[GpuSample(T0 + i, index, 90.0, (10 + index) * gib, 40 * gib, 250, 60, 1400)
                             for i in range(5) for index in range(2)]).to_wire())
    charts.refresh()
    assert charts.mode == "gpu"
    assert charts.charts[monitor.GPU_UTILIZATION].isVisible()
    assert not charts.charts[monitor.CPU_PERCENT].isVisible()
    memory = charts.charts[monitor.GPU_MEMORY]
    assert charts.gpu_legend.isVisible() and charts.gpu_legend.labels() == ["GPU 0", "GPU 1"]
    assert memory.curve_data(1)[1] == pytest.approx(np.full(5, 11.0))  # GiB


def test_export_png_writes_an_image(tmp_path, grid):
    charts = grid(model_with_loss(ranks=2, steps=50))
    path = charts.export_png(tmp_path / "charts.png")
    assert path.stat().st_size > 10_000


def test_charts_follow_new_points_until_the_user_zooms(qtbot, grid):
    model = model_with_loss(ranks=2, steps=100)
    charts = grid(model)
    loss = charts.charts["loss"]
    low, high = loss.view_box.viewRange()[0]
    assert -2 < low <= 0 and 99 <= high <= 110

    def add(first: int, count: int) -> None:
        model.apply(update(metrics=[MetricRecord(0, T0 + s, s, "loss", 1.0, "auto")
                                    for s in range(first, first + count)]).to_wire())
        charts.refresh()

    add(100, 100)
    assert loss.view_box.viewRange()[0][1] >= 199  # followed the new points
    wheel(loss, 2)
    zoomed = loss.view_box.viewRange()[0]
    add(200, 100)
    assert loss.view_box.viewRange()[0] == pytest.approx(zoomed)  # the user's range stays
    viewport = loss.plot_widget.viewport()
    center = viewport.rect().center()
    qtbot.mouseClick(viewport, Qt.MouseButton.LeftButton, pos=center)
    qtbot.mouseDClick(viewport, Qt.MouseButton.LeftButton, pos=center)
    qtbot.mouseRelease(viewport, Qt.MouseButton.LeftButton, pos=center)  # pyqtgraph acts on the release
    charts.refresh()
    assert loss.view_box.viewRange()[0][1] >= 299
    assert charts.charts["step_time"].follow_x


def test_missing_values_leave_a_gap_instead_of_a_line(qtbot):
    chart = MetricChart("Loss")
    qtbot.addWidget(chart)
    series = Series()
    series.append(np.arange(10), np.arange(10.0), [1, 2, 3, np.nan, np.nan, 4, 5, 6, 7, 8])
    chart.set_series(0, "r0", series)
    chart.refresh()
    pieces = chart.curve_set._pieces[0]
    assert [piece.size() for piece in pieces] == [3, 5]
    assert chart.curve_set.visible_bounds() == ((0.0, 9.0), (1.0, 8.0))


def logged_run(ranks: int = 8, steps: int = 50) -> MonitorModel:
    """What a script calling ``rankwatch.log(step=s, lr=..., grad_norm=...)`` on every rank sends."""
    model = model_with_loss(ranks=ranks, steps=steps)
    rows = []
    for step in range(steps):
        for rank in range(ranks):
            rows.append(MetricRecord(rank, T0 + 0.5 * step, step, "lr", 0.1 * (1 - step / steps), "log"))
            rows.append(MetricRecord(rank, T0 + 0.5 * step, step, "grad_norm", 1.0 + rank + 0.01 * step, "log"))
    model.apply(update(metrics=rows).to_wire())
    return model


def test_every_logged_key_gets_a_chart_with_a_curve_per_rank_after_the_built_in_ones(qtbot, grid):
    model = model_with_loss(ranks=8, steps=30)
    charts = grid(model)
    added = []
    charts.chart_added.connect(added.append)
    assert "lr" not in charts.charts
    rows = [MetricRecord(rank, T0 + 0.5 * step, step, name, 1.0 + rank, "log")
            for step in range(30) for rank in range(8) for name in ("lr", "grad_norm")]
    model.apply(update(metrics=rows).to_wire())
    qtbot.waitUntil(lambda: "grad_norm" in charts.charts, timeout=15_000)  # created as the key appears
    assert added == ["lr", "grad_norm"]
    names = charts.shown_chart_names()
    assert names[-2:] == ["lr", "grad_norm"] and names.index("loss") == 0
    lr = charts.charts["lr"]
    charts.refresh()
    assert lr.title == "lr" and lr.keys == list(range(8))
    assert all(lr.curve_points(rank) == 30 for rank in range(8))
    # Same colours as the built-in charts, one legend for all.
    assert lr.curve_pen(5).color() == charts.charts["loss"].curve_pen(5).color()
    qtbot.mouseClick(charts.rank_legend, Qt.MouseButton.LeftButton, pos=charts.rank_legend.entry_rect(5).center())
    assert not lr.is_curve_visible(5) and not charts.charts["loss"].is_curve_visible(5)
    # Same linked x axis: zooming the loss zooms lr.
    wheel(charts.charts["loss"], 3)
    assert lr.view_box.viewRange()[0] == pytest.approx(charts.charts["loss"].view_box.viewRange()[0])
    # A new run: its own keys only.
    model.apply(SnapshotMessage(RunInfo(id=8, status="running", started=T0)).to_wire())
    charts.refresh()
    assert "lr" not in charts.charts and "loss" in charts.charts


def test_a_run_loaded_from_history_gets_its_logged_charts_at_once(grid):
    charts = grid(logged_run(ranks=8, steps=20))
    assert {"lr", "grad_norm"} <= set(charts.charts)
    assert charts.charts["grad_norm"].curve_data(7)[1][0] == pytest.approx(8.0)


def test_hovering_lists_every_ranks_value_at_the_step(qtbot, grid):
    charts = grid(model_with_loss(ranks=4, steps=100))
    loss = charts.charts["loss"]
    qtbot.wait(50)  # the grid settles its layout
    (_x_low, _x_high), (y_low, y_high) = loss.view_box.viewRange()
    viewport = loss.plot_widget.viewport()
    point = loss.plot_widget.mapFromScene(loss.view_box.mapViewToScene(QPointF(40.2, (y_low + y_high) / 2)))
    qtbot.mouseMove(viewport, point)
    qtbot.waitUntil(loss.readout.isVisible, timeout=15_000)
    step = round(loss._hover[0])
    assert abs(step - 40) <= 2  # where the mouse is (to a pixel)
    position, rows, left_out = loss.readout_rows()
    assert position == f"step {step}" and left_out == 0
    assert [row.key for row in rows] == [3, 2, 1, 0]  # highest value first, as the curves lie
    assert [row.value for row in rows] == pytest.approx([2.0 - step / 100 + 0.01 * rank for rank in (3, 2, 1, 0)])
    text = loss.readout_text()
    assert f"step {step}" in text and "rank 3" in text and format_value(2.03 - step / 100) in text
    assert loss.curve_set.marker() == step  # a line at the step
    # New points keep it current (it says what is under the cursor); leaving the plot hides it.
    charts.model.apply(update(metrics=[MetricRecord(0, T0 + 200, 100, "loss", 0.5, "auto")]).to_wire())
    charts.refresh()
    assert loss.readout.isVisible() and loss.readout_rows()[1]
    QApplication.sendEvent(viewport, QEvent(QEvent.Type.Leave))
    assert not loss.readout.isVisible() and loss.curve_set.marker() is None


def test_with_many_ranks_the_readout_lists_those_nearest_the_cursor(grid):
    charts = grid(model_with_loss(ranks=64, steps=20))
    charts.every_rank.setChecked(True)  # every rank's curve, not the median and band
    loss = charts.charts["loss"]
    loss.show_readout_at(10.0, 2.0 - 10 / 20 + 0.01 * 30)
    _position, rows, left_out = loss.readout_rows()
    assert len(rows) == 10 and left_out == 54
    assert 30 in [row.key for row in rows]
    assert "+54 more" in loss.readout_text()


def test_the_wheel_zooms_steps_only_and_y_keeps_fitting_the_visible_part(qtbot, grid):
    model = MonitorModel()
    model.apply(update(metrics=[MetricRecord(0, T0 + s, s, "loss", 10.0 if s < 100 else 1.0 + 0.001 * s, "auto")
                                for s in range(400)]).to_wire())
    charts = grid(model)
    loss = charts.charts["loss"]
    assert loss.view_box.viewRange()[1][1] >= 10.0
    assert not loss.view_box.state["mouseEnabled"][1]  # y is not the wheel's
    loss.view_box.setXRange(200, 399, padding=0)
    loss.stop_following(x=True, y=False)
    charts.refresh()
    low, high = loss.view_box.viewRange()[1]
    assert high < 2.0 and low > 1.0  # fits steps 200..399 (1.2..1.4), not the early 10.0


def test_log_scale_draws_log10_and_leaves_non_positive_values_out(qtbot):
    chart = MetricChart("Loss")
    qtbot.addWidget(chart)
    chart.resize(600, 300)
    chart.show()
    series = Series()
    series.append([0, 1, 2, 3], [0.0, 1.0, 2.0, 3.0], [100.0, 10.0, 0.0, 0.01])
    chart.set_series(0, "r0", series)
    chart.refresh()
    qtbot.mouseClick(chart.log_button, Qt.MouseButton.LeftButton)
    assert chart.log_y and chart.left_axis.logMode
    _, y = chart.curve_data(0)
    assert y[[0, 1, 3]] == pytest.approx([2.0, 1.0, -2.0]) and np.isnan(y[2])
    low, high = chart.view_box.viewRange()[1]
    assert low <= -2.0 and high >= 2.0
    chart.set_log_y(False)
    assert chart.curve_data(0)[1] == pytest.approx([100.0, 10.0, 0.0, 0.01])


def test_smoothing_keeps_the_raw_curve_faint_and_leaves_samples_alone(grid):
    model = model_with_loss(ranks=2, steps=200)
    model.apply(update(procs=[ProcessSample(T0 + i, 0, 100, 50.0, (1 if i < 50 else 2) << 30, 4)
                              for i in range(100)]).to_wire())
    charts = grid(model)
    charts.set_smoothing(0.9)
    charts.refresh()
    loss, memory = charts.charts["loss"], charts.charts["process/rss_bytes"]
    assert loss.curve_set.has_faint(0)  # the raw curve, under the smoothed one
    assert not memory.smoothable and memory.smoothing == 0.0 and not memory.curve_set.has_faint(0)
    _, gib = memory.curve_data(0)
    assert set(np.round(gib, 6)) == {1.0, 2.0}  # a memory step stays a step, not a ramp


def test_an_empty_chart_says_why_and_forgets_the_last_runs_range(grid):
    model = model_with_loss(ranks=2, steps=300)
    charts = grid(model)
    loss, data_wait = charts.charts["loss"], charts.charts["data_wait_share"]
    assert not loss.is_empty and loss.view_box.viewRange()[0][1] >= 299
    model.apply(SnapshotMessage(RunInfo(id=9, status="running", started=T0, world_size=2)).to_wire())
    model.apply(update(metrics=[MetricRecord(0, T0 + s, s, name, 0.1, "auto")
                                for s in range(3) for name in ("loss", "step_time")]).to_wire())
    charts.refresh(force=True)
    assert data_wait.is_empty and data_wait.note() == "Not measured: no PyTorch DataLoader was seen"
    assert data_wait.note_label.isVisible()
    assert data_wait.view_box.viewRange()[0] == pytest.approx([0.0, 1.0])  # not the last run's 0..300
    assert not data_wait.left_axis.style["showValues"]  # no numbers that look like data
    assert loss.view_box.viewRange()[0][1] < 10  # the new run's 3 steps, not 300


def test_a_single_step_is_drawn_as_a_dot_on_a_readable_axis(qtbot):
    chart = MetricChart("Loss")
    qtbot.addWidget(chart)
    chart.resize(600, 300)
    chart.show()
    series = Series()
    series.append([1], [T0 + 3.0011], [1e-9])
    chart.set_series(0, "r0", series)
    chart.refresh()
    (x_low, x_high), (y_low, y_high) = chart.view_box.viewRange()
    assert x_high - x_low >= 2 and y_high - y_low >= 1e-10
    assert chart.curve_set._dots[0] and not chart.curve_set._pieces[0]
    labels = chart.bottom_axis.tickStrings([0.0, 1.0, 2.0], 1.0, 1.0)
    assert labels == ["0", "1", "2"]


def test_an_empty_charts_note_spans_its_plot_when_the_chart_is_shown_after_the_note_was_set(qtbot):
    """The GPU allocator chart of the 1,024-rank screenshot said "Waiting / for the" in a strip at
    its top left: its note was placed while the chart was still hidden, and not again."""
    chart = MetricChart("GPU memory per rank")
    qtbot.addWidget(chart)
    chart.set_empty_note("Waiting for the ranks' first figures")
    chart.resize(460, 200)
    chart.show()
    qtbot.waitExposed(chart)
    qtbot.waitUntil(lambda: chart.note_label.isVisible(), timeout=15_000)
    plot = chart.view_box.sceneBoundingRect()
    assert chart.note_label.width() >= plot.width() - 2 > 300
