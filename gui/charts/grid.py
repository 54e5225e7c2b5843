"""The monitor's charts: the built-in ones, then one per key the script logs, per rank.

:class:`ChartGrid` takes a :class:`~gui.models.monitor.MonitorModel`, adds a curve
whenever a new rank or GPU appears in it and a chart whenever a new key does
(``gui.models.charts``: loss, step time, data wait, throughput, GPU or CPU use,
then ``lr``, ``grad_norm``, ... as ``rankwatch.log`` or ``--parse-stdout`` first
report them), and redraws on its own QTimer (``REFRESH_HZ``), never per message:
messages only append to the model's series. Above the charts: x by step or by
time, the smoothing weight, reset zoom.

Every chart gets the same legend, colours, min/max decimation and x axis: zooming
or panning one chart zooms every chart on the same x axis (steps, or time), hovering
one marks the step on all of them (as W&B does), and all take the same left axis width
and x range, so a step or a time is at the same place on each. One
legend strip (``LegendBar``) serves all per-rank charts and one the GPU charts: a
click hides or shows that rank's curves everywhere. Charts fill the area in two
or three columns and never shrink below ``MIN_CHART_HEIGHT``: past that the area
scrolls, so no chart is squeezed unreadable.
"""

from __future__ import annotations

import time
from pathlib import Path

from PySide6.QtCore import QRect, Qt, QTimer, Signal
from PySide6.QtGui import QFont, QFontMetrics, QPainter, QPalette, QPixmap, QResizeEvent
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QFrame,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QScrollArea,
    QSizePolicy,
    QSlider,
    QVBoxLayout,
    QWidget,
)

from gui.charts.chart import MetricChart, palette_is_dark, series_color
from gui.charts.legend import LegendBar
from gui.models.charts import (
    BUILT_IN_CHARTS,
    CPU,
    GPU,
    GPU_KEYS,
    HIDDEN_NOTE,
    METRICS,
    MIN_CHART_HEIGHT,
    RANK_KEYS,
    ChartDef,
    chart_columns,
    empty_chart_note,
    logged_chart,
    logged_metric_names,
)
from gui.models.monitor import MonitorModel
from gui.models.rank_band import BAND_ABOVE_RANKS
from gui.models.series import STEP, TIME

REFRESH_HZ = 15
NOTES_EVERY = 8
"""Refreshes between two updates of the empty charts' notes (they follow the run's state)."""
MANY_RANKS = 16
"""With more ranks than this, legend entries are numbers only ("12", not "rank 12")."""
EVERY_RANK_LIMIT = 128
"""Up to this many ranks, "Every rank" can draw each rank's curve instead of the band."""
STANDING_OUT_STATES = frozenset({"failed", "stalled", "lost", "stopped"})
"""A rank in one of these is drawn over the band on its own."""


def key_label(kind: str, key: int, count: int = 0) -> str:
    if kind == GPU_KEYS:
        return f"GPU {key}"
    return str(key) if count > MANY_RANKS else f"rank {key}"


class ChartGrid(QWidget):
    """Every chart of one run, with the x-axis and smoothing controls.

    Signals:
        frame_drawn(float): milliseconds the last refresh took (decimate + hand over).
        chart_added(str): a chart for a newly reported key was added.
    """

    frame_drawn = Signal(float)
    chart_added = Signal(str)

    def __init__(self, model: MonitorModel, parent: QWidget | None = None, refresh_hz: float = REFRESH_HZ) -> None:
        super().__init__(parent)
        self.model = model
        self.x_axis = STEP
        self.smoothing = 0.0
        self.charts: dict[str, MetricChart] = {}
        self._defs: dict[str, ChartDef] = {}
        self._series_dirty = True
        self._mode: str | None = None
        self._columns = 0
        self._placed: list[str] = []
        self.frames = 0
        self.last_frame_ms = 0.0
        self.chosen_ranks: frozenset[int] = frozenset()
        """Ranks the user picked (the rank table's selection): drawn over the band."""
        self.band_ranks = False
        """Per-rank charts show the median and p10-p90 band (more than ``BAND_ABOVE_RANKS``)."""
        self.band_gpus = False
        """The GPU charts show the median and band (more than ``BAND_ABOVE_RANKS`` GPUs)."""
        self._highlighted: frozenset[int] = frozenset()

        self.axis_choice = QComboBox()
        self.axis_choice.addItem("Step", STEP)
        self.axis_choice.addItem("Time", TIME)
        self.axis_choice.setToolTip("Plot against the training step or the time since the run started")
        self.axis_choice.currentIndexChanged.connect(self._on_axis_chosen)
        self.smoothing_slider = QSlider(Qt.Orientation.Horizontal)
        self.smoothing_slider.setRange(0, 99)
        self.smoothing_slider.setFixedWidth(140)
        self.smoothing_slider.setToolTip("Exponential moving average weight (0 = raw values); the raw curve "
                                         "stays visible, faint. Process and GPU samples are never smoothed")
        self.smoothing_slider.valueChanged.connect(self._on_smoothing_moved)
        self.smoothing_label = QLabel("0.00")
        self.smoothing_label.setMinimumWidth(32)
        self.every_rank = QCheckBox("Every rank")
        self.every_rank.setToolTip(f"Draw every rank's own curve instead of the median and the p10-p90 band "
                                   f"(up to {EVERY_RANK_LIMIT} ranks)")
        self.every_rank.toggled.connect(self._on_every_rank_toggled)
        self.every_rank.hide()
        self.reset_button = QPushButton("Reset zoom")
        self.reset_button.setToolTip("Show all data and follow new points again (or double-click a chart)")
        self.reset_button.clicked.connect(self.reset_zoom)
        self.hint = QLabel("Wheel: zoom steps · drag: pan · hover: values · double-click: all")
        self.hint.setObjectName("hint")
        self.hint.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)  # first to give way
        self.hint.setAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        controls = QHBoxLayout()
        controls.setContentsMargins(4, 0, 4, 0)
        controls.addWidget(QLabel("X axis"))
        controls.addWidget(self.axis_choice)
        controls.addSpacing(12)
        controls.addWidget(QLabel("Smoothing"))
        controls.addWidget(self.smoothing_slider)
        controls.addWidget(self.smoothing_label)
        controls.addSpacing(12)
        controls.addWidget(self.every_rank)
        controls.addWidget(self.reset_button)
        controls.addWidget(self.hint, 1)
        self.controls = controls

        self.rank_legend = LegendBar("Ranks")
        self.rank_legend.visibility_changed.connect(lambda key, on: self._on_legend_toggled(RANK_KEYS, key, on))
        self.gpu_legend = LegendBar("GPUs")
        self.gpu_legend.visibility_changed.connect(lambda key, on: self._on_legend_toggled(GPU_KEYS, key, on))
        self.gpu_legend.hide()

        self.container = QWidget()
        self.grid = QGridLayout(self.container)
        self.grid.setContentsMargins(0, 0, 0, 0)
        self.grid.setSpacing(4)
        self.scroll_area = QScrollArea()
        self.scroll_area.setWidgetResizable(True)
        self.scroll_area.setFrameShape(QFrame.Shape.NoFrame)
        self.scroll_area.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.scroll_area.setWidget(self.container)
        for definition in BUILT_IN_CHARTS:
            self._add_chart(definition)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(2)
        layout.addLayout(controls)
        layout.addWidget(self.rank_legend)
        layout.addWidget(self.gpu_legend)
        layout.addWidget(self.scroll_area, 1)
        self._set_mode(CPU)

        self._connect_model(model)
        self.timer = QTimer(self)
        self.timer.setInterval(int(1000 / refresh_hz))
        self.timer.timeout.connect(self.refresh)
        self.timer.start()

    # ---- charts ----------------------------------------------------------------------

    def _add_chart(self, definition: ChartDef) -> MetricChart:
        chart = MetricChart(definition.title, scale=definition.scale, time_only=definition.time_only,
                            legend=False, smoothable=definition.smoothable)
        chart.setMinimumHeight(MIN_CHART_HEIGHT)
        chart.fits_axis_width = False  # one width for all: _align_charts
        self.charts[definition.series] = chart
        self._defs[definition.series] = definition
        chart.view_box.sigRangeChangedManually.connect(lambda _mask, c=chart: self._on_zoomed(c))
        chart.follow_requested.connect(self.reset_zoom)
        chart.hover_moved.connect(lambda x, c=chart: self._on_hover_moved(c, x))
        chart.hover_ended.connect(lambda c=chart: self._on_hover_moved(c, None))
        chart.set_smoothing(self.smoothing)
        chart.set_x_axis(self.x_axis, self.model.t0)
        return chart

    def _remove_logged_charts(self) -> None:
        for name in [name for name, definition in self._defs.items() if definition.logged]:
            chart = self.charts.pop(name)
            del self._defs[name]
            self.grid.removeWidget(chart)
            chart.hide()
            chart.deleteLater()
        self._layout_charts(force=True)

    def shown_chart_names(self) -> list[str]:
        """The charts on show, in their order: built-in ones (of this mode), then logged keys."""
        return [name for name, definition in self._defs.items()
                if definition.group == METRICS or definition.group == self._mode]

    def _layout_charts(self, force: bool = False) -> None:
        """Place the shown charts in rows of ``chart_columns(width)``."""
        names = self.shown_chart_names()
        columns = chart_columns(self.scroll_area.viewport().width() or self.width())
        if not force and columns == self._columns and names == self._placed:
            return
        self._columns, self._placed = columns, names
        for chart in self.charts.values():
            self.grid.removeWidget(chart)
        for row in range(self.grid.rowCount()):
            self.grid.setRowStretch(row, 0)
        for position, name in enumerate(names):
            self.grid.addWidget(self.charts[name], position // columns, position % columns)
        rows = -(-len(names) // columns)
        for row in range(rows):
            self.grid.setRowStretch(row, 1)
        for column in range(3):
            self.grid.setColumnStretch(column, 1 if column < columns else 0)
        for name, chart in self.charts.items():
            chart.setVisible(name in names)

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802 - Qt override
        super().resizeEvent(event)
        self._layout_charts()

    # ---- model -----------------------------------------------------------------------

    def set_model(self, model: MonitorModel) -> None:
        self.model = model
        self._connect_model(model)
        self._on_model_reset()

    def _connect_model(self, model: MonitorModel) -> None:
        model.reset.connect(self._on_model_reset)
        model.series_added.connect(self._on_series_added)

    def _on_model_reset(self) -> None:
        self._remove_logged_charts()
        for chart in self.charts.values():
            chart.clear()
        self.rank_legend.clear()
        self.gpu_legend.clear()
        self._series_dirty = True
        self._update_notes()

    def _on_series_added(self, _name: str, _key: int) -> None:
        self._series_dirty = True

    def _sync_series(self) -> None:
        self._series_dirty = False
        added = []
        for name in logged_metric_names(self.model):
            if name not in self.charts:
                self._add_chart(logged_chart(name))
                added.append(name)
        dark = palette_is_dark(self.palette())
        world = (None if self.model.run is None else self.model.run.world_size) or 0
        ranks = max(world, len(self.model.ranks), *(max(self.model.series(name), default=-1) + 1
                                                    for name, definition in self._defs.items()
                                                    if definition.key_label == RANK_KEYS))
        self.every_rank.setVisible(ranks > BAND_ABOVE_RANKS)
        self.every_rank.setEnabled(ranks <= EVERY_RANK_LIMIT)
        self.band_ranks = ranks > BAND_ABOVE_RANKS and not (self.every_rank.isChecked() and ranks <= EVERY_RANK_LIMIT)
        gpus = max((len(self.model.series(name)) for name, definition in self._defs.items()
                    if definition.key_label == GPU_KEYS), default=0)
        self.band_gpus = gpus > BAND_ABOVE_RANKS  # a legend of 1,024 GPUs filled the charts' area
        for name, chart in self.charts.items():
            definition = self._defs[name]
            by_key = self.model.series(name)
            per_rank = definition.key_label == RANK_KEYS
            count = max(world, max(by_key, default=-1) + 1) if per_rank else len(by_key)
            legend = self._legend(definition.key_label)
            chart.set_band_mode(self.band_ranks if per_rank else definition.key_label == GPU_KEYS and self.band_gpus)
            for key, series in sorted(by_key.items()):
                if not chart.has_series(key, series):
                    color = series_color(key, count, dark)
                    label = key_label(definition.key_label, key, count)
                    chart.set_series(key, label, series, color, count)
                    if key not in legend.keys and (not chart.band_mode or (per_rank and key in self._highlighted)):
                        legend.set_entry(key, label, color)
                    chart.set_curve_visible(key, key not in legend.keys or legend.is_visible(key))
        self.gpu_legend.set_title(f"Median and p10-p90 of {gpus:,} GPUs" if self.band_gpus else "GPUs")
        self._update_highlighted(force=True)
        self._set_mode(GPU if self.model.has_gpu_samples() else CPU)
        for chart in self.charts.values():
            chart.set_x_axis(self.x_axis, self.model.t0)
        self._layout_charts(force=bool(added))
        for name in added:
            self.chart_added.emit(name)

    def set_chosen_ranks(self, ranks: frozenset[int]) -> None:
        """Draw these ranks over the band too (the rank table's selection)."""
        if ranks != self.chosen_ranks:
            self.chosen_ranks = ranks
            self._update_highlighted(force=True)

    def _on_every_rank_toggled(self, _on: bool) -> None:
        self._series_dirty = True
        for chart in self.charts.values():
            for key in chart.keys:
                chart.set_curve_visible(key, True)
        self.refresh(force=True)

    def _update_highlighted(self, force: bool = False) -> None:
        """With the band: the ranks drawn on their own are the failed, stalled, lost or stopped ones
        and the chosen ones; the legend names only them."""
        if not self.band_ranks:
            if self._highlighted or self.rank_legend.title != "Ranks":
                self._highlighted = frozenset()
                self.rank_legend.set_title("Ranks")
            return
        highlighted = frozenset(rank for rank, info in self.model.ranks.items()
                                if info.state in STANDING_OUT_STATES) | self.chosen_ranks
        if highlighted == self._highlighted and not force:
            return
        self._highlighted = highlighted
        world = max(len(self.model.ranks), (None if self.model.run is None else self.model.run.world_size) or 0)
        dark = palette_is_dark(self.palette())
        for name, chart in self.charts.items():
            if chart.band_mode and self._defs[name].key_label == RANK_KEYS:
                chart.set_highlighted(highlighted)
                for key in highlighted:
                    if key in chart.keys and key not in self.rank_legend.keys:
                        self.rank_legend.set_entry(key, key_label(RANK_KEYS, key, world),
                                                   series_color(key, world, dark))
        self.rank_legend.keep_only(highlighted)
        drawn = "failed, stalled and chosen ranks" if highlighted else "no rank stands out; select ranks to draw them"
        self.rank_legend.set_title(f"Median and p10-p90 of {world:,} ranks · {drawn}:")

    def _update_notes(self) -> None:
        """What each empty chart says (waiting, not measured and why, every curve hidden)."""
        for name, chart in self.charts.items():
            if chart.has_data():
                chart.set_empty_note(HIDDEN_NOTE)
            else:
                chart.set_empty_note(empty_chart_note(self._defs[name], self.model, False) or "")

    def _legend(self, key_label: str) -> LegendBar:
        return self.gpu_legend if key_label == GPU_KEYS else self.rank_legend

    def _on_legend_toggled(self, key_label: str, key: int, visible: bool) -> None:
        for name, chart in self.charts.items():
            if self._defs[name].key_label == key_label:
                chart.set_curve_visible(key, visible)

    def _set_mode(self, mode: str) -> None:
        if mode == self._mode:
            return
        self._mode = mode
        self.gpu_legend.setVisible(mode == GPU)
        self._layout_charts(force=True)

    @property
    def mode(self) -> str:
        """``gpu`` when the run has GPU samples, else ``cpu``."""
        return self._mode or CPU

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
        self.smoothing = value / 100.0
        self.smoothing_label.setText(f"{self.smoothing:.2f}")
        for chart in self.charts.values():
            chart.set_smoothing(self.smoothing)

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

    def _on_hover_moved(self, source: MetricChart, x: float | None) -> None:
        """The crosshair follows the cursor on every chart on the same x axis, as in W&B."""
        for chart in self.charts.values():
            if chart is not source and chart.x_axis == source.x_axis:
                chart.show_marker(x)

    def _align_charts(self) -> None:
        """Charts on show get the same left axis width (the widest labels') and, per x axis, the
        same x range to fit: a step or a time is at the same place on each of them."""
        shown = [chart for chart in self.charts.values() if not chart.isHidden()]
        width = max((chart.wanted_axis_width() for chart in shown), default=0)
        bounds: dict[str, tuple[float, float]] = {}
        for chart in shown:
            own = chart.curve_set.visible_bounds()[0]
            if own is not None and not chart.is_empty:
                low, high = bounds.get(chart.x_axis, own)
                bounds[chart.x_axis] = (min(low, own[0]), max(high, own[1]))
        for chart in self.charts.values():
            if width:
                chart.set_axis_width(width)
            chart.set_shared_x_bounds(bounds.get(chart.x_axis))

    # ---- drawing ---------------------------------------------------------------------

    def refresh(self, force: bool = False) -> int:
        """Redraw what changed (called by the timer); returns the points handed to pyqtgraph."""
        started = time.perf_counter()
        if self._series_dirty:
            self._sync_series()
        self._update_highlighted()
        points = 0
        band_allowed = True  # one chart's band a frame for new data: at 1,024 ranks a band is ~10-20 ms
        for chart in self._charts_band_first():
            if force or chart.isVisible():
                points += chart.refresh(force, band_allowed)
                band_allowed = band_allowed and not chart.band_recomputed
        self._align_charts()
        if force or self.frames % NOTES_EVERY == 0:
            self._update_notes()
        self.frames += 1
        self.last_frame_ms = 1000.0 * (time.perf_counter() - started)
        self.frame_drawn.emit(self.last_frame_ms)
        return points

    def _charts_band_first(self) -> list[MetricChart]:
        """The charts, the one whose band is oldest first: with one band recomputed a frame, each
        gets its turn."""
        return sorted(self.charts.values(), key=lambda chart: chart.band_age_key())

    def export_png(self, path: Path, title: str = "") -> Path:
        """Save every chart as it looks on the screen (refreshing first), the ones scrolled out of
        view too, under ``title`` (the run it shows), with no buttons drawn in.

        Raises:
            OSError: the image could not be written.
        """
        self.refresh(force=True)
        buttons = [chart.log_button for chart in self.charts.values() if not chart.log_button.isHidden()]
        for button in buttons:
            button.hide()  # their room is kept: nothing moves
        try:
            self.container.grab()  # the first paint measures the labels; the axes make room for them
            self.refresh(force=True)
            charts = self.container.grab()
        finally:
            for button in buttons:
                button.show()
        legends = [legend for legend in (self.rank_legend, self.gpu_legend) if not legend.isHidden()]
        title_font = QFont(self.font())
        title_font.setBold(True)
        title_font.setPointSizeF(title_font.pointSizeF() * 1.25)
        title_height = QFontMetrics(title_font).height() + 8 if title else 0
        image = QPixmap(charts.width(), title_height + charts.height() + sum(legend.height() for legend in legends))
        image.fill(self.palette().color(QPalette.ColorRole.Window))
        painter = QPainter(image)
        if title:
            painter.setFont(title_font)
            painter.setPen(self.palette().color(QPalette.ColorRole.WindowText))
            painter.drawText(QRect(6, 0, charts.width() - 12, title_height),
                             int(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter), title)
        top = title_height
        for legend in legends:
            painter.drawPixmap(0, top, legend.grab())
            top += legend.height()
        painter.drawPixmap(0, top, charts)
        painter.end()
        path = Path(path)
        if not image.save(str(path), "PNG"):
            raise OSError(f"could not write {path}")
        return path
