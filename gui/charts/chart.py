"""One live chart: a pyqtgraph plot with a curve per rank (or GPU) drawn from decimated series.

:class:`MetricChart` never hands pyqtgraph more than about two points per pixel
column: on :meth:`MetricChart.refresh` each visible curve asks its
:class:`~gui.models.series.Series` for the min/max of the visible x range at
the plot's width, and only when something changed (new points, another range or
width, another smoothing, log scale). Callers refresh on a timer (``ChartGrid``
does, at 15 Hz), never per message. All curves are one graphics item
(``gui.charts.curves.CurveSetItem``).

What a person can do, as in TensorBoard:

* hover: a readout lists the step (or time) and each rank's value at the cursor (with
  smoothing: the smoothed and the raw value, each named); a vertical line marks the step,
  on the charts beside it too (``hover_moved``, ``show_marker``);
* the mouse wheel and a drag zoom and pan the x axis only (y keeps fitting what is
  visible, so curves never leave the view); a double click shows everything again;
* the ``log`` button switches the y axis to a log scale (values <= 0 become gaps), labelled
  at decades, then 1-2-5, as many as fit without overlapping;
* with smoothing, the raw curve stays visible, faint, under the smoothed one
  (only for training metrics: a memory sample is never smoothed into a ramp), and the y
  range covers it: a spike is not clipped because the smoothing flattened it.

:meth:`MetricChart.picture` is the chart as on the screen without its buttons (an export).

An empty chart says why (``set_empty_note``) instead of showing a bare 0..1 box.
"""

from __future__ import annotations

import colorsys
import html
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyqtgraph as pg
from pyqtgraph.GraphicsScene.mouseEvents import MouseClickEvent
from PySide6.QtCore import QEvent, QObject, QPoint, QPointF, QRectF, Qt, Signal
from PySide6.QtGui import (
    QBrush,
    QColor,
    QFont,
    QFontMetricsF,
    QHideEvent,
    QPainter,
    QPalette,
    QPen,
    QPixmap,
    QTextDocument,
)
from PySide6.QtWidgets import (
    QApplication,
    QHBoxLayout,
    QLabel,
    QSizePolicy,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from gui.charts import ticks
from gui.charts.axis import ChartAxis
from gui.charts.curves import CurveSetItem
from gui.charts.legend import LegendBar
from gui.charts.readout import ReadoutRow, format_position, format_value, pick_rows
from gui.charts.smoothing import SmoothedValues
from gui.models.rank_band import RankBand, rank_band
from gui.models.series import STEP, TIME, Series

DEFAULT_PIXELS = 800
"""Width assumed before the plot has been laid out."""
LEFT_AXIS_WIDTH = 54
BAND_SECONDS = 2.0
"""The band across many ranks is recomputed at most this often while data streams in: the new
steps of ranks inside it reach the screen with the next band. With five 1,024-rank charts a band
frame costs ~22 ms (~20 ms of it sampling 1,024 ranks' curves), a frame between bands ~5 ms
(``tests/bench/bench_band_frames.py``)."""
BAND_SHARE = 0.025
"""...and at most this share of the GUI thread's time per chart, for bands slower to compute
than ``BAND_SECONDS`` allows (a band that takes 80 ms waits 3.2 s), so five charts' bands take
an eighth of the thread at most."""
BAND_KEYS = (-3, -2, -1)
"""The readout's rows for the band's p90, median and p10 (no rank has a negative key)."""
READOUT_OFFSET = 14
INSIDE_BAND = ("inside the band",)
"""``_Curve.drawn`` of a rank drawn only through the band: its new points change nothing on the
screen until the band is recomputed, so a frame neither empties it again nor repaints for it (at
1,024 ranks that was ~3 ms a chart, and a repaint, every frame)."""

# Tableau 10, readable on light and dark backgrounds alike.
_CATEGORICAL = ("#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f",
                "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac")


def series_color(index: int, count: int, dark: bool = False) -> QColor:
    """A distinct colour for curve ``index`` of ``count``; the same index gets the same colour everywhere."""
    if count <= len(_CATEGORICAL):
        color = QColor(_CATEGORICAL[index % len(_CATEGORICAL)])
        return color.lighter(115) if dark else color
    # Many ranks: golden-ratio hues, three lightness bands so neighbours differ.
    hue = (index * 0.618033988749895) % 1.0
    lightness = (0.60 if dark else 0.40) + 0.09 * (index % 3)
    red, green, blue = colorsys.hls_to_rgb(hue, lightness, 0.78)
    return QColor.fromRgbF(red, green, blue)


def palette_is_dark(palette: QPalette | None = None) -> bool:
    palette = palette or QApplication.palette()
    return palette.color(QPalette.ColorRole.Base).lightness() < 128


def bottom_axis_height(axis: pg.AxisItem) -> int:
    """Pixels a bottom axis needs for its tick marks and one line of labels."""
    font = axis.style.get("tickFont")
    metrics = QFontMetricsF(font if font is not None else QApplication.font())
    return math.ceil(metrics.height() + axis.style["tickTextOffset"][1] + max(0, axis.style["tickLength"]) + 4)


def log10_or_gap(values: np.ndarray) -> np.ndarray:
    """``log10`` of positive values; NaN (a gap) for zero, negative and missing ones."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(values > 0, np.log10(np.where(values > 0, values, 1.0)), np.nan)


@dataclass
class _Curve:
    key: int
    label: str
    series: Series
    color: QColor
    smoothed: SmoothedValues | None = None
    drawn: tuple | None = None
    points: int = 0


class MetricChart(QWidget):
    """A titled plot of one quantity, one curve per key (rank or GPU index).

    ``scale`` multiplies values at draw time (seconds to ms, share to %, bytes to
    GiB); ``time_only`` charts (GPU and process samples, which have no step) stay
    on the time axis when the others switch to steps; ``smoothable`` charts take
    the smoothing weight (default: charts with steps).

    Signals:
        curve_toggled(int, bool): a legend click showed or hid the curve of a key.
        follow_requested: a double click asked to show all data again (the chart did).
        log_y_toggled(bool): the log button was switched.
        hover_moved(float): the readout now shows the points at this x (charts beside it mark it too).
        hover_ended: the cursor left the chart.
    """

    curve_toggled = Signal(int, bool)
    follow_requested = Signal()
    log_y_toggled = Signal(bool)
    hover_moved = Signal(float)
    hover_ended = Signal()

    def __init__(self, title: str, unit: str = "", scale: float = 1.0, time_only: bool = False,
                 parent: QWidget | None = None, legend: bool = True, smoothable: bool | None = None) -> None:
        super().__init__(parent)
        self.title = title
        self.unit = unit
        self.scale = scale
        self.time_only = time_only
        self.smoothable = (not time_only) if smoothable is None else smoothable
        self.smoothing = 0.0
        self.log_y = False
        self._x_axis = TIME if time_only else STEP
        self._t0 = 0.0
        self._curves: dict[int, _Curve] = {}
        self._dark = palette_is_dark(self.palette())
        self._empty = False
        self._note = ""
        self._hover: tuple[float, float] | None = None
        """(x, y) of the cursor in view coordinates while it is over the plot."""
        self._hover_widget_point = QPoint()
        self._readout_seen: dict[int, tuple[int, int, float]] = {}
        """key -> (series id, points, last x) when the readout was last brought up to date."""
        self.band_mode = False
        """Many ranks: the median and the p10-p90 band across them, and only the ``highlighted``
        ranks' own curves (``gui.models.rank_band``)."""
        self.highlighted: frozenset[int] = frozenset()
        self.band: RankBand | None = None
        self._band_drawn: tuple | None = None
        self._band_at = 0.0
        self._band_every = BAND_SECONDS
        """Seconds from one band to the next while data streams in (``BAND_SECONDS``, ``BAND_SHARE``)."""
        self.band_recomputed = False
        """Whether the last ``refresh`` recomputed the band."""

        self.title_label = QLabel(title + (" · vs time" if time_only else ""))
        title_font = QFont(self.title_label.font())
        title_font.setBold(True)
        self.title_label.setFont(title_font)
        self.title_label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.title_label.setToolTip(title)
        self.log_button = QToolButton()
        self.log_button.setText("log")
        self.log_button.setCheckable(True)
        self.log_button.setAutoRaise(True)
        self.log_button.setToolTip("Logarithmic y axis (values <= 0 are left out)")
        self.log_button.toggled.connect(self.set_log_y)
        retained = self.log_button.sizePolicy()
        retained.setRetainSizeWhenHidden(True)  # hidden in an exported picture, the layout unchanged
        self.log_button.setSizePolicy(retained)
        header = QHBoxLayout()
        header.setContentsMargins(6, 0, 2, 0)
        header.setSpacing(4)
        header.addWidget(self.title_label, 1)
        header.addWidget(self.log_button)

        self.left_axis = ChartAxis("left", ticks.VALUE)
        self.bottom_axis = ChartAxis("bottom", ticks.SECONDS if time_only else ticks.STEP)
        self.plot_widget = pg.PlotWidget(axisItems={"left": self.left_axis, "bottom": self.bottom_axis})
        self.plot_item = self.plot_widget.getPlotItem()
        self.plot_item.setMenuEnabled(False)
        self.plot_item.layout.setContentsMargins(2, 2, 12, 2)  # room for the last x label
        self.left_axis.setWidth(LEFT_AXIS_WIDTH)
        self.axis_width = LEFT_AXIS_WIDTH
        self.fits_axis_width = True
        """Widen the left axis to the labels on each refresh (a chart alone); a ``ChartGrid`` gives
        its charts one width instead."""
        # The x labels' room is fixed: grown on the first paint, it would leave a picture taken
        # before a second one (an export) without them.
        self.bottom_axis.setHeight(bottom_axis_height(self.bottom_axis))
        self.shared_x_bounds: tuple[float, float] | None = None
        """The x range charts beside this one show (``ChartGrid``): fitted to, so their x line up."""
        self.view_box = self.plot_item.getViewBox()
        # Ranges are ours (see _fit): pyqtgraph's auto range asks every curve for its
        # bounds several times a frame, and moves the axes (a costly repaint) every frame.
        self.view_box.disableAutoRange()
        # The wheel and drags act on x only; y keeps fitting what is visible.
        self.view_box.setMouseEnabled(x=True, y=False)
        self.plot_item.hideButtons()
        self.follow_x = True
        self.follow_y = True
        self.view_box.sigRangeChangedManually.connect(self._on_zoomed_by_user)
        scene = self.plot_widget.scene()
        scene.sigMouseClicked.connect(self._on_scene_clicked)
        scene.sigMouseMoved.connect(self._on_mouse_moved)
        self.curve_set = CurveSetItem()
        self.plot_item.addItem(self.curve_set)
        # The grid is drawn by the curve item, not by the axes: an axis grid makes every
        # curve update repaint both axes, labels included, which cost more than the curves.
        self.view_box.sigRangeChanged.connect(self._update_grid)
        self.view_box.sigResized.connect(self._update_grid)
        self.view_box.sigResized.connect(self._place_note)
        self.plot_widget.viewport().installEventFilter(self)  # Leave hides the readout

        # Overlays: plain widgets over the plot, so they repaint without the scene.
        self.note_label = QLabel(self.plot_widget)
        self.note_label.setObjectName("chartNote")
        self.note_label.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.note_label.setWordWrap(True)
        self.note_label.setAttribute(Qt.WidgetAttribute.WA_TransparentForMouseEvents, True)
        self.note_label.hide()
        # The readout is a tooltip window showing a picture rendered once per change: a label
        # over the plot would be repainted (and make the plot repaint under it) every frame
        # the curves change, and could not reach past a short chart's edge.
        self.readout = QLabel(None, Qt.WindowType.ToolTip)
        self.readout.setObjectName("chartReadout")
        self.readout.setAttribute(Qt.WidgetAttribute.WA_TransparentForMouseEvents, True)
        self.readout.setAttribute(Qt.WidgetAttribute.WA_ShowWithoutActivating, True)
        self._readout_text = ""
        self.readout.hide()
        self.destroyed.connect(self.readout.deleteLater)

        self.legend: LegendBar | None = None
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(0)
        layout.addLayout(header)
        if legend:  # charts in a ChartGrid share the grid's LegendBar instead
            self.legend = LegendBar()
            self.legend.visibility_changed.connect(self._on_legend_toggled)
            layout.addWidget(self.legend)
        layout.addWidget(self.plot_widget)
        self._apply_palette()
        self._show_empty(True)

    def _apply_palette(self) -> None:
        """Background, axes, overlays and legend from the widget's palette (light or dark)."""
        palette = self.palette()
        self._dark = palette_is_dark(palette)
        background = palette.color(QPalette.ColorRole.Base)
        foreground = palette.color(QPalette.ColorRole.Text)
        self.plot_widget.setBackground(background)
        grid = QColor(foreground)
        grid.setAlpha(38)
        line = QColor(foreground)
        line.setAlpha(110)
        self.curve_set.set_grid_pen(pg.mkPen(grid, width=1), pg.mkPen(line, width=1))
        band = QColor(foreground)
        band.setAlpha(45)
        median = QColor(foreground)
        median.setAlpha(210)
        self.curve_set.set_band_colors(QBrush(band), pg.mkPen(median, width=2))
        axis_pen = pg.mkPen(foreground.lighter(80) if self._dark else foreground.darker(130))
        for axis in (self.left_axis, self.bottom_axis):
            axis.setPen(axis_pen)
            axis.setTextPen(pg.mkPen(foreground))
        muted = QColor(foreground)
        muted.setAlpha(150)
        self.note_label.setStyleSheet(f"QLabel#chartNote {{ color: rgba({muted.red()},{muted.green()},"
                                      f"{muted.blue()},{muted.alpha()}); padding: 6px; }}")
        self._readout_colors = (palette.color(QPalette.ColorRole.ToolTipBase),
                                palette.color(QPalette.ColorRole.ToolTipText), QColor(foreground))
        self._readout_text = ""  # drawn again in the new colours on the next update
        self._update_axis_label()

    def eventFilter(self, _watched: QObject, event: QEvent) -> bool:  # noqa: N802 - Qt override
        # Installed on the plot's viewport only.
        if event.type() == QEvent.Type.Leave:
            self.hide_readout()
        return False

    def changeEvent(self, event: QEvent) -> None:  # noqa: N802 - Qt override
        super().changeEvent(event)
        if event.type() == QEvent.Type.PaletteChange:
            self._apply_palette()

    # ---- curves ----------------------------------------------------------------------

    @property
    def keys(self) -> list[int]:
        return list(self._curves)

    def has_series(self, key: int, series: Series) -> bool:
        curve = self._curves.get(key)
        return curve is not None and curve.series is series

    def _smoothed(self, series: Series) -> SmoothedValues | None:
        return SmoothedValues(series, self.smoothing) if self.smoothing and self.smoothable else None

    def set_series(self, key: int, label: str, series: Series, color: QColor | None = None,
                   count: int = 10) -> None:
        """Draw ``series`` as the curve of ``key`` (replacing the one it had)."""
        curve = self._curves.get(key)
        if curve is not None:
            curve.series = series
            curve.smoothed = self._smoothed(series)
            curve.drawn = None
            return
        color = QColor(color) if color is not None else series_color(key, count, self._dark)
        curve = _Curve(key, label, series, color, self._smoothed(series))
        self._curves[key] = curve
        self.curve_set.set_pen(key, pg.mkPen(color, width=1))
        if self.legend is not None:
            self.legend.set_entry(key, label, color)

    def set_band_mode(self, on: bool) -> None:
        """Draw the median and p10-p90 band across the curves, and only the highlighted curves."""
        if on != self.band_mode:
            self.band_mode = on
            self._band_drawn = None
            for curve in self._curves.values():
                curve.drawn = None
            if not on:
                self.band = None
                self.curve_set.set_band(None)

    def set_highlighted(self, keys: frozenset[int]) -> None:
        """The ranks drawn as their own curves over the band (failed, stalled, chosen by the user)."""
        if keys != self.highlighted:
            changed = keys ^ self.highlighted
            self.highlighted = keys
            for key in changed:
                if key in self._curves:
                    self._curves[key].drawn = None

    def set_curve_style(self, key: int, dash: Qt.PenStyle, width: float = 1.0) -> None:
        """Draw the curve of ``key`` dashed or dotted (runs whose curves coincide stay apart)."""
        pen = pg.mkPen(self._curves[key].color, width=width)
        pen.setStyle(dash)
        self.curve_set.set_pen(key, pen)

    def picture(self) -> QPixmap:
        """The chart as on the screen, axes and labels included, without its buttons (an export)."""
        self.refresh(force=True)
        shown = not self.log_button.isHidden()
        self.log_button.hide()  # its room is kept: nothing moves
        try:
            self.grab()  # the first paint measures the labels; the axes make room for them
            return self.grab()
        finally:
            self.log_button.setVisible(shown)

    def clear(self) -> None:
        """Forget every curve and the view range (the next run starts from scratch)."""
        self._curves.clear()
        self.curve_set.remove_all()
        if self.legend is not None:
            self.legend.clear()
        self.hide_readout()
        self.follow_x = self.follow_y = True
        self._show_empty(True)

    def set_curve_visible(self, key: int, visible: bool) -> None:
        curve = self._curves.get(key)
        if curve is None or self.curve_set.is_visible(key) == visible:
            return
        self.curve_set.set_visible(key, visible)
        if self.legend is not None:
            self.legend.set_visible(key, visible)
        self._fit()
        self.curve_toggled.emit(key, visible)

    def is_curve_visible(self, key: int) -> bool:
        return key in self._curves and self.curve_set.is_visible(key)

    def curve_pen(self, key: int) -> QPen:
        return self.curve_set.pen(key)

    def curve_points(self, key: int) -> int:
        """Points handed to the painter for ``key`` at the last refresh."""
        return self._curves[key].points

    def curve_data(self, key: int) -> tuple[np.ndarray, np.ndarray]:
        """What the curve of ``key`` shows now (x, y after decimation and scaling)."""
        return self.curve_set.data(key)

    def _on_legend_toggled(self, key: int, visible: bool) -> None:
        self.set_curve_visible(key, visible)

    # ---- empty chart -------------------------------------------------------------------

    @property
    def is_empty(self) -> bool:
        """Nothing finite is drawn (the note is shown instead)."""
        return self._empty

    def note(self) -> str:
        return self._note if self._empty else ""

    def has_data(self) -> bool:
        """Some curve (shown or hidden) has a finite point to draw."""
        return self.curve_set.has_data()

    def set_empty_note(self, text: str) -> None:
        """What the chart says while it has nothing to draw (``ChartGrid`` words it)."""
        if text != self._note:
            self._note = text
            self.note_label.setText(text)
            self._show_empty(self._empty)
            self._place_note()

    def _show_empty(self, empty: bool) -> None:
        """An empty chart shows its note and no tick labels: no 0..1 box that looks like data."""
        if empty != self._empty:
            self._empty = empty
            for axis in (self.left_axis, self.bottom_axis):
                axis.setStyle(showValues=not empty)
            if empty:
                self.view_box.setRange(xRange=(0.0, 1.0), yRange=(0.0, 1.0), padding=0)
        show_note = empty and bool(self._note)
        if show_note == self.note_label.isHidden():
            self.note_label.setVisible(show_note)
            self._place_note()

    def _place_note(self, *_args: object) -> None:
        """Fit the note to the plot area. Placed while the chart itself is still hidden too (not
        ``isVisible``): a note shown before its chart was left as a strip at the top left."""
        if self.note_label.isHidden():
            return
        rect = self.view_box.sceneBoundingRect()
        top_left = self.plot_widget.mapFromScene(rect.topLeft())
        bottom_right = self.plot_widget.mapFromScene(rect.bottomRight())
        area = QRectF(QPointF(top_left), QPointF(bottom_right)).toRect()
        self.note_label.setGeometry(area if area.width() > 40 else self.plot_widget.rect())

    # ---- axes, log scale and smoothing ---------------------------------------------------

    @property
    def x_axis(self) -> str:
        return self._x_axis

    def set_x_axis(self, axis: str, t0: float = 0.0) -> None:
        """Plot against ``"step"`` or ``"time"`` (seconds since ``t0``); time-only charts ignore step."""
        axis = TIME if self.time_only else axis
        if axis == self._x_axis and t0 == self._t0:
            return
        self._x_axis, self._t0 = axis, t0
        self.bottom_axis.set_kind(ticks.STEP if axis == STEP else ticks.SECONDS)
        self._invalidate()
        self._update_axis_label()
        self.follow()

    def set_t0(self, t0: float) -> None:
        self.set_x_axis(self._x_axis, t0)

    def set_smoothing(self, weight: float) -> None:
        """EMA weight in [0, 1): 0 draws raw values. Charts that are not ``smoothable`` ignore it."""
        if weight == self.smoothing or not self.smoothable:
            return
        self.smoothing = weight
        for curve in self._curves.values():
            curve.smoothed = self._smoothed(curve.series)
            curve.drawn = None

    def set_log_y(self, on: bool) -> None:
        """Draw ``log10`` of the values (the axis labels say the values themselves)."""
        on = bool(on)
        if on != self.log_button.isChecked():
            self.log_button.setChecked(on)  # toggled calls back here
            return
        if on == self.log_y:
            return
        self.log_y = on
        self.left_axis.logMode = on
        self.left_axis.picture = None
        self.left_axis.update()
        self._invalidate()
        self.follow(x=False, y=True)
        self.refresh()
        self.log_y_toggled.emit(on)

    def _invalidate(self) -> None:
        for curve in self._curves.values():
            curve.drawn = None

    def _update_axis_label(self) -> None:
        """No axis title (it costs every chart a line): the ticks say steps (``12k``) or time
        (``1:05``), the title of a chart of samples says "vs time", the X axis control the rest."""
        self.bottom_axis.setToolTip("step" if self._x_axis == STEP else "time since the run started")

    def _update_grid(self, *_args: object) -> None:
        (x_low, x_high), (y_low, y_high) = self.view_box.viewRange()
        width, height = max(1.0, self.view_box.width()), max(1.0, self.view_box.height())
        lines = []
        for axis, low, high, size in ((self.bottom_axis, x_low, x_high, width), (self.left_axis, y_low, y_high, height)):
            levels = axis.tickValues(low, high, size) if not self._empty else []
            lines.append(list(levels[0][1]) if levels else [])
        self.curve_set.set_grid(lines[0], lines[1], QRectF(x_low, y_low, x_high - x_low, y_high - y_low))

    # ---- following the data --------------------------------------------------------------

    def follow(self, x: bool = True, y: bool = True) -> None:
        """Fit the range to the data again and keep fitting it as points arrive."""
        self.follow_x = self.follow_x or x
        self.follow_y = self.follow_y or y
        self._fit(force=True)

    def stop_following(self, x: bool = True, y: bool = True) -> None:
        if x:
            self.follow_x = False
        if y:
            self.follow_y = False

    def _on_zoomed_by_user(self, mask: Sequence[bool]) -> None:
        # A wheel zoom or a drag (x only): keep the x range the user chose; y keeps fitting.
        self.stop_following(x=bool(mask[0]), y=False)

    def _on_scene_clicked(self, event: MouseClickEvent) -> None:
        if event.double():
            self.follow()
            self.follow_requested.emit()

    def _fit(self, force: bool = False) -> None:
        """Set the view to the visible curves' bounds (``ticks.padded_range``), with hysteresis.

        Growing data extends the x range by a little more than needed, and the y range
        changes only when the data leaves it or shrinks well inside it, so the axes
        (costly to repaint) stay still on most frames, and the eye does too.
        """
        if self._empty or not (self.follow_x or self.follow_y):
            return
        x_bounds, y_bounds = self.curve_set.visible_bounds()
        (view_x_low, view_x_high), (view_y_low, view_y_high) = self.view_box.viewRange()
        x_range = y_range = None
        if self.follow_x and x_bounds is not None:
            x_low, x_high = x_bounds
            if self.shared_x_bounds is not None:
                x_low, x_high = min(x_low, self.shared_x_bounds[0]), max(x_high, self.shared_x_bounds[1])
            kind = ticks.STEP if self._x_axis == STEP else ticks.SECONDS
            target = ticks.padded_range(x_low, x_high, kind)
            span = target[1] - target[0]
            if (force or x_low < view_x_low or x_high > view_x_high
                    or (view_x_high - view_x_low) > 1.5 * span or x_low - view_x_low > 0.1 * span):
                x_range = target
        if self.follow_y and y_bounds is not None:
            y_low, y_high = y_bounds
            target = ticks.padded_range(y_low, y_high, ticks.VALUE, at_zero=not self.log_y)
            if (force or y_low < view_y_low or y_high > view_y_high
                    or (target[1] - target[0]) < 0.6 * (view_y_high - view_y_low)):
                y_range = target
        if x_range is not None or y_range is not None:
            self.view_box.setRange(xRange=x_range, yRange=y_range, padding=0, disableAutoRange=False)

    # ---- hover readout -------------------------------------------------------------------

    def _on_mouse_moved(self, scene_point: QPointF) -> None:
        if self._empty or not self.view_box.sceneBoundingRect().contains(scene_point):
            self.hide_readout()
            return
        point = self.view_box.mapSceneToView(scene_point)
        self._readout_seen = {}
        self._hover_widget_point = self.plot_widget.mapFromScene(scene_point)
        self._hover = (point.x(), point.y())
        self.update_readout()

    def show_readout_at(self, x: float, y: float) -> None:
        """Hover at (``x``, ``y``) in view coordinates, as the mouse does (tests, benchmarks)."""
        self._readout_seen = {}
        scene_point = self.view_box.mapViewToScene(QPointF(x, y))
        self._hover_widget_point = self.plot_widget.mapFromScene(scene_point)
        self._hover = (x, y)
        self.update_readout()

    def hide_readout(self) -> None:
        hovered = self._hover is not None
        self._hover = None
        self._readout_shown = None
        self.readout.hide()
        self.curve_set.set_marker(None)
        if hovered:
            self.hover_ended.emit()

    def show_marker(self, x: float | None) -> None:
        """The vertical line at ``x`` (None: none) that follows the cursor over another chart."""
        if self._hover is None:
            self.curve_set.set_marker(x)

    def set_axis_width(self, width: int) -> None:
        """The left axis's width in pixels (``ChartGrid`` gives every chart the widest one's)."""
        if width != self.axis_width:
            self.axis_width = width
            self.left_axis.setWidth(width)

    def wanted_axis_width(self) -> int:
        """Room the left axis's labels need now (at least ``LEFT_AXIS_WIDTH``)."""
        if self._empty:
            return LEFT_AXIS_WIDTH
        style = self.left_axis.style
        room = self.left_axis.labels_width() + style["tickTextOffset"][0] + max(0, style["tickLength"]) + 6
        return max(LEFT_AXIS_WIDTH, math.ceil(room))

    def set_shared_x_bounds(self, bounds: tuple[float, float] | None) -> None:
        """Fit x to ``bounds`` too (the union of the charts beside this one), so a step or a time
        is at the same place on every chart."""
        if bounds != self.shared_x_bounds:
            self.shared_x_bounds = bounds
            self._fit()

    def readout_rows(self) -> tuple[str, list[ReadoutRow], int]:
        """(position text, rows listed, rows left out) at the hover position."""
        if self._hover is None:
            return "", [], 0
        x, y = self._hover
        offset = self._t0 if self._x_axis == TIME else 0.0
        rows = []
        for curve in self._curves.values():
            if not self.curve_set.is_visible(curve.key) or (self.band_mode and curve.key not in self.highlighted):
                continue
            index = curve.series.nearest_index(self._x_axis, x + offset)
            if index is None:
                continue
            raw = float(curve.series.values.values[index]) * self.scale
            value = raw
            if curve.smoothed is not None:
                smoothed = curve.smoothed.sync().values
                value = float(smoothed[index]) * self.scale if index < len(smoothed) else raw
            point_x = float(curve.series.axis(self._x_axis)[index]) - offset
            rows.append(ReadoutRow(curve.key, curve.label, point_x, value, raw if curve.smoothed else None))
        band = self.band_values_at(x) if self.band_mode else None
        if band is not None:
            ranks = self.band.ranks if self.band is not None else 0
            rows += [ReadoutRow(key, label, x, value) for key, label, value in zip(
                BAND_KEYS, (f"p90 of {ranks:,} ranks", f"median of {ranks:,} ranks", f"p10 of {ranks:,} ranks"),
                (band[2], band[1], band[0]), strict=True)]
        if not rows:
            return "", [], 0
        nearest_x = min(rows, key=lambda row: abs(row.x - x)).x
        kept, left_out = pick_rows(rows, y, log=self.log_y)
        return format_position(nearest_x, self._x_axis == TIME), kept, left_out

    def _row_color(self, key: int) -> str:
        curve = self._curves.get(key)
        return curve.color.name() if curve is not None else self.curve_set.band_color().name()

    def update_readout(self) -> None:
        """Recompute the readout at the hover position (the mouse moved, or new points arrived).

        Only what changed is touched: while points stream in, the values under a resting
        cursor rarely change, and a readout moved or rewritten makes Qt repaint the curves
        under it.
        """
        position, rows, left_out = self.readout_rows()
        if not rows:
            self.readout.hide()
            self.curve_set.set_marker(None)
            self._readout_shown = None
            return
        marker = self._hover_x_snapped(rows)
        self.curve_set.set_marker(marker)
        self.hover_moved.emit(marker)
        lines = [f"<b>{html.escape(self.title)}</b> · {html.escape(position)}", "<table cellspacing=0 cellpadding=0>"]
        for row in rows:
            color = self._row_color(row.key)
            if row.raw is not None:
                value = (f"<span style='color:gray'>smoothed</span> {format_value(row.value)}"
                         f" <span style='color:gray'>· raw {format_value(row.raw)}</span>")
            else:
                value = format_value(row.value)
            lines.append(f"<tr><td><span style='color:{color}'>■</span> {html.escape(row.label)}&nbsp;&nbsp;</td>"
                         f"<td align=right>{value}</td></tr>")
        lines.append("</table>")
        if left_out:
            lines.append(f"<i>+{left_out} more (nearest the cursor shown)</i>")
        text = "".join(lines)
        shown = (text, self._hover_widget_point.x(), self._hover_widget_point.y())
        if shown == self._readout_shown and not self.readout.isHidden():
            return
        self._readout_shown = shown
        if text != self._readout_text:
            self._readout_text = text
            self.readout.setPixmap(self._render_readout(text))
            self.readout.adjustSize()
        self._place_readout()
        self.readout.show()

    def readout_text(self) -> str:
        """The readout's content (rich text), as drawn in its picture."""
        return self._readout_text if not self.readout.isHidden() else ""

    def _render_readout(self, text: str) -> QPixmap:
        background, foreground, border = self._readout_colors
        document = QTextDocument()
        document.setDefaultFont(self.font())
        document.setDefaultStyleSheet(f"body {{ color: {foreground.name()}; }}")
        document.setHtml(f"<body>{text}</body>")
        document.setDocumentMargin(4)
        size = document.size().toSize()
        ratio = self.devicePixelRatioF()
        pixmap = QPixmap(size * ratio)
        pixmap.setDevicePixelRatio(ratio)
        pixmap.fill(background)
        painter = QPainter(pixmap)
        document.drawContents(painter)
        painter.setPen(border)
        painter.drawRect(0, 0, size.width() - 1, size.height() - 1)
        painter.end()
        return pixmap

    _readout_shown: tuple | None = None

    def _hover_x_snapped(self, rows: list[ReadoutRow]) -> float:
        x = self._hover[0] if self._hover is not None else rows[0].x
        return min(rows, key=lambda row: abs(row.x - x)).x

    def _place_readout(self) -> None:
        """Next to the cursor, on the screen: a short chart's readout may reach past its edge."""
        anchor = self.plot_widget.viewport().mapToGlobal(self._hover_widget_point)
        size = self.readout.sizeHint()
        screen = self.screen().availableGeometry() if self.screen() is not None else None
        left, top = anchor.x() + READOUT_OFFSET, anchor.y() + READOUT_OFFSET
        if screen is not None:
            if left + size.width() > screen.right():
                left = anchor.x() - READOUT_OFFSET - size.width()
            if top + size.height() > screen.bottom():
                top = anchor.y() - READOUT_OFFSET - size.height()
            left, top = max(screen.left(), left), max(screen.top(), top)
        self.readout.move(left, top)

    def hideEvent(self, event: QHideEvent) -> None:  # noqa: N802 - Qt override
        super().hideEvent(event)
        self.hide_readout()  # another tab came to the front under the cursor

    # ---- drawing -----------------------------------------------------------------------

    def pixels(self) -> int:
        width = int(self.view_box.width())
        return width if width > 10 else DEFAULT_PIXELS

    def _transform(self, y: np.ndarray) -> np.ndarray:
        if self.scale != 1.0:
            y *= self.scale
        return log10_or_gap(y) if self.log_y else y

    def refresh(self, force: bool = False, band_allowed: bool = True) -> int:
        """Redraw curves whose data, range, width, smoothing or scale changed; returns points handed over.

        ``band_allowed`` False: the band is not recomputed in this frame unless it was never drawn or
        the view changed (``band_recomputed`` says whether it was), so a grid can spread the charts'
        band work over its frames."""
        pixels = self.pixels()
        x_range = None
        if not self.follow_x:
            low, high = self.view_box.viewRange()[0]
            offset = self._t0 if self._x_axis == TIME else 0.0
            x_range = (low + offset, high + offset)
        drawn_points = 0
        changed = force
        pixel_x, pixel_y = self.view_box.viewPixelSize()
        padding = (2 * abs(pixel_x), 2 * abs(pixel_y))
        low, high = (None, None) if x_range is None else x_range
        self.band_recomputed = False
        if self.band_mode:
            changed = self._refresh_band(pixels, low, high, force, band_allowed) or changed
        for curve in self._curves.values():
            if not self.curve_set.is_visible(curve.key):
                continue
            if self.band_mode and curve.key not in self.highlighted:  # inside the band: no curve of its own
                if curve.drawn is not INSIDE_BAND:
                    empty = np.empty(0)
                    self.curve_set.set_points(curve.key, empty, empty)
                    curve.drawn = INSIDE_BAND
                    curve.points = 0
                    changed = True
                continue
            state = (len(curve.series), pixels, x_range, self._x_axis, self._t0, self.smoothing, self.log_y)
            if state == curve.drawn and not force:
                continue
            faint = None
            if curve.smoothed is not None:
                x, y = curve.series.decimate(self._x_axis, low, high, pixels, curve.smoothed.sync())
                raw_x, raw_y = curve.series.decimate(self._x_axis, low, high, pixels)
                if self._x_axis == TIME and self._t0:
                    raw_x -= self._t0
                faint = (raw_x, self._transform(raw_y))
            else:
                x, y = curve.series.decimate(self._x_axis, low, high, pixels)
            if self._x_axis == TIME and self._t0:
                x -= self._t0
            self.curve_set.set_points(curve.key, x, self._transform(y), faint)
            curve.drawn = state
            curve.points = len(x)
            drawn_points += len(x)
            changed = True
        if changed:
            if self.fits_axis_width:
                self.set_axis_width(self.wanted_axis_width())
            self.curve_set.commit(padding)
            was_empty = self._empty
            self._show_empty(self.curve_set.visible_bounds()[1] is None)
            self._fit(force=was_empty and not self._empty)
            if self._hover is not None and self._readout_stale(self._hover[0]):
                self.update_readout()
        return drawn_points

    def _refresh_band(self, pixels: int, low: float | None, high: float | None, force: bool,
                      allowed: bool = True) -> bool:
        """Recompute the band when the data changed, at most every ``BAND_SECONDS`` (1,024 ranks'
        curves are sampled for it, from their stored points: ``rank_band``), and when only data
        changed, in a frame the grid ``allowed``; True when it was redrawn."""
        now = time.monotonic()
        if not force and self._band_drawn is not None and now - self._band_at < self._band_every:
            return False  # checked first: counting 1,024 ranks' points for the state was most of a plain frame
        state = (sum(len(curve.series) for curve in self._curves.values()), pixels, low, high, self._x_axis,
                 self._t0, self.smoothing, self.log_y)
        if state == self._band_drawn and not force:
            return False
        view_changed = self._band_drawn is None or state[1:] != self._band_drawn[1:]
        if not force and not view_changed and not allowed:
            return False
        self.band_recomputed = True
        curves = []
        bins = max(2, pixels // 2)
        for curve in self._curves.values():
            smoothed = curve.smoothed.sync() if curve.smoothed is not None else None
            curves.append(curve.series.band_points(self._x_axis, smoothed))
        band = rank_band(curves, bins, low, high)
        self._band_every = max(BAND_SECONDS, (time.monotonic() - now) / BAND_SHARE)
        self.band, self._band_drawn, self._band_at = band, state, now
        if band is None:
            self.curve_set.set_band(None)
            return True
        x = band.x - self._t0 if self._x_axis == TIME and self._t0 else band.x
        self.curve_set.set_band(x, self._transform(band.low.copy()), self._transform(band.median.copy()),
                                self._transform(band.high.copy()))
        return True

    def band_age_key(self) -> float:
        """Sorts the charts for a frame's one band (``ChartGrid.refresh``): in band mode the one
        recomputed longest ago first; the others after."""
        return self._band_at if self.band_mode else math.inf

    def band_values_at(self, x: float) -> tuple[float, float, float] | None:
        """(p10, median, p90) across ranks at ``x`` (view coordinates), scaled; None outside the band."""
        band = self.band
        if band is None or not len(band.x):
            return None
        offset = self._t0 if self._x_axis == TIME else 0.0
        index = int(np.clip(np.searchsorted(band.x, x + offset), 0, len(band.x) - 1))
        return (float(band.low[index]) * self.scale, float(band.median[index]) * self.scale,
                float(band.high[index]) * self.scale)

    def _readout_stale(self, hover_x: float) -> bool:
        """New points can change the readout only where they land on the cursor's side (at
        ``hover_x``): points appended beyond it (a cursor resting on history while the run goes
        on) cannot."""
        x = hover_x + (self._t0 if self._x_axis == TIME else 0.0)
        seen = self._readout_seen
        stale = False
        for curve in self._curves.values():
            series = curve.series
            size = len(series)
            before = seen.get(curve.key)
            if before is None or before[0] != id(series) or (
                    size != before[1] and not (series.sorted_by[self._x_axis] and before[2] >= x)):
                stale = True
            column = series.axis(self._x_axis)
            seen[curve.key] = (id(series), size, float(column[-1]) if size else -math.inf)
        return stale
