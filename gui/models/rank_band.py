"""The median rank and the p10-p90 band across ranks: one curve and a shaded band for any rank count.

A thousand curves are a solid block of colour; what a person reads at that scale is the
typical rank and the spread, with the ranks that stand out drawn on top (TraceML compares the
median rank with the worst). Each rank's curve is sampled on one grid of ``bins`` x values over
the range the ranks share (linear interpolation between its points; outside its own range a
rank does not count), then the 10th, 50th and 90th percentiles are taken across ranks at each
grid point, ignoring ranks without a value there.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

BAND_ABOVE_RANKS = 16
"""Above this many ranks a per-rank chart shows the median and band (fewer: every curve)."""
PERCENTILES = (10.0, 50.0, 90.0)


@dataclass(frozen=True)
class RankBand:
    x: np.ndarray
    low: np.ndarray
    """The 10th percentile across ranks at each ``x``."""
    median: np.ndarray
    high: np.ndarray
    """The 90th percentile."""
    ranks: int
    """How many ranks the band was made of."""


def rank_band(curves: list[tuple[np.ndarray, np.ndarray]], bins: int) -> RankBand | None:
    """The band of ``curves`` (each a rank's (x, y), x ascending), on ``bins`` grid points;
    None when no rank has two finite points."""
    usable = []
    for x, y in curves:
        if len(x) < 2:
            continue
        if not (np.isfinite(y).all() and np.isfinite(x).all()):
            finite = np.isfinite(x) & np.isfinite(y)
            x, y = x[finite], y[finite]
            if len(x) < 2:
                continue
        usable.append((x, y))
    if not usable or bins < 2:
        return None
    low = min(float(x[0]) for x, _y in usable)
    high = max(float(x[-1]) for x, _y in usable)
    if not high > low:
        return None
    grid = np.linspace(low, high, bins)
    sampled = np.full((len(usable), bins), np.nan)
    for row, (x, y) in enumerate(usable):
        first = int(np.searchsorted(grid, x[0], side="left"))  # the grid inside this rank's own range
        last = int(np.searchsorted(grid, x[-1], side="right"))
        sampled[row, first:last] = np.interp(grid[first:last], x, y)
    counted = np.isfinite(sampled).any(axis=0)
    grid, sampled = grid[counted], sampled[:, counted]
    if not len(grid):
        return None
    p10, p50, p90 = percentiles_across(sampled, PERCENTILES)
    return RankBand(grid, p10, p50, p90, len(usable))


def percentiles_across(values: np.ndarray, percentiles: tuple[float, ...]) -> list[np.ndarray]:
    """Each percentile of every column of ``values``, NaN left out (as ``np.nanpercentile``, linear
    between order statistics), from one sort: four times faster at 1,024 ranks."""
    ordered = np.sort(values, axis=0)  # NaN sorts last
    counts = np.isfinite(values).sum(axis=0)
    columns = np.arange(values.shape[1])
    result = []
    for percentile in percentiles:
        position = (counts - 1) * (percentile / 100.0)
        below = np.floor(position).astype(int)
        above = np.minimum(below + 1, counts - 1)
        fraction = position - below
        result.append(ordered[below, columns] + (ordered[above, columns] - ordered[below, columns]) * fraction)
    return result
