"""The median rank and the p10-p90 band across ranks: one curve and a shaded band for any rank count.

A thousand curves are a solid block of colour; what a person reads at that scale is the
typical rank and the spread, with the ranks that stand out drawn on top (TraceML compares the
median rank with the worst). Each rank's curve is sampled on one grid of ``bins`` x values over
the range the ranks share (linear interpolation between its points; outside its own range a
rank does not count), then the 10th, 50th and 90th percentiles are taken across ranks at each
grid point, ignoring ranks without a value there.

Sampling is columnar: ranks logging the same steps (the usual case) share one search for the
points around each grid x, so a rank costs two gathers of ``2 * bins`` numbers, whatever its
length; a rank whose points do not bracket the grid like that (other steps, times, gaps) is
interpolated on its own. Either way the value is the rank's own stored points interpolated, never
a decimated copy of them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
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
    """How many ranks the band was made of (those with a value somewhere on its grid)."""


def rank_band(curves: Sequence[tuple[np.ndarray, np.ndarray]], bins: int, x_min: float | None = None,
              x_max: float | None = None) -> RankBand | None:
    """The band of ``curves`` (each a rank's stored (x, y), x ascending, of equal lengths) on ``bins``
    grid points across their x range, cut to ``[x_min, x_max]`` (a zoomed view); None when no rank
    has two finite points there."""
    usable = [curve for x, y in curves if len(x) >= 2 and len(x) == len(y)
              if (curve := _finite_ends(x, y)) is not None]
    if not usable or bins < 2:
        return None
    firsts = np.array([float(x[0]) for x, _y in usable])
    lasts = np.array([float(x[-1]) for x, _y in usable])
    low, high = float(firsts.min()), float(lasts.max())
    if x_min is not None:
        low = max(low, x_min)
    if x_max is not None:
        high = min(high, x_max)
    if not high > low:
        return None
    grid = np.linspace(low, high, bins)
    sampled = sample_on_grid(usable, firsts, lasts, grid)
    finite = np.isfinite(sampled)
    counted = finite.any(axis=0)
    ranks = int(finite.any(axis=1).sum())
    grid, sampled = grid[counted], sampled[:, counted]
    if not len(grid):
        return None
    p10, p50, p90 = percentiles_across(sampled, PERCENTILES)
    return RankBand(grid, p10, p50, p90, ranks)


def _finite_ends(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """(x, y) as they are when x starts and ends with a number (a step column is NaN only before
    its first step); else the finite points only; None when fewer than two are left."""
    if math.isfinite(x[0]) and math.isfinite(x[-1]):
        return x, y
    finite = np.isfinite(x) & np.isfinite(y)
    return (x[finite], y[finite]) if finite.sum() >= 2 else None


def sample_on_grid(curves: list[tuple[np.ndarray, np.ndarray]], firsts: np.ndarray, lasts: np.ndarray,
                   grid: np.ndarray) -> np.ndarray:
    """Each rank's curve at each ``grid`` x (a row per rank): its points linearly interpolated, NaN
    outside ``[firsts[rank], lasts[rank]]`` (its own range).

    The points around each grid x are looked up once, in the longest rank's x, and gathered from
    every rank at those indices; where a rank's gathered x do not enclose the grid x (it logs
    other steps) or a gathered value is not finite (a gap: its finite neighbours are joined
    across it), that rank is interpolated on its own (``np.interp``), as before.
    """
    reference = max((x for x, _y in curves), key=len)
    above = np.clip(reference.searchsorted(grid, side="right"), 1, len(reference) - 1)
    around = np.concatenate((above - 1, above))
    count, bins = len(curves), len(grid)
    xs = np.empty((count, 2 * bins))
    ys = np.empty((count, 2 * bins))
    for row, (x, y) in enumerate(curves):
        x.take(around, out=xs[row], mode="clip")
        y.take(around, out=ys[row], mode="clip")
    x_before, x_after, y_before, y_after = xs[:, :bins], xs[:, bins:], ys[:, :bins], ys[:, bins:]
    with np.errstate(invalid="ignore", divide="ignore"):
        fraction = (grid - x_before) / (x_after - x_before)
        sampled = y_before + (y_after - y_before) * fraction
        enclosed = (fraction >= 0.0) & (fraction <= 1.0) & np.isfinite(sampled)
    inside = (grid >= firsts[:, None]) & (grid <= lasts[:, None])
    sampled[~inside] = np.nan
    for row in np.flatnonzero((inside > enclosed).any(axis=1)).tolist():  # inside its range, not enclosed
        x, y = curves[row]
        sampled[row] = interpolate_within(x, y, grid)
    return sampled


def interpolate_within(x: np.ndarray, y: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """One rank's curve at each ``grid`` x: its finite points linearly interpolated, NaN outside
    their range."""
    if not (np.isfinite(x).all() and np.isfinite(y).all()):
        finite = np.isfinite(x) & np.isfinite(y)
        x, y = x[finite], y[finite]
    if len(x) < 2:
        return np.full(len(grid), np.nan)
    return np.interp(grid, x, y, left=np.nan, right=np.nan)


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
