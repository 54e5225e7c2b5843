"""Exponential moving average, the smoothing TensorBoard users know.

``smoothed[i] = weight * smoothed[i - 1] + (1 - weight) * value[i]``, starting from
the first value (no bias toward zero). NaN values hold the previous smoothed
value, so one bad step does not blank the rest of the curve.

:func:`ema` is vectorised in blocks with the closed form of the recurrence, so a
million points smooth in milliseconds; :class:`SmoothedValues` keeps a smoothed copy
of a series current as points arrive, paying only for the new points.
Numpy only.
"""

from __future__ import annotations

import math

import numpy as np

from gui.models.series import MinMaxColumn, Series

MAX_WEIGHT = 0.999
_MAX_BLOCK = 4096
_MAX_GROWTH_LOG10 = 100.0
"""Keep ``weight ** -block`` below 1e100 so the closed form neither overflows nor loses precision."""


def ema(values: np.ndarray, weight: float, start: float | None = None) -> np.ndarray:
    """Smoothed copy of ``values``; ``start`` is the smoothed value just before them.

    Raises:
        ValueError: ``weight`` outside [0, 1).
    """
    if not 0.0 <= weight < 1.0:
        raise ValueError(f"smoothing weight must be in [0, 1), not {weight}")
    values = np.asarray(values, dtype=np.float64)
    if start is not None and math.isnan(start):
        start = None
    finite = ~np.isnan(values)
    if finite.all():
        return _ema_finite(values, weight, start)
    result = np.full(len(values), np.nan)
    result[finite] = _ema_finite(values[finite], weight, start)
    return _hold(result, start)


def _ema_finite(values: np.ndarray, weight: float, start: float | None) -> np.ndarray:
    if not len(values) or weight == 0.0:
        return values.copy()
    previous = float(values[0]) if start is None else start
    result = np.empty_like(values)
    block = int(max(1, min(_MAX_BLOCK, _MAX_GROWTH_LOG10 / -math.log10(weight))))
    # Within a block of length L after a smoothed value s:
    #   out[j] = w^(j+1) s + (1 - w) w^j * sum_{i<=j} w^-i v[i]
    powers = weight ** np.arange(block + 1, dtype=np.float64)
    inverse = 1.0 / powers[:block]
    for begin in range(0, len(values), block):
        chunk = values[begin : begin + block]
        size = len(chunk)
        sums = np.cumsum(chunk * inverse[:size])
        out = powers[1 : size + 1] * previous + (1.0 - weight) * powers[:size] * sums
        result[begin : begin + size] = out
        previous = float(out[-1])
    return result


def _hold(values: np.ndarray, start: float | None) -> np.ndarray:
    """Replace NaN by the last number before it (or ``start``); leading NaN without ``start`` stay."""
    missing = np.isnan(values)
    if not missing.any():
        return values
    if missing[0] and start is not None:
        values[0] = start
        missing[0] = False
    index = np.where(~missing, np.arange(len(values)), 0)
    np.maximum.accumulate(index, out=index)
    return values[index]


class SmoothedValues:
    """A smoothed copy of ``series.values`` with its own min/max pyramid, kept current.

    Call :meth:`sync` before drawing: it smooths only the points added since the
    last call (a new ``weight`` recomputes everything once).
    """

    def __init__(self, series: Series, weight: float) -> None:
        self.series = series
        self.weight = weight
        self.column = MinMaxColumn(max(64, len(series)))

    def set_weight(self, weight: float) -> None:
        if weight != self.weight:
            self.weight = weight
            self.column = MinMaxColumn(max(64, len(self.series)))

    def sync(self) -> MinMaxColumn:
        done, size = len(self.column), len(self.series)
        if size > done:
            raw = self.series.values.values[done:size]
            start = self.column.last if done else None
            self.column.extend(ema(raw, self.weight, start))
        return self.column
