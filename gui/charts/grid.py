"""The monitor's charts: loss, step time, data wait, throughput, GPU (or CPU) use, per rank.

:class:`ChartGrid` takes a :class:`~gui.models.monitor.MonitorModel`, adds a curve
whenever a new rank or GPU appears in it, and redraws on its own QTimer
(``REFRESH_HZ``), never per message: messages only append to the model's series.
Above the charts: x by step or by time, the smoothing weight, reset zoom.

Zooming or panning one chart zooms every chart on the same x axis (steps, or
time). Charts start in auto range, following the newest data. One legend strip
(``LegendBar``) serves all per-rank charts and one the GPU charts: a click hides
or shows that rank's curves everywhere.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtWidgets import (
    QComboBox,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QSlider,
    QVBoxLayout,
    QWidget,
)

from gui.charts.chart import MetricChart, palette_is_dark, series_color
from gui.charts.decimation import STEP, TIME
from gui.charts.legend import LegendBar
from gui.models import monitor
from gui.models.monitor import MonitorModel
from rankwatch import _protocol

REFRESH_HZ = 15
GIB = float(1 << 30)


@dataclass(frozen=True)
class ChartDef:
    series: str
    title: str
    scale: float = 1.0
    time_only: bool = False
    group: str = "metrics"
    """``metrics`` always shown; ``gpu`` with GPU samples; ``cpu`` in CPU mode."""
    key_label: str = "rank"


CHART_DEFS = (
    ChartDef(_protocol.LOSS, "Loss"),
    ChartDef(_protocol.STEP_TIME, "Step time (ms)", scale=1000.0),
    ChartDef(monitor.DATA_WAIT_SHARE, "Data wait (% of step)", scale=100.0),
    ChartDef(_protocol.SAMPLES_PER_SECOND, "Samples/s"),
    ChartDef(monitor.GPU_UTILIZATION, "GPU utilisation (%)", time_only=True, group="gpu", key_label="GPU"),
    ChartDef(monitor.GPU_MEMORY, "GPU memory (GiB)", scale=1 / GIB, time_only=True, group="gpu",
             key_label="GPU"),
    ChartDef(monitor.CPU_PERCENT, "CPU per rank (%)", time_only=True, group="cpu"),
    ChartDef(monitor.RSS_BYTES, "Memory per rank (RSS, GiB)", scale=1 / GIB, time_only=True, group="cpu"),
)
_COLUMNS = 2


def key_label(kind: str, key: int) -> str:
    return f"GPU {key}" if kind == "GPU" else f"rank {key}"


class ChartGrid(QWidget):
    """Every chart of one run, with the x-axis and smoothing controls.

    Signals:
        frame_drawn(float): milliseconds the last refresh took (decimate + hand over).
    """

    frame_drawn = Signal(float)

    def __init__(self, model: MonitorModel, parent: QWidget | None = None, refresh_hz: float = REFRESH_HZ) -> None:
        super().__init__(parent)
        self.model = model
        self.x_axis = STEP
        self.charts: dict[str, MetricChart] = {}
        self._defs: dict[str, ChartDef] = {}
        self._series_dirty = True
        self._mode: str | None = None
        self.frames = 0
        self.last_frame_ms = 0.0

        self.axis_choice = QComboBox()
        self.axis_choice.addItem("Step", STEP)
        self.axis_choice.addItem("Time", TIME)
        self.axis_choice.setToolTip("Plot against the training step or the time since the run started")
        self.axis_choice.currentIndexChanged.connect(self._on_axis_chosen)
        self.smoothing_slider = QSlider(Qt.Orientation.Horizontal)
        self.smoothing_slider.setRange(0, 99)
        self.smoothing_slider.setFixedWidth(140)
        self.smoothing_slider.setToolTip("Exponential moving average weight (0 = raw values)")
        self.smoothing_slider.valueChanged.connect(self._on_smoothing_moved)
        self.smoothing_label = QLabel("0.00")
        self.smoothing_label.setMinimumWidth(32)
        self.reset_button = QPushButton("Reset zoom")
        self.reset_button.setToolTip("Show all data and follow new points again")
        self.reset_button.clicked.connect(self.reset_zoom)
        controls = QHBoxLayout()
        controls.setContentsMargins(4, 0, 4, 0)
        controls.addWidget(QLabel("X axis"))
        controls.addWidget(self.axis_choice)
        controls.addSpacing(12)
        controls.addWidget(QLabel("Smoothing"))
        controls.addWidget(self.smoothing_slider)
        controls.addWidget(self.smoothing_label)
        controls.addSpacing(12)
        controls.addWidget(self.reset_button)
        controls.addStretch(1)
        self.controls = controls

        self.rank_legend = LegendBar("Ranks")
        self.rank_legend.visibility_changed.connect(lambda key, on: self._on_legend_toggled("rank", key, on))
        self.gpu_legend = LegendBar("GPUs")
        self.gpu_legend.visibility_changed.connect(lambda key, on: self._on_legend_toggled("GPU", key, on))
        self.gpu_legend.hide()

        grid = QGridLayout()
        grid.setContentsMargins(0, 0, 0, 0)
        grid.setSpacing(4)
        for position, definition in enumerate(CHART_DEFS):
            chart = MetricChart(definition.title, scale=definition.scale, time_only=definition.time_only,
                                legend=False)
            self.charts[definition.series] = chart
            self._defs[definition.series] = definition
            if definition.group == "cpu":  # shares the GPU charts' places
                index = 4 + (position - 6)
            else:
                index = position
            grid.addWidget(chart, index // _COLUMNS, index % _COLUMNS)
            chart.view_box.sigRangeChangedManually.connect(lambda _mask, c=chart: self._on_zoomed(c))
            chart.follow_requested.connect(self.reset_zoom)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(2)
        layout.addLayout(controls)
        layout.addWidget(self.rank_legend)
        layout.addWidget(self.gpu_legend)
        layout.addLayout(grid, 1)
        self._set_mode("cpu")

        self._connect_model(model)
        self.timer = QTimer(self)
        self.timer.setInterval(int(1000 / refresh_hz))
        self.timer.timeout.connect(self.refresh)
        self.timer.start()

    # ---- model -----------------------------------------------------------------------

    def set_model(self, model: MonitorModel) -> None:
        self.model = model
        self._connect_model(model)
        self._on_model_reset()

    def _connect_model(self, model: MonitorModel) -> None:
        model.reset.connect(self._on_model_reset)
        model.series_added.connect(self._on_series_added)

    def _on_model_reset(self) -> None:
        for chart in self.charts.values():
            chart.clear()
        self.rank_legend.clear()
        self.gpu_legend.clear()
        self._series_dirty = True

    def _on_series_added(self, _name: str, _key: int) -> None:
        self._series_dirty = True

    def _sync_series(self) -> None:
        self._series_dirty = False
        dark = palette_is_dark(self.palette())
        world = int((self.model.run or {}).get("world_size") or 0)
        for name, chart in self.charts.items():
            definition = self._defs[name]
            by_key = self.model.series(name)
            count = max(world, max(by_key, default=-1) + 1) if definition.key_label == "rank" else len(by_key)
            legend = self._legend(definition.key_label)
            for key, series in sorted(by_key.items()):
                if not chart.has_series(key, series):
                    color = series_color(key, count, dark)
                    label = key_label(definition.key_label, key)
                    chart.set_series(key, label, series, color, count)
                    if key not in legend.keys:
                        legend.set_entry(key, label, color)
                    chart.set_curve_visible(key, legend.is_visible(key))
        self._set_mode("gpu" if self.model.has_gpu_samples() else "cpu")
        for chart in self.charts.values():
            chart.set_x_axis(self.x_axis, self.model.t0)

    def _legend(self, key_label: str) -> LegendBar:
        return self.gpu_legend if key_label == "GPU" else self.rank_legend

    def _on_legend_toggled(self, key_label: str, key: int, visible: bool) -> None:
        for name, chart in self.charts.items():
            if self._defs[name].key_label == key_label:
                chart.set_curve_visible(key, visible)

    def _set_mode(self, mode: str) -> None:
        if mode == self._mode:
            return
        self._mode = mode
        self.gpu_legend.setVisible(mode == "gpu")
        for name, chart in self.charts.items():
            group = self._defs[name].group
            chart.setVisible(group == "metrics" or group == mode)

    @property
    def mode(self) -> str:
        """``gpu`` when the run has GPU samples, else ``cpu``."""
        return self._mode or "cpu"

    # ---- controls --------------------------------------------------------------------

    def set_x_axis(self, axis: str) -> None:
        index = self.axis_choice.findData(axis)
        if index >= 0:
            self.axis_choice.setCurrentIndex(index)

    def set_smoothing(self, weight: float) -> None:
        self.smoothing_slider.setValue(round(weight * 100))

    def _on_axis_chosen(self, _index: int) -> None:
        self.x_axis = self.axis_choice.currentData()
        for chart in self.charts.values():
            chart.set_x_axis(self.x_axis, self.model.t0)
        self.refresh()

    def _on_smoothing_moved(self, value: int) -> None:
        weight = value / 100.0
        self.smoothing_label.setText(f"{weight:.2f}")
        for chart in self.charts.values():
            chart.set_smoothing(weight)

    def reset_zoom(self) -> None:
        """Every chart shows all its data again and follows new points."""
        for chart in self.charts.values():
            chart.follow()

    def _on_zoomed(self, source: MetricChart) -> None:
        """Linked x zoom: every chart on the same x axis takes the zoomed chart's x range."""
        low, high = source.view_box.viewRange()[0]
        for chart in self.charts.values():
            if chart is not source and chart.x_axis == source.x_axis:
                chart.stop_following(x=True, y=False)  # its y range keeps fitting what is visible
                chart.view_box.setXRange(low, high, padding=0)

    # ---- drawing ---------------------------------------------------------------------

    def refresh(self, force: bool = False) -> int:
        """Redraw what changed (called by the timer); returns the points handed to pyqtgraph."""
        started = time.perf_counter()
        if self._series_dirty:
            self._sync_series()
        points = 0
        for chart in self.charts.values():
            if force or chart.isVisible():
                points += chart.refresh(force)
        self.frames += 1
        self.last_frame_ms = 1000.0 * (time.perf_counter() - started)
        self.frame_drawn.emit(self.last_frame_ms)
        return points

    def export_png(self, path: Path) -> Path:
        """Save the charts as they look now (refreshing first).

        Raises:
            OSError: the image could not be written.
        """
        self.refresh(force=True)
        image = self.grab()
        path = Path(path)
        if not image.save(str(path), "PNG"):
            raise OSError(f"could not write {path}")
        return path
