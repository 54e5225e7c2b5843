"""A pyqtgraph axis whose labels come from ``gui.charts.ticks``.

``ChartAxis(kind)`` labels a value, step or seconds axis the way ``ticks`` words it;
a step axis never puts a tick between two steps; in log mode (the chart draws
``log10`` of its values) decades are labelled ``0.01``, ``1``, ``1e6``. No SI prefix
scaling: a label is always the number itself.
"""

from __future__ import annotations

import math
from typing import Any

import pyqtgraph as pg
from PySide6.QtGui import QFontMetricsF
from PySide6.QtWidgets import QApplication

from gui.charts import ticks

NICE_SECONDS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400)
"""Tick spacings a clock reads well: 15 s, 1 min, 5 min, 1 h (not 50 s, 100 s)."""


class ChartAxis(pg.AxisItem):
    """An axis of ``kind`` (``ticks.VALUE``, ``ticks.STEP`` or ``ticks.SECONDS``)."""

    def __init__(self, orientation: str, kind: str = ticks.VALUE, **options: Any) -> None:
        super().__init__(orientation, **options)
        self.kind = kind
        self.enableAutoSIPrefix(False)
        # Labels on major ticks only: pyqtgraph labels each tick level with its own decimals,
        # which reads "2.5 2 1.5 1" on one axis.
        self.setStyle(maxTextLevel=0)

    def set_kind(self, kind: str) -> None:
        if kind != self.kind:
            self.kind = kind
            self.picture = None
            self.update()

    def tickSpacing(self, minVal: float, maxVal: float, size: float,  # noqa: N802, N803 - pyqtgraph API
                    ) -> list[tuple[float, float]]:
        if self.kind == ticks.SECONDS and not self.logMode:
            levels = seconds_spacing(abs(maxVal - minVal), size, self._tickDensity)
            if levels:
                return levels
        levels = super().tickSpacing(minVal, maxVal, size)
        if self.kind == ticks.STEP and not self.logMode:
            levels = [(spacing, offset) for spacing, offset in levels if spacing >= 1.0] or [(1.0, 0.0)]
        return levels

    def tickStrings(self, values: list[float], scale: float, spacing: float) -> list[str]:  # noqa: N802 - pyqtgraph API
        if self.logMode:
            return self.logTickStrings(values, scale, spacing)
        return ticks.tick_labels(self.kind, [v * scale for v in values], spacing * scale)

    def logTickStrings(self, values: list[float], scale: float, spacing: float) -> list[str]:  # noqa: N802 - pyqtgraph API
        low, high = self.range if hasattr(self, "range") else (min(values, default=0), max(values, default=0))
        length = self.height() if self.orientation in ("left", "right") else self.width()
        if self.orientation not in ("left", "right"):
            return ticks.log_labels(list(values), label_minor=int(high // 1) - int(-(-low // 1)) + 1 < 2)
        per_decade = length / max(high - low, 1e-9)
        return ticks.fitting_log_labels(list(values), per_decade, self._label_metrics().height())

    def _label_metrics(self) -> QFontMetricsF:
        font = self.style.get("tickFont")
        return QFontMetricsF(font if font is not None else QApplication.font())

    def labels_width(self) -> float:
        """Pixels the widest label of the current range takes (0 without labels): a chart gives its
        axis that room, and charts side by side give theirs the same, so their plots line up."""
        low, high = self.range
        length = self.height() if self.orientation in ("left", "right") else self.width()
        key = (low, high, length, self.kind, self.logMode)
        if key == self._width_key:
            return self._width
        levels = self.tickValues(low, high, max(length, 1.0))
        strings = self.tickStrings(levels[0][1], 1.0, levels[0][0]) if levels else []
        metrics = self._label_metrics()
        self._width_key = key
        self._width = max((metrics.horizontalAdvance(text) for text in strings if text), default=0.0)
        return self._width

    _width_key: tuple | None = None
    _width = 0.0


def seconds_spacing(span: float, size: float, density: float = 1.0) -> list[tuple[float, float]]:
    """Major and minor tick spacing for a time axis in whole clock units; empty below 2 s a tick
    (the decimal spacing serves fractions of a second)."""
    if span <= 0:
        return []
    intervals = max(2.25, 2.25 * density * math.sqrt(max(size, 1.0) / 300.0))
    widest = span / intervals
    if widest < NICE_SECONDS[1]:
        return []
    major = max(nice for nice in NICE_SECONDS if nice <= widest)
    minor = [nice for nice in NICE_SECONDS if nice < major and major % nice == 0 and span / nice <= size / 8]
    return [(float(major), 0.0)] + ([(float(max(minor)), 0.0)] if minor else [])
