"""Every curve of one chart in one graphics item (:class:`CurveSetItem`).

With 64 ranks, 64 pyqtgraph ``PlotCurveItem`` objects cost five times more per frame
than one item that draws a polyline per curve: each asks for bounds, paths and
signals of its own. Pens are 1 pixel wide (wider pens are far slower to rasterise).
A curve may carry a *faint* companion drawn underneath in the same colour: the raw
values behind a smoothed curve, as TensorBoard keeps them.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QLineF, QPointF, QRectF, Qt
from PySide6.QtGui import QBrush, QColor, QPainter, QPen, QPolygonF

FAINT_ALPHA = 60
"""Opacity (of 255) of the raw curve behind a smoothed one."""
DOT_WIDTH = 5
"""Pixels across a point that has no neighbour to draw a line to (a run at its first step)."""


def finite_bounds(values: np.ndarray) -> tuple[float, float] | None:
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


def _union(first: tuple[float, float] | None, second: tuple[float, float] | None) -> tuple[float, float] | None:
    if first is None or second is None:
        return first or second
    return min(first[0], second[0]), max(first[1], second[1])


def polyline_pieces(x: np.ndarray, y: np.ndarray) -> tuple[list[QPolygonF], list[QPointF]]:
    """The finite runs of (x, y) as polylines (a non-finite point is a gap), and the points
    that stand alone (a polyline of one point draws nothing: they are drawn as dots)."""
    finite = np.isfinite(x) & np.isfinite(y)
    if finite.all():
        if len(x) == 1:
            return [], [QPointF(float(x[0]), float(y[0]))]
        return ([pg.functions.arrayToQPolygonF(x, y)] if len(x) else []), []
    pieces, dots = [], []
    edges = np.flatnonzero(np.diff(np.concatenate(([0], finite.view(np.int8), [0]))))
    for first, stop in zip(edges[0::2], edges[1::2], strict=False):
        if stop - first == 1:
            dots.append(QPointF(float(x[first]), float(y[first])))
        elif stop - first > 1:
            pieces.append(pg.functions.arrayToQPolygonF(x[first:stop], y[first:stop]))
    return pieces, dots


class CurveSetItem(pg.GraphicsObject):
    """Every curve of one chart in one graphics item: a polyline per curve, bounds kept.

    Curves are drawn in descending key order, so rank 0 ends on top; faint companions
    first, under every curve. Non-finite points break a curve into pieces (a gap), as
    ``connect="finite"`` does. Bounds include the faint raw curves: a spike the smoothing
    flattens is still data, and the y range shows it rather than clipping it.
    """

    def __init__(self) -> None:
        super().__init__()
        self._pens: dict[int, QPen] = {}
        self._faint_pens: dict[int, QPen] = {}
        self._pieces: dict[int, list[QPolygonF]] = {}
        self._faint_pieces: dict[int, list[QPolygonF]] = {}
        self._dots: dict[int, list[QPointF]] = {}
        self._dot_pens: dict[int, QPen] = {}
        self._data: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self._bounds: dict[int, tuple[tuple[float, float] | None, tuple[float, float] | None]] = {}
        self._hidden: set[int] = set()
        self._padding = (0.0, 0.0)
        self._rect: QRectF | None = None
        self._order: list[int] = []
        self._grid_pen = pg.mkPen((128, 128, 128, 40), width=1)
        self._grid_lines: list = []
        self._grid_rect = QRectF()
        self._marker: float | None = None
        self._marker_pen = pg.mkPen((128, 128, 128, 110), width=1)
        self._band: QPolygonF | None = None
        """The p10-p90 band across ranks (``gui.models.rank_band``), filled under every curve."""
        self._band_median: list[QPolygonF] = []
        self._band_bounds: tuple[tuple[float, float] | None, tuple[float, float] | None] = (None, None)
        self._band_brush = QBrush(QColor(128, 128, 128, 60))
        self._median_pen = pg.mkPen((90, 90, 90), width=2)

    def set_grid_pen(self, pen: QPen, marker_pen: QPen | None = None) -> None:
        self._grid_pen = pen
        if marker_pen is not None:
            self._marker_pen = marker_pen
        self.update()

    def set_marker(self, x: float | None) -> None:
        """A vertical line at ``x`` (the hover readout's step), drawn with the grid: a line item of
        its own would repaint the curves under it a second time each frame."""
        if x != self._marker:
            self._marker = x
            self.update()

    def marker(self) -> float | None:
        return self._marker

    def set_grid(self, x_values: Iterable[float], y_values: Iterable[float], view: QRectF) -> None:
        """Grid lines at ``x_values`` and ``y_values`` across the visible rectangle ``view``."""
        left, right, top, bottom = view.left(), view.right(), view.top(), view.bottom()
        self._grid_lines = ([QLineF(x, top, x, bottom) for x in x_values]
                            + [QLineF(left, y, right, y) for y in y_values])
        self._grid_rect = QRectF(view)
        self.prepareGeometryChange()
        self._rect = None
        self.update()

    def set_band_colors(self, brush: QBrush, median_pen: QPen) -> None:
        self._band_brush = brush
        self._median_pen = median_pen
        self.update()

    def set_band(self, x: np.ndarray | None, low: np.ndarray | None = None, median: np.ndarray | None = None,
                 high: np.ndarray | None = None) -> None:
        """The band between ``low`` and ``high`` and the ``median`` curve over ``x``; None: no band
        (call :meth:`commit` after)."""
        if x is None or low is None or median is None or high is None or not len(x):
            self._band, self._band_median, self._band_bounds = None, [], (None, None)
            return
        outline = np.concatenate((x, x[::-1])), np.concatenate((low, high[::-1]))
        finite = np.isfinite(outline[1])
        self._band = pg.functions.arrayToQPolygonF(outline[0][finite], outline[1][finite])
        self._band_median = polyline_pieces(x, median)[0]
        self._band_bounds = (finite_bounds(x), _union(finite_bounds(low), finite_bounds(high)))

    def band_color(self) -> QColor:
        return self._median_pen.color()

    def has_band(self) -> bool:
        return self._band is not None

    def set_pen(self, key: int, pen: QPen) -> None:
        self._pens[key] = pen
        faint = QColor(pen.color())
        faint.setAlpha(FAINT_ALPHA)
        self._faint_pens[key] = pg.mkPen(faint, width=1)
        dot = QPen(pen.color(), DOT_WIDTH)
        dot.setCosmetic(True)
        dot.setCapStyle(Qt.PenCapStyle.RoundCap)
        self._dot_pens[key] = dot
        self._order = sorted(self._pens, reverse=True)
        self.update()

    def pen(self, key: int) -> QPen:
        return self._pens[key]

    def set_points(self, key: int, x: np.ndarray, y: np.ndarray,
                   faint: tuple[np.ndarray, np.ndarray] | None = None) -> None:
        """The points of curve ``key`` and of its faint companion, if any (call :meth:`commit`
        after the last curve of a frame)."""
        self._data[key] = (x, y)
        x_bounds, y_bounds = finite_bounds(x), finite_bounds(y)
        self._pieces[key], self._dots[key] = polyline_pieces(x, y)
        if faint is None:
            self._faint_pieces.pop(key, None)
        else:
            self._faint_pieces[key] = polyline_pieces(*faint)[0]
            x_bounds, y_bounds = _union(x_bounds, finite_bounds(faint[0])), _union(y_bounds, finite_bounds(faint[1]))
        self._bounds[key] = (x_bounds, y_bounds)

    def has_faint(self, key: int) -> bool:
        return bool(self._faint_pieces.get(key))

    def data(self, key: int) -> tuple[np.ndarray, np.ndarray]:
        return self._data.get(key, (np.empty(0), np.empty(0)))

    def remove_all(self) -> None:
        self.prepareGeometryChange()
        for store in (self._pens, self._faint_pens, self._dot_pens, self._pieces, self._faint_pieces, self._dots,
                      self._data, self._bounds):
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

    def has_data(self) -> bool:
        """Some curve, shown or hidden, has a finite point."""
        return (any(y_bounds is not None for _x, y_bounds in self._bounds.values())
                or self._band_bounds[1] is not None)

    def visible_bounds(self) -> tuple[tuple[float, float] | None, tuple[float, float] | None]:
        x_low = y_low = math.inf
        x_high = y_high = -math.inf
        shown = [bounds for key, bounds in self._bounds.items() if key not in self._hidden]
        for x_bounds, y_bounds in [*shown, self._band_bounds]:
            if x_bounds is not None:
                x_low, x_high = min(x_low, x_bounds[0]), max(x_high, x_bounds[1])
            if y_bounds is not None:
                y_low, y_high = min(y_low, y_bounds[0]), max(y_high, y_bounds[1])
        return ((x_low, x_high) if x_low <= x_high else None, (y_low, y_high) if y_low <= y_high else None)

    def dataBounds(self, ax: int, frac: float = 1.0, orthoRange: tuple[float, float] | None = None,  # noqa: N802, N803 - pyqtgraph API
                   ) -> tuple[float, float] | tuple[None, None]:
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

    def paint(self, painter: QPainter, *args: object) -> None:
        painter.setRenderHint(QPainter.RenderHint.Antialiasing, False)
        if self._grid_lines:
            painter.setPen(self._grid_pen)
            painter.drawLines(self._grid_lines)
        if self._marker is not None and not self._grid_rect.isEmpty():
            painter.setPen(self._marker_pen)
            painter.drawLine(QLineF(self._marker, self._grid_rect.top(), self._marker, self._grid_rect.bottom()))
        if self._band is not None:
            painter.setPen(Qt.PenStyle.NoPen)
            painter.setBrush(self._band_brush)
            painter.drawPolygon(self._band)
            painter.setBrush(Qt.BrushStyle.NoBrush)
        for key in self._order:
            if key in self._hidden or key not in self._faint_pieces:
                continue
            painter.setPen(self._faint_pens[key])
            for piece in self._faint_pieces[key]:
                painter.drawPolyline(piece)
        if self._band_median:
            painter.setPen(self._median_pen)
            for piece in self._band_median:
                painter.drawPolyline(piece)
        for key in self._order:
            if key in self._hidden:
                continue
            painter.setPen(self._pens[key])
            for piece in self._pieces.get(key, ()):
                painter.drawPolyline(piece)
            dots = self._dots.get(key)
            if dots:
                painter.setPen(self._dot_pens[key])
                painter.drawPoints(dots)
