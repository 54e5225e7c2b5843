"""Charts read as in TensorBoard and W&B: the hover line on every chart, log labels that do
not overlap, a y range that holds the raw spikes behind a smoothed curve, a readout that says
which value is smoothed, charts whose plots line up, and exports that look like the screen."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from PySide6.QtCore import QPoint, QPointF, QRect
from PySide6.QtGui import QImage, QPainter, QPixmap

from gui.charts.chart import MetricChart
from gui.charts.grid import ChartGrid
from gui.gateway.store_reads import StoreReads
from gui.models.monitor import MonitorModel
from gui.models.series import TIME, Series
from rankwatch.protocol import GpuSample, MetricRecord
from runner.store.store import RecordBatch, RunStore

pytestmark = pytest.mark.gui

T0 = 1_700_000_000.0


def stored_run(ranks: int = 2, steps: int = 120, gpu: bool = False) -> int:
    """A finished run in the real store: loss, step time and a throughput in the ten thousands,
    and, with ``gpu``, GPU samples that go on 10 s past the last step."""
    with RunStore() as store:
        run_id = store.create_run(run_key=f"charts-{ranks}-{steps}-{gpu}", profile="alpha", spec_toml='script = "t.py"',
                                  command=None, host="h", workdir=None, runner_pid=1, socket=None, world_size=ranks,
                                  status="running")
        store.update_run(run_id, started=T0, ended=T0 + steps, status="succeeded", exit_code=0)
        batch = RecordBatch()
        for step in range(steps):
            for rank in range(ranks):
                t = T0 + 0.5 * step
                batch.metrics.append(MetricRecord(rank, t, step, "loss", 1.2 - 0.7 * step / steps + 0.01 * rank, "auto"))
                batch.metrics.append(MetricRecord(rank, t, step, "step_time", 0.1 + 0.01 * rank, "auto"))
                batch.metrics.append(MetricRecord(rank, t, step, "samples_per_s", 12345.0 + rank, "auto"))
        if gpu:
            batch.gpu_samples.extend(GpuSample(T0 + second, index, 50.0 + index, 3e10, 8e10, 100.0, 50.0, 1000.0)
                                     for second in range(steps // 2 + 10) for index in range(2))
        store.write_batch(run_id, batch)
        return run_id


def stored_model(run_id: int) -> MonitorModel:
    with RunStore(readonly=True) as store:
        return MonitorModel.from_records(StoreReads.run_records(store, run_id, 100))


@pytest.fixture
def grid(qtbot):
    def make(model: MonitorModel, width: int = 1400, height: int = 900) -> ChartGrid:
        widget = ChartGrid(model)
        qtbot.addWidget(widget)
        widget.resize(width, height)
        widget.show()
        qtbot.waitExposed(widget)
        widget.refresh(force=True)
        qtbot.wait(50)
        widget.refresh(force=True)
        return widget

    return make


def shown_chart(qtbot, title: str = "Loss", height: int = 300) -> MetricChart:
    chart = MetricChart(title)
    qtbot.addWidget(chart)
    chart.resize(700, height)
    chart.show()
    qtbot.waitExposed(chart)
    return chart


def text_specs(axis) -> list[tuple[QRect, str]]:
    """The labels the axis draws: their rectangles and texts, as pyqtgraph paints them."""
    pixmap = QPixmap(10, 10)
    painter = QPainter(pixmap)
    try:
        return [(spec[0], spec[2]) for spec in axis.generateDrawSpecs(painter)[2]]
    finally:
        painter.end()


def test_hovering_one_chart_marks_the_same_step_on_every_chart(qtbot, grid):
    charts = grid(stored_model(stored_run()))
    loss, step_time, throughput = charts.charts["loss"], charts.charts["step_time"], charts.charts["samples_per_s"]
    loss.show_readout_at(40.2, 1.0)
    assert loss.curve_set.marker() == 40.0
    assert step_time.curve_set.marker() == 40.0 and throughput.curve_set.marker() == 40.0
    loss.hide_readout()
    assert step_time.curve_set.marker() is None and throughput.curve_set.marker() is None


def test_log_axis_labels_do_not_overlap(qtbot):
    chart = shown_chart(qtbot, height=170)  # a chart at its smallest: the plot is about 120 px tall
    series = Series()
    steps = np.arange(300.0)
    series.append(steps, steps, 1.9 - 1.4 * steps / 300)  # 1.9 .. 0.5: 0.5 to 0.9, 1 and 2 have ticks
    chart.set_series(0, "rank 0", series)
    chart.set_log_y(True)
    chart.refresh(force=True)
    qtbot.wait(50)
    labels = [(rect, text) for rect, text in text_specs(chart.left_axis) if text]
    assert len(labels) >= 2, labels  # the axis still says where it is
    for (first, first_text), (second, second_text) in itertools.combinations(labels, 2):
        assert not first.intersects(second), f"{first_text!r} overlaps {second_text!r}"
    assert {text for _rect, text in labels} <= {"0.5", "0.6", "0.7", "0.8", "0.9", "1", "2"}


def test_smoothed_chart_y_range_contains_the_raw_spikes(qtbot):
    chart = shown_chart(qtbot)
    values = np.full(400, 1.0)
    values[[50, 200, 350]] = 8.0  # loss spikes the smoothing flattens
    series = Series()
    series.append(np.arange(400.0), np.arange(400.0), values)
    chart.set_series(0, "rank 0", series)
    chart.set_smoothing(0.95)
    chart.refresh(force=True)
    low, high = chart.view_box.viewRange()[1]
    assert low <= 1.0 and high >= 8.0


def test_readout_says_which_value_is_smoothed(qtbot):
    chart = shown_chart(qtbot)
    series = Series()
    series.append(np.arange(50.0), np.arange(50.0), np.where(np.arange(50) % 2, 2.0, 0.0))
    chart.set_series(0, "rank 0", series)
    chart.set_smoothing(0.9)
    chart.refresh(force=True)
    chart.show_readout_at(49, 1.0)
    text = chart.readout_text()
    assert "smoothed" in text and "raw 2" in text, text


def test_charts_of_a_grid_line_up_and_keep_wide_labels(qtbot, grid):
    charts = grid(stored_model(stored_run(gpu=True)))
    charts.set_x_axis(TIME)
    charts.refresh(force=True)
    qtbot.wait(50)
    charts.refresh(force=True)

    def grid_x(chart: MetricChart, x: float) -> int:
        scene = chart.view_box.mapViewToScene(QPointF(x, chart.view_box.viewRange()[1][0]))
        return chart.plot_widget.mapTo(charts, chart.plot_widget.mapFromScene(scene)).x()

    by_column: dict[int, list[MetricChart]] = {}
    for name in charts.shown_chart_names():
        chart = charts.charts[name]
        if not chart.is_empty:
            by_column.setdefault(chart.mapTo(charts, QPoint(0, 0)).x(), []).append(chart)
    assert any(len(column) >= 2 for column in by_column.values())
    for column in by_column.values():
        # A second since the start is at the same place on the loss chart and the GPU samples' charts.
        assert len({grid_x(chart, 30.0) for chart in column}) == 1, [chart.title for chart in column]
    throughput = charts.charts["samples_per_s"]
    assert [text for _rect, text in text_specs(throughput.left_axis) if text]  # "12345.2" is not dropped
    assert len({chart.left_axis.width() for chart in charts.charts.values()}) == 1


def test_exported_charts_have_x_labels_a_title_and_no_buttons(qtbot, grid, tmp_path):
    charts = grid(stored_model(stored_run()))
    path = charts.export_png(tmp_path / "charts.png", "Run 1 · alpha")
    image = QImage(str(path))
    background = image.pixelColor(image.width() - 2, image.height() - 2)

    def inked(rect: QRect) -> int:
        """Pixels in ``rect`` of the image that are not the background (text, lines)."""
        count = 0
        for y in range(rect.top(), rect.bottom() + 1):
            for x in range(rect.left(), rect.right() + 1):
                color = image.pixelColor(x, y)
                if abs(color.lightness() - background.lightness()) > 60:
                    count += 1
        return count

    offset = image.height() - charts.container.height()  # the title and the legend above the charts
    assert offset > charts.rank_legend.height()
    assert inked(QRect(0, 0, 300, offset - charts.rank_legend.height())) > 50  # the title

    loss = charts.charts["loss"]
    axis = loss.bottom_axis
    axis_rect = loss.plot_widget.mapFromScene(axis.sceneBoundingRect()).boundingRect()
    top_left = loss.plot_widget.mapTo(charts.container, axis_rect.topLeft())
    tick_room = max(0, axis.style["tickLength"]) + 2
    labels_band = QRect(top_left.x(), top_left.y() + offset + tick_room, axis_rect.width(),
                        axis_rect.height() - tick_room)
    assert inked(labels_band) > 40  # step numbers under the x axis

    button = loss.log_button
    button_rect = QRect(button.mapTo(charts.container, QPoint(0, 0)) + QPoint(0, offset), button.size())
    assert inked(button_rect) == 0  # no "log" drawn in
