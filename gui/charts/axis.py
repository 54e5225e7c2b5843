"""A pyqtgraph axis whose labels come from ``gui.charts.ticks``.

``ChartAxis(kind)`` labels a value, step or seconds axis the way ``ticks`` words it;
a step axis never puts a tick between two steps; in log mode (the chart draws
``log10`` of its values) decades are labelled ``0.01``, ``1``, ``1e6``. No SI prefix
scaling: a label is always the number itself.
"""

from __future__ import annotations

import pyqtgraph as pg

from gui.charts import ticks


class ChartAxis(pg.AxisItem):
    """An axis of ``kind`` (``ticks.VALUE``, ``ticks.STEP`` or ``ticks.SECONDS``)."""

    def __init__(self, orientation: str, kind: str = ticks.VALUE, **options) -> None:
        super().__init__(orientation, **options)
        self.kind = kind
        self.enableAutoSIPrefix(False)

    def set_kind(self, kind: str) -> None:
        if kind != self.kind:
            self.kind = kind
            self.picture = None
            self.update()

    def tickSpacing(self, minVal, maxVal, size):  # noqa: N802, N803 - pyqtgraph API
        levels = super().tickSpacing(minVal, maxVal, size)
        if self.kind == ticks.STEP and not self.logMode:
            levels = [(spacing, offset) for spacing, offset in levels if spacing >= 1.0] or [(1.0, 0.0)]
        return levels

    def tickStrings(self, values, scale, spacing):  # noqa: N802 - pyqtgraph API
        if self.logMode:
            return self.logTickStrings(values, scale, spacing)
        return ticks.tick_labels(self.kind, [v * scale for v in values], spacing * scale)

    def logTickStrings(self, values, scale, spacing):  # noqa: N802 - pyqtgraph API
        low, high = self.range if hasattr(self, "range") else (min(values, default=0), max(values, default=0))
        whole_decades = int(high // 1) - int(-(-low // 1)) + 1
        return ticks.log_labels(list(values), label_minor=whole_decades < 2)
