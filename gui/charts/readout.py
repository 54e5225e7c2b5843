"""The hover readout's content: which curves to list at the cursor and how to write their values.

Qt-free: the chart (``gui.charts.chart``) finds each visible curve's point nearest
the cursor's x and hands the rows here; with many ranks only the ``limit`` rows
whose values are nearest the cursor's height are listed (the rest are counted),
ordered from the highest value down, as the curves lie on the chart.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

ROW_LIMIT = 10


@dataclass(frozen=True)
class ReadoutRow:
    key: int
    label: str
    x: float
    """The point's x (step, or seconds since the start)."""
    value: float
    """As drawn: scaled, smoothed when smoothing is on."""
    raw: float | None = None
    """The unsmoothed value, when smoothing is on."""


def pick_rows(rows: list[ReadoutRow], cursor_value: float | None, limit: int = ROW_LIMIT,
              log: bool = False) -> tuple[list[ReadoutRow], int]:
    """The rows to list (highest value first) and how many were left out.

    With more than ``limit`` rows, the ones whose value is nearest ``cursor_value``
    (the cursor's height; in log10 units on a log axis) are kept.
    """
    finite = [row for row in rows if math.isfinite(row.value)]
    missing = [row for row in rows if not math.isfinite(row.value)]
    if len(rows) > limit and cursor_value is not None and math.isfinite(cursor_value):
        def distance(row: ReadoutRow) -> float:
            value = row.value
            if log:
                value = math.log10(value) if value > 0 else -math.inf
            return abs(value - cursor_value)

        finite = sorted(finite, key=distance)[:limit]
        missing = []
    kept = sorted(finite, key=lambda row: -row.value) + missing
    kept = kept[:limit]
    return kept, len(rows) - len(kept)


def format_value(value: float | None) -> str:
    """Four significant digits; a short scientific form for very small or large numbers; ``–``
    for a value that was not measured (NaN)."""
    if value is None or not math.isfinite(value):
        return "–"
    magnitude = abs(value)
    if magnitude != 0 and (magnitude < 1e-3 or magnitude >= 1e6):
        mantissa, _, exponent = f"{value:.3e}".partition("e")
        return f"{mantissa}e{int(exponent)}"
    if magnitude >= 1000:
        return f"{value:,.0f}"
    return f"{value:.4g}" if magnitude >= 1 else f"{value:.4f}".rstrip("0").rstrip(".") or "0"


def format_position(x: float, by_time: bool) -> str:
    """``step 1,234`` or ``1:05 since start``."""
    if not math.isfinite(x):
        return ""
    if not by_time:
        return f"step {int(round(x)):,}"
    seconds = int(round(x))
    hours, rest = divmod(abs(seconds), 3600)
    minutes, secs = divmod(rest, 60)
    clock = f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"
    return f"{'-' if seconds < 0 else ''}{clock} since start"
