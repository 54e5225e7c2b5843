"""One live chart: a pyqtgraph plot with a curve per rank (or GPU) drawn from decimated series.

:class:`MetricChart` never hands pyqtgraph more than about two points per pixel
column: on :meth:`MetricChart.refresh` each visible curve asks its
:class:`~gui.charts.decimation.Series` for the min/max of the visible x range at
the plot's width, and only when something changed (new points, another range or
width, another smoothing). Callers refresh on a timer (``ChartGrid`` does, at
15 Hz), never per message. Pens are 1 pixel wide (wider pens are far slower to
rasterise). The legend's entries toggle their curve (a click), and hidden curves
cost nothing.

All curves of a chart are one graphics item (:class:`CurveSetItem`) that draws a
polyline per curve: with 64 ranks, 64 pyqtgraph ``PlotCurveItem`` objects cost
five times more per frame (each asks for bounds, paths and signals of its own).
"""

from __future__ import annotations

import colorsys
import math
from dataclasses import dataclass

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QEvent, QLineF, QRectF, Signal
from PySide6.QtGui import QColor, QPainter, QPalette, QPen, QPolygonF
from PySide6.QtWidgets import QApplication, QVBoxLayout, QWidget

from gui.charts.decimation import STEP, TIME, Series
from gui.charts.legend import LegendBar
from gui.charts.smoothing import SmoothedValues

DEFAULT_PIXELS = 800
"""Width assumed before the plot has been laid out."""

# Tableau 10, readable on light and dark backgrounds alike.
_CATEGORICAL = ("#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f",
                "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac")


def series_color(index: int, count: int, dark: bool = False) -> QColor:
    """A distinct colour for curve ``index`` of ``count``; the same index gets the same colour everywhere."""
    if count <= len(_CATEGORICAL):
        color = QColor(_CATEGORICAL[index % len(_CATEGORICAL)])
        return color.lighter(115) if dark else color
    # Many ranks: golden-ratio hues, two lightness bands so neighbours differ.
    hue = (index * 0.618033988749895) % 1.0
    lightness = (0.62 if dark else 0.45) + (0.08 if index % 2 else 0.0)
    red, green, blue = colorsys.hls_to_rgb(hue, lightness, 0.75)
    return QColor.fromRgbF(red, green, blue)


def palette_is_dark(palette: QPalette | None = None) -> bool:
    palette = palette or QApplication.palette()
    return palette.color(QPalette.ColorRole.Base).lightness() < 128


def _finite_bounds(values: np.ndarray) -> tuple[float, float] | None:
    """(min, max) ignoring NaN and infinities; None when there is no finite value."""
    if not len(values):
        return None
    low, high = float(np.fmin.reduce(values)), float(np.fmax.reduce(values))  # NaN-skipping
    if math.isfinite(low) and math.isfinite(high):
        return low, high
    finite = values[np.isfinite(values)]
    if not len(finite):
        return None
    return float(finite.min()), float(finite.max())


class CurveSetItem(pg.GraphicsObject):
    """Every curve of one chart in one graphics item: a polyline per curve, bounds kept.

    Curves are drawn in descending key order, so rank 0 ends on top. Non-finite
    points break a curve into pieces (a gap), as ``connect="finite"`` does.
    """

    def __init__(self) -> None:
        super().__init__()
        self._pens: dict[int, QPen] = {}
        self._pieces: dict[int, list[QPolygonF]] = {}
        self._data: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self._bounds: dict[int, tuple[tuple[float, float] | None, tuple[float, float] | None]] = {}
        self._hidden: set[int] = set()
        self._padding = (0.0, 0.0)
        self._rect: QRectF | None = None
        self._order: list[int] = []
        self._grid_pen = pg.mkPen((128, 128, 128, 40), width=1)
        self._grid_lines: list = []
        self._grid_rect = QRectF()

    def set_grid_pen(self, pen: QPen) -> None:
        self._grid_pen = pen
        self.update()

    def set_grid(self, x_values, y_values, view: QRectF) -> None:
        """Grid lines at ``x_values`` and ``y_values`` across the visible rectangle ``view``."""
        left, right, top, bottom = view.left(), view.right(), view.top(), view.bottom()
        self._grid_lines = ([QLineF(x, top, x, bottom) for x in x_values]
                            + [QLineF(left, y, right, y) for y in y_values])
        self._grid_rect = QRectF(view)
        self.prepareGeometryChange()
        self._rect = None
        self.update()

    def set_pen(self, key: int, pen: QPen) -> None:
        self._pens[key] = pen
        self._order = sorted(self._pens, reverse=True)
        self.update()

    def pen(self, key: int) -> QPen:
        return self._pens[key]

    def set_points(self, key: int, x: np.ndarray, y: np.ndarray) -> None:
        """The points of curve ``key`` (call :meth:`commit` after the last one of a frame)."""
        self._data[key] = (x, y)
        self._bounds[key] = (_finite_bounds(x), _finite_bounds(y))
        finite = np.isfinite(x) & np.isfinite(y)
        if finite.all():
            self._pieces[key] = [pg.functions.arrayToQPolygonF(x, y)] if len(x) else []
        else:
            pieces = []
            edges = np.flatnonzero(np.diff(np.concatenate(([0], finite.view(np.int8), [0]))))
            for first, stop in zip(edges[0::2], edges[1::2], strict=False):
                if stop - first >= 1:
                    pieces.append(pg.functions.arrayToQPolygonF(x[first:stop], y[first:stop]))
            self._pieces[key] = pieces

    def data(self, key: int) -> tuple[np.ndarray, np.ndarray]:
        return self._data.get(key, (np.empty(0), np.empty(0)))

    def remove_all(self) -> None:
        self.prepareGeometryChange()
        for store in (self._pens, self._pieces, self._data, self._bounds):
            store.clear()
        self._hidden.clear()
        self._order = []
        self._rect = None
        self.update()

    def set_visible(self, key: int, visible: bool) -> None:
        if visible:
            self._hidden.discard(key)
        else:
            self._hidden.add(key)
        self.commit()

    def is_visible(self, key: int) -> bool:
        return key not in self._hidden

    def commit(self, padding: tuple[float, float] | None = None) -> None:
        """Bounds changed: tell the scene, then repaint."""
        if padding is not None:
            self._padding = padding
        self.prepareGeometryChange()
        self._rect = None
        self.update()

    def visible_bounds(self) -> tuple[tuple[float, float] | None, tuple[float, float] | None]:
        x_low = y_low = math.inf
        x_high = y_high = -math.inf
        for key, (x_bounds, y_bounds) in self._bounds.items():
            if key in self._hidden:
                continue
            if x_bounds is not None:
                x_low, x_high = min(x_low, x_bounds[0]), max(x_high, x_bounds[1])
            if y_bounds is not None:
                y_low, y_high = min(y_low, y_bounds[0]), max(y_high, y_bounds[1])
        return ((x_low, x_high) if x_low <= x_high else None, (y_low, y_high) if y_low <= y_high else None)

    def dataBounds(self, ax, frac=1.0, orthoRange=None):  # noqa: N802, N803 - pyqtgraph API
        bounds = self.visible_bounds()[ax]
        return (None, None) if bounds is None else bounds

    def boundingRect(self) -> QRectF:  # noqa: N802 - Qt override
        if self._rect is None:
            x_bounds, y_bounds = self.visible_bounds()
            rect = QRectF(self._grid_rect)
            if x_bounds is not None and y_bounds is not None:
                pad_x, pad_y = self._padding
                rect = rect.united(QRectF(x_bounds[0] - pad_x, y_bounds[0] - pad_y,
                                          x_bounds[1] - x_bounds[0] + 2 * pad_x,
                                          y_bounds[1] - y_bounds[0] + 2 * pad_y))
            self._rect = rect
        return self._rect

    def paint(self, painter: QPainter, *args) -> None:
        painter.setRenderHint(QPainter.RenderHint.Antialiasing, False)
        if self._grid_lines:
            painter.setPen(self._grid_pen)
            painter.drawLines(self._grid_lines)
        for key in self._order:
            if key in self._hidden:
                continue
            painter.setPen(self._pens[key])
            for piece in self._pieces.get(key, ()):
                painter.drawPolyline(piece)


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
    on the time axis when the others switch to steps.

    Signals:
        curve_toggled(int, bool): a legend click showed or hid the curve of a key.
        follow_requested: a double click asked to show all data again (the chart did).
    """

    curve_toggled = Signal(int, bool)
    follow_requested = Signal()

    def __init__(self, title: str, unit: str = "", scale: float = 1.0, time_only: bool = False,
                 parent: QWidget | None = None, legend: bool = True) -> None:
        super().__init__(parent)
        self.title = title
        self.unit = unit
        self.scale = scale
        self.time_only = time_only
        self.smoothing = 0.0
        self._x_axis = TIME if time_only else STEP
        self._t0 = 0.0
        self._curves: dict[int, _Curve] = {}
        self._dark = palette_is_dark(self.palette())
        self.plot_widget = pg.PlotWidget()
        self.plot_item = self.plot_widget.getPlotItem()
        self.plot_item.setMenuEnabled(False)
        self.plot_item.getAxis("left").setWidth(48)
        self.view_box = self.plot_item.getViewBox()
        # Ranges are ours (see _follow): pyqtgraph's auto range asks every curve for its
        # bounds several times a frame, and moves the axes (a costly repaint) every frame.
        self.view_box.disableAutoRange()
        self.plot_item.hideButtons()
        self.follow_x = True
        self.follow_y = True
        self.view_box.sigRangeChangedManually.connect(self._on_zoomed_by_user)
        self.plot_widget.scene().sigMouseClicked.connect(self._on_scene_clicked)
        self.curve_set = CurveSetItem()
        self.plot_item.addItem(self.curve_set)
        # The grid is drawn by the curve item, not by the axes: an axis grid makes every
        # curve update repaint both axes, labels included, which cost more than the curves.
        self.view_box.sigRangeChanged.connect(self._update_grid)
        self.view_box.sigResized.connect(self._update_grid)
        self.legend: LegendBar | None = None
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(0)
        if legend:  # charts in a ChartGrid share the grid's LegendBar instead
            self.legend = LegendBar()
            self.legend.visibility_changed.connect(self._on_legend_toggled)
            layout.addWidget(self.legend)
        layout.addWidget(self.plot_widget)
        self._apply_palette()

    def _apply_palette(self) -> None:
        """Background, axes, title and legend from the widget's palette (light or dark)."""
        palette = self.palette()
        self._dark = palette_is_dark(palette)
        background = palette.color(QPalette.ColorRole.Base)
        foreground = palette.color(QPalette.ColorRole.Text)
        self.plot_widget.setBackground(background)
        grid = QColor(foreground)
        grid.setAlpha(38)
        self.curve_set.set_grid_pen(pg.mkPen(grid, width=1))
        self.plot_item.setTitle(self.title, color=foreground.name(), size="10pt")
        axis_pen = pg.mkPen(foreground.lighter(80) if self._dark else foreground.darker(130))
        for name in ("left", "bottom"):
            axis = self.plot_item.getAxis(name)
            axis.setPen(axis_pen)
            axis.setTextPen(pg.mkPen(foreground))
        self._update_axis_label()

    def changeEvent(self, event) -> None:  # noqa: N802 - Qt override
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

    def set_series(self, key: int, label: str, series: Series, color: QColor | None = None,
                   count: int = 10) -> None:
        """Draw ``series`` as the curve of ``key`` (replacing the one it had)."""
        curve = self._curves.get(key)
        if curve is not None:
            curve.series = series
            curve.smoothed = SmoothedValues(series, self.smoothing) if self.smoothing else None
            curve.drawn = None
            return
        color = QColor(color) if color is not None else series_color(key, count, self._dark)
        curve = _Curve(key, label, series, color)
        if self.smoothing:
            curve.smoothed = SmoothedValues(series, self.smoothing)
        self._curves[key] = curve
        self.curve_set.set_pen(key, pg.mkPen(color, width=1))
        if self.legend is not None:
            self.legend.set_entry(key, label, color)

    def clear(self) -> None:
        self._curves.clear()
        self.curve_set.remove_all()
        if self.legend is not None:
            self.legend.clear()
        self.follow()

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

    # ---- axes and smoothing ------------------------------------------------------------

    @property
    def x_axis(self) -> str:
        return self._x_axis

    def set_x_axis(self, axis: str, t0: float = 0.0) -> None:
        """Plot against ``"step"`` or ``"time"`` (seconds since ``t0``); time-only charts ignore step."""
        axis = TIME if self.time_only else axis
        if axis == self._x_axis and t0 == self._t0:
            return
        self._x_axis, self._t0 = axis, t0
        for curve in self._curves.values():
            curve.drawn = None
        self._update_axis_label()
        self.follow()

    def set_t0(self, t0: float) -> None:
        self.set_x_axis(self._x_axis, t0)

    def set_smoothing(self, weight: float) -> None:
        """EMA weight in [0, 1): 0 draws raw values."""
        if weight == self.smoothing:
            return
        self.smoothing = weight
        for curve in self._curves.values():
            curve.smoothed = SmoothedValues(curve.series, weight) if weight else None
            curve.drawn = None

    def _update_axis_label(self) -> None:
        foreground = self.palette().color(QPalette.ColorRole.Text).name()
        style = {"color": foreground, "font-size": "8pt"}
        if self._x_axis == STEP:
            self.plot_item.setLabel("bottom", "step", **style)
        else:
            self.plot_item.setLabel("bottom", "time since start", units="s", **style)

    def _update_grid(self, *_args) -> None:
        (x_low, x_high), (y_low, y_high) = self.view_box.viewRange()
        width, height = max(1.0, self.view_box.width()), max(1.0, self.view_box.height())
        lines = []
        for axis_name, low, high, size in (("bottom", x_low, x_high, width), ("left", y_low, y_high, height)):
            levels = self.plot_item.getAxis(axis_name).tickValues(low, high, size)
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

    def _on_zoomed_by_user(self, mask) -> None:
        # A wheel zoom or a drag: keep the range the user chose.
        self.stop_following(x=bool(mask[0]), y=bool(mask[1]))

    def _on_scene_clicked(self, event) -> None:
        if event.double():
            self.follow()
            self.follow_requested.emit()

    def _fit(self, force: bool = False) -> None:
        """Set the view to the visible curves' bounds, with hysteresis.

        Growing data extends the x range by a little more than needed, and the y range
        changes only when the data leaves it or shrinks well inside it, so the axes
        (costly to repaint) stay still on most frames, and the eye does too.
        """
        if not (self.follow_x or self.follow_y):
            return
        x_bounds, y_bounds = self.curve_set.visible_bounds()
        x_low, x_high = x_bounds if x_bounds is not None else (math.inf, -math.inf)
        y_low, y_high = y_bounds if y_bounds is not None else (math.inf, -math.inf)
        (view_x_low, view_x_high), (view_y_low, view_y_high) = self.view_box.viewRange()
        x_range = y_range = None
        if self.follow_x and x_low <= x_high:
            span = max(x_high - x_low, 1e-9)
            if (force or x_low < view_x_low or x_low > view_x_low + 0.03 * span or x_high > view_x_high
                    or x_high < view_x_high - 0.2 * span):
                x_range = (x_low - 0.01 * span, x_high + 0.05 * span)
        if self.follow_y and y_low <= y_high:
            span = y_high - y_low
            # A flat series (all data wait 0, say) gets a unit-sized range, not one of 1e-9.
            margin = 0.05 * span if span > 0 else (abs(y_high) * 0.05 or 1.0)
            view_span = view_y_high - view_y_low
            if (force or y_low < view_y_low or y_high > view_y_high
                    or (span + 2 * margin) < 0.6 * view_span):
                low = y_low - margin
                y_range = (max(0.0, low) if y_low >= 0 else low, y_high + margin)  # no negative axis for >= 0 data
        if x_range is not None or y_range is not None:
            self.view_box.setRange(xRange=x_range, yRange=y_range, padding=0, disableAutoRange=False)

    # ---- drawing -----------------------------------------------------------------------

    def pixels(self) -> int:
        width = int(self.view_box.width())
        return width if width > 10 else DEFAULT_PIXELS

    def refresh(self, force: bool = False) -> int:
        """Redraw curves whose data, range, width or smoothing changed; returns points handed over."""
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
        for curve in self._curves.values():
            if not self.curve_set.is_visible(curve.key):
                continue
            state = (len(curve.series), pixels, x_range, self._x_axis, self._t0, self.smoothing)
            if state == curve.drawn and not force:
                continue
            values = curve.smoothed.sync() if curve.smoothed is not None else None
            if x_range is None:
                x, y = curve.series.decimate(self._x_axis, None, None, pixels, values)
            else:
                x, y = curve.series.decimate(self._x_axis, x_range[0], x_range[1], pixels, values)
            if self._x_axis == TIME and self._t0:
                x -= self._t0
            if self.scale != 1.0:
                y *= self.scale
            self.curve_set.set_points(curve.key, x, y)
            curve.drawn = state
            curve.points = len(x)
            drawn_points += len(x)
            changed = True
        if changed:
            self.curve_set.commit(padding)
            self._fit()
        return drawn_points
