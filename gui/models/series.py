"""Unlimited chart history with a drawing cost bounded by pixels, not by points.

A :class:`Series` keeps every point of one curve (step, time, value) in growable
numpy columns, and a min/max pyramid over the values: level ``l`` holds the
minimum and maximum of each block of ``FACTOR ** l`` consecutive points, kept up to
date as points arrive (appending ``k`` points costs ``O(k)`` plus a few blocks per
level). To draw ``n`` visible points into ``w`` pixels, :meth:`Series.decimate`
picks the coarsest level whose blocks still fit in one pixel column and reduces
at most ``FACTOR * w`` blocks into ``w`` buckets, each drawn as its minimum and
maximum: about 2 points per pixel, and every spike stays visible. The cost per
frame is ``O(FACTOR * w)`` whatever ``n`` is; the memory cost of the pyramid is
``2 / (FACTOR - 1)`` of the values.

Numpy only: view models build series off the GUI thread and tests run without Qt.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

Points = Sequence[float | None] | np.ndarray
"""What ``Series.append`` takes per column: numbers, or None where a point has no value."""

FACTOR = 8
"""Points per block from one pyramid level to the next."""
FEW_POINTS = 8
"""Appends of up to this many points go one by one: numpy's cost per call (~30 us) is more than
theirs. A big run's history arrives so: 13,312 series of two or three older points each."""

STEP = "step"
TIME = "time"
AXES = (STEP, TIME)


class Column:
    """A 1-D float64 array that grows by doubling; :attr:`values` is a view of the filled part."""

    __slots__ = ("_data", "_size")

    def __init__(self, capacity: int = 64) -> None:
        self._data = np.empty(max(1, capacity), dtype=np.float64)
        self._size = 0

    def __len__(self) -> int:
        return self._size

    @property
    def values(self) -> np.ndarray:
        return self._data[: self._size]

    @property
    def last(self) -> float | None:
        return float(self._data[self._size - 1]) if self._size else None

    def extend(self, values: np.ndarray) -> None:
        count = len(values)
        if not count:
            return
        needed = self._size + count
        if needed > len(self._data):
            capacity = max(needed, 2 * len(self._data))
            grown = np.empty(capacity, dtype=np.float64)
            grown[: self._size] = self._data[: self._size]
            self._data = grown
        self._data[self._size : needed] = values
        self._size = needed

    def push(self, value: float) -> None:
        """Append one number (:meth:`extend` without an array: the common live case)."""
        if self._size == len(self._data):
            grown = np.empty(2 * len(self._data), dtype=np.float64)
            grown[: self._size] = self._data
            self._data = grown
        self._data[self._size] = value
        self._size += 1

    def truncate(self, size: int) -> None:
        self._size = min(self._size, max(0, size))


class MinMaxColumn(Column):
    """A :class:`Column` with a min/max pyramid kept current on every :meth:`extend`.

    NaN values are ignored by the reductions (``fmin``/``fmax``); a block of only
    NaN stays NaN, which the chart draws as a gap.
    """

    __slots__ = ("_mins", "_maxs")

    def __init__(self, capacity: int = 64) -> None:
        super().__init__(capacity)
        self._mins: list[Column] = []
        self._maxs: list[Column] = []

    @property
    def levels(self) -> int:
        """Pyramid levels above the raw values (level ``l`` has blocks of ``FACTOR ** l``)."""
        return len(self._mins)

    def level(self, level: int) -> tuple[np.ndarray, np.ndarray]:
        """(mins, maxs) of pyramid ``level``; level 0 is the raw values."""
        if level == 0:
            return self.values, self.values
        return self._mins[level - 1].values, self._maxs[level - 1].values

    def extend(self, values: np.ndarray) -> None:
        old_size = len(self)
        super().extend(values)
        self._update_pyramid(old_size)

    def push(self, value: float) -> None:
        """Append one number and fold it into the block above it on each level: what
        :meth:`extend` does, without numpy calls per level (a live update brings one point
        per series, to thousands of series)."""
        index = self._size
        Column.push(self, value)
        low = high = value
        size_below, level = self._size, 0
        while size_below > FACTOR:
            if level == len(self._mins):
                self._update_pyramid(index)  # a new level covers every block below: build it whole
                return
            mins, maxs = self._mins[level], self._maxs[level]
            block = index // FACTOR
            if block == len(mins):
                mins.push(low)
                maxs.push(high)
            else:
                low = mins._data[block] = _fmin(float(mins._data[block]), low)
                high = maxs._data[block] = _fmax(float(maxs._data[block]), high)
            index, size_below, level = block, len(mins), level + 1

    def _update_pyramid(self, old_size: int) -> None:
        below_min, below_max = self.values, self.values
        old_below, size_below = old_size, len(self)
        level = 0
        while size_below > FACTOR:
            if level == len(self._mins):
                self._mins.append(Column(size_below // FACTOR + 1))
                self._maxs.append(Column(size_below // FACTOR + 1))
            mins, maxs = self._mins[level], self._maxs[level]
            # Blocks made only of unchanged entries below stay; recompute from the first
            # other one (the old tail block may have been partial).
            first_block = min(old_below // FACTOR, len(mins))
            start = first_block * FACTOR
            offsets = np.arange(0, size_below - start, FACTOR)
            mins.truncate(first_block)
            maxs.truncate(first_block)
            mins.extend(np.fmin.reduceat(below_min[start:size_below], offsets))
            maxs.extend(np.fmax.reduceat(below_max[start:size_below], offsets))
            below_min, below_max = mins.values, maxs.values
            old_below, size_below = first_block, len(mins)
            level += 1

    def minmax(self, first: int, stop: int, buckets: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Min and max of ``values[first:stop]`` in about ``buckets`` equal runs of points.

        Returns (start index of each run, minima, maxima). Runs are whole pyramid
        blocks, so the first and last may reach a little outside ``[first, stop)``.
        Touches at most ``FACTOR * buckets + 2`` stored numbers.
        """
        count = stop - first
        per_bucket = max(1.0, count / max(1, buckets))
        level = min(self.levels, math.floor(math.log(per_bucket, FACTOR) + 1e-9))
        block = FACTOR**level
        mins, maxs = self.level(level)
        block_first = first // block
        block_stop = min(len(mins), -(-stop // block))
        group = max(1, math.ceil(per_bucket / block))
        offsets = np.arange(0, block_stop - block_first, group)
        low = np.fmin.reduceat(mins[block_first:block_stop], offsets)
        high = np.fmax.reduceat(maxs[block_first:block_stop], offsets)
        return (block_first + offsets) * block, low, high


class Series:
    """Every point of one curve: step, time and value columns, and a min/max pyramid.

    Steps may be missing (``None`` becomes the previous step, or NaN before any), e.g.
    for GPU samples, which are drawn against time only. ``sorted_by[axis]`` turns
    False if that column ever goes backwards (a restarted job counts steps from 0
    again); ranges are then looked up by scanning rather than by bisection.
    """

    def __init__(self, capacity: int = 64) -> None:
        self.steps = Column(capacity)
        self.times = Column(capacity)
        self.values = MinMaxColumn(capacity)
        self.sorted_by = {STEP: True, TIME: True}
        self._last_finite: dict[str, float | None] = {STEP: None, TIME: None}
        """Each axis's newest number that is not NaN: order is judged across gaps and batches."""

    def __len__(self) -> int:
        return len(self.values)

    def append(self, steps: Points, times: Points, values: Points) -> None:
        """Add points. Arguments are sequences of equal length (numbers or None)."""
        if len(values) <= FEW_POINTS and len(steps) == len(times) == len(values):
            for step, t, value in zip(steps, times, values, strict=True):  # numpy's per-call cost is ~30 us
                self.append_one(step, t, value)
            return
        step_array = np.asarray(steps, dtype=np.float64)
        time_array = np.asarray(times, dtype=np.float64)
        value_array = np.asarray(values, dtype=np.float64)
        if not (len(step_array) == len(time_array) == len(value_array)):
            raise ValueError("steps, times and values must have the same length")
        if not len(value_array):
            return
        if np.isnan(step_array).any():
            step_array = _forward_fill(step_array, self.steps.last)
        for axis, new in ((STEP, step_array), (TIME, time_array)):
            finite = new[~np.isnan(new)]
            if not len(finite):
                continue
            previous = self._last_finite[axis]
            if self.sorted_by[axis] and (
                (previous is not None and finite[0] < previous)
                or (len(finite) > 1 and bool(np.any(np.diff(finite) < 0)))
            ):
                self.sorted_by[axis] = False
            self._last_finite[axis] = float(finite[-1])
        self.steps.extend(step_array)
        self.times.extend(time_array)
        self.values.extend(value_array)

    def append_one(self, step: float | None, t: float | None, value: float | None) -> None:
        """Add one point, as :meth:`append` adds several (same columns, order rules and pyramid)."""
        step_value = math.nan if step is None else float(step)
        if step_value != step_value:  # NaN: the previous step, as _forward_fill does
            previous = self.steps.last
            step_value = math.nan if previous is None else previous
        time_value = math.nan if t is None else float(t)
        for axis, new in ((STEP, step_value), (TIME, time_value)):
            if new == new:  # not NaN
                previous = self._last_finite[axis]
                if previous is not None and new < previous:
                    self.sorted_by[axis] = False
                self._last_finite[axis] = new
        self.steps.push(step_value)
        self.times.push(time_value)
        self.values.push(math.nan if value is None else float(value))

    def axis(self, axis: str) -> np.ndarray:
        return self.steps.values if axis == STEP else self.times.values

    def x_bounds(self, axis: str) -> tuple[float, float] | None:
        x = self.axis(axis)
        if not len(x):
            return None
        if self.sorted_by[axis] and not math.isnan(x[0]):
            return float(x[0]), float(x[-1])
        if np.isnan(x).all():
            return None
        return float(np.nanmin(x)), float(np.nanmax(x))

    def index_range(self, axis: str, x_min: float | None, x_max: float | None) -> tuple[int, int]:
        """Indices ``[first, stop)`` covering ``[x_min, x_max]`` plus one point each side.

        An unsorted axis gives the whole series (still bounded to draw).
        """
        size = len(self)
        x = self.axis(axis)
        if x_min is None or x_max is None or not self.sorted_by[axis] or not size or math.isnan(x[0]):
            return 0, size
        first = int(np.searchsorted(x, x_min, side="left")) - 1
        stop = int(np.searchsorted(x, x_max, side="right")) + 1
        return max(0, first), min(size, stop)

    def nearest_index(self, axis: str, x: float) -> int | None:
        """The index of the point whose ``axis`` coordinate is nearest ``x`` (the hover readout).

        ``O(log n)`` on a sorted axis (a bisection); a scan on an unsorted one.
        ``None`` for an empty series or an axis without numbers.
        """
        column = self.axis(axis)
        size = len(column)
        if not size or math.isnan(x):
            return None
        if self.sorted_by[axis] and not math.isnan(column[0]):
            right = int(np.searchsorted(column, x, side="left"))
            if right >= size:
                return size - 1
            if right == 0:
                return 0
            return right if column[right] - x < x - column[right - 1] else right - 1
        distance = np.abs(column - x)
        if np.isnan(distance).all():
            return None
        return int(np.nanargmin(distance))

    def decimate(self, axis: str, x_min: float | None = None, x_max: float | None = None,
                 pixels: int = 1000, values: MinMaxColumn | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Points to draw the part of the curve inside ``[x_min, x_max]`` on ``pixels`` columns.

        ``values`` replaces the value column (a smoothed copy of the same length).
        Returns ``(x, y)`` with at most about ``2 * pixels`` points: the raw points
        when there are that few, else each pixel column's min and max.
        """
        values = self.values if values is None else values
        x = self.axis(axis)
        first, stop = self.index_range(axis, x_min, x_max)
        stop = min(stop, len(values))
        pixels = max(1, int(pixels))
        if stop - first <= 2 * pixels:
            return x[first:stop].copy(), values.values[first:stop].copy()
        starts, low, high = values.minmax(first, stop, pixels)
        xs = np.repeat(x[np.minimum(starts, len(x) - 1)], 2)
        ys = np.empty(2 * len(low), dtype=np.float64)
        ys[0::2] = low
        ys[1::2] = high
        return xs, ys


    def band_points(self, axis: str, values: MinMaxColumn | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Every stored point as a rank band samples it (``rank_band``): the x and value columns
        (``values``: a smoothed copy of the same length) as read-only views of equal length. The
        band gathers the points around its grid x from them, ``2 * bins`` numbers a rank however
        long the run: decimating a thousand ranks' curves first took 36 us a rank, and moved the
        sampled values inside each pixel's range."""
        column = (self.values if values is None else values).values
        x, y = self.axis(axis), column
        if len(x) != len(y):
            size = min(len(x), len(y))
            x, y = x[:size], y[:size]
        x.flags.writeable = False
        y.flags.writeable = False
        return x, y


def _fmin(a: float, b: float) -> float:
    """``np.fmin`` of two floats: a NaN gives way to a number."""
    return b if a != a else a if b != b or a <= b else b


def _fmax(a: float, b: float) -> float:
    """``np.fmax`` of two floats: a NaN gives way to a number."""
    return b if a != a else a if b != b or a >= b else b


def _forward_fill(values: np.ndarray, previous: float | None) -> np.ndarray:
    """Replace NaN by the last number before it (``previous`` carries over from earlier points)."""
    values = values.copy()
    missing = np.isnan(values)
    if missing[0] and previous is not None:
        values[0] = previous
        missing[0] = math.isnan(previous)
    index = np.where(~missing, np.arange(len(values)), 0)
    np.maximum.accumulate(index, out=index)
    filled = values[index]
    # Leading NaN with nothing before stays NaN.
    return filled
