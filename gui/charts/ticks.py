"""Tick labels and axis ranges that stay readable on degenerate data (Qt-free).

pyqtgraph's own labels print ``places = ceil(-log10(spacing))`` decimals, so a
range of 1e-10 around one step reads "1.00000000000 1.00000000001", a loss around
1e-9 collapses into one "%g" label, and seconds since the start read
"3.00110101700". Here every label gets just the digits that tell neighbouring ticks
apart, small and large numbers switch to a short scientific form ("2.5e-9"), steps
read as integers ("12k" past ten thousand) and times as durations ("1:05").

:func:`padded_range` keeps a chart from zooming into floating-point noise: a single
step, a flat series or a flat zero gets a range of sensible size around it.

Numbers only (no Qt, no numpy): the chart axis (``gui.charts.axis``) calls these,
and tests check them directly.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence

VALUE = "value"
STEP = "step"
SECONDS = "seconds"
KINDS = (VALUE, STEP, SECONDS)

SCIENTIFIC_BELOW = 1e-3
SCIENTIFIC_FROM = 1e5
MAX_DIGITS = 12
MIN_STEP_SPAN = 2.0
"""A step axis shows at least this many steps (a run at its first step shows 0..2)."""
MIN_SECONDS_SPAN = 2.0
MIN_RELATIVE_SPAN = 1e-6
"""A value axis spans at least this fraction of the values' magnitude (no 1e-15 ranges)."""


def decimals_for(spacing: float) -> int:
    """Decimals that write multiples of ``spacing`` exactly (0.25 -> 2, 5 -> 0, 1e-4 -> 4)."""
    if not math.isfinite(spacing) or spacing <= 0:
        return 0
    for places in range(0, MAX_DIGITS + 1):
        scaled = spacing * 10**places
        if abs(scaled - round(scaled)) <= 1e-6 * max(1.0, scaled):
            return places
    return MAX_DIGITS


def _trim_exponent(text: str) -> str:
    """``2.5e-09`` -> ``2.5e-9``, ``1e+06`` -> ``1e6``."""
    mantissa, _, exponent = text.partition("e")
    if not exponent:
        return text
    sign = "-" if exponent.startswith("-") else ""
    return f"{mantissa}e{sign}{exponent.lstrip('+-').lstrip('0') or '0'}"


def _clean(text: str) -> str:
    """No ``-0`` (a tick at zero reached from below)."""
    stripped = text.lstrip("-")
    if stripped.replace("0", "").replace(".", "") in ("", "e", "s") and text.startswith("-"):
        return stripped
    return text


def value_labels(values: Sequence[float], spacing: float) -> list[str]:
    """Labels for ticks at ``values`` (multiples of ``spacing``) on a value axis.

    Fixed decimals while the numbers are of everyday size; below ``SCIENTIFIC_BELOW`` and
    from ``SCIENTIFIC_FROM`` on, a short scientific form with one exponent for the whole
    axis (``0.95e-9 1.00e-9``); as many digits as the spacing needs, and more until
    neighbouring labels differ.
    """
    if not values:
        return []
    magnitude = max(abs(v) for v in values)
    spacing = abs(spacing) if spacing and math.isfinite(spacing) else magnitude or 1.0
    places = decimals_for(spacing)
    scientific = magnitude >= SCIENTIFIC_FROM or (0 < magnitude < SCIENTIFIC_BELOW) or places > 6
    if scientific:
        exponent = math.floor(math.log10(magnitude)) if magnitude > 0 else 0
        digits = max(0, exponent - math.floor(math.log10(spacing)))
        scale = 10.0**exponent
        labels = _distinct(values, lambda v, d: "0" if v == 0 else _clean(f"{v / scale:.{d}f}e{exponent}"),
                           min(digits, MAX_DIGITS))
    else:
        labels = _distinct(values, lambda v, d: _clean(f"{v:.{d}f}"), places)
    return labels


def _distinct(values: Sequence[float], write: Callable[[float, int], str], digits: int) -> list[str]:
    """Write ``values`` with ``digits``, adding digits while two different values read alike."""
    while True:
        labels = [write(v, digits) for v in values]
        if len(set(labels)) == len(set(values)) or digits >= MAX_DIGITS:
            return labels
        digits += 1


def step_labels(values: Sequence[float], spacing: float) -> list[str]:
    """Integer steps; ``12k``/``1.5M`` past ten thousand (as many decimals as the spacing needs)."""
    labels = []
    for value in values:
        if abs(value - round(value)) > 1e-6:
            labels.append("")  # a fractional step does not exist
            continue
        step = int(round(value))
        if abs(step) < 10_000:
            labels.append(str(step))
            continue
        unit, divisor = ("M", 1e6) if abs(step) >= 1_000_000 else ("k", 1e3)
        places = decimals_for(max(spacing, 1.0) / divisor)
        labels.append(f"{step / divisor:.{min(places, 3)}f}{unit}")
    return labels


def seconds_labels(values: Sequence[float], spacing: float) -> list[str]:
    """Time since the start: ``5 s``/``2.5 s`` under a minute, else ``1:05``, ``1:02:03``."""
    if not values:
        return []
    if max(abs(v) for v in values) < 60 or spacing < 1:
        places = decimals_for(spacing)
        return [_clean(f"{v:.{min(places, 3)}f} s") for v in values]
    labels = []
    for value in values:
        sign = "-" if value < 0 else ""
        seconds = int(round(abs(value)))
        hours, rest = divmod(seconds, 3600)
        minutes, secs = divmod(rest, 60)
        labels.append(f"{sign}{hours}:{minutes:02d}:{secs:02d}" if hours else f"{sign}{minutes}:{secs:02d}")
    return labels


def tick_labels(kind: str, values: Sequence[float], spacing: float) -> list[str]:
    """Labels for one level of ticks on an axis of ``kind`` (``value``, ``step`` or ``seconds``)."""
    if kind == STEP:
        return step_labels(values, spacing)
    if kind == SECONDS:
        return seconds_labels(values, spacing)
    return value_labels(values, spacing)


def log_labels(exponents: Sequence[float], label_minor: bool) -> list[str]:
    """Labels for ticks of a log axis at ``10 ** exponent``: decades always, the ticks between
    them (2, 3, ... 9 times a decade) only when ``label_minor`` (fewer than two decades shown)."""
    labels = []
    for exponent in exponents:
        whole = abs(exponent - round(exponent)) < 1e-9
        if not whole and not label_minor:
            labels.append("")
            continue
        value = 10.0**exponent
        if whole:
            power = int(round(exponent))
            labels.append(f"{value:.{max(0, -power)}f}" if -3 <= power <= 4 else f"1e{power}")
        else:
            labels.append(_trim_exponent(f"{value:.0e}") if value < SCIENTIFIC_BELOW or value >= SCIENTIFIC_FROM
                          else f"{value:.{max(0, -math.floor(exponent))}f}")
    return labels


LOG_LABEL_TIERS = ((1,), (2, 5), (3, 4, 6, 7, 8, 9))
"""Which ticks of a log axis are worth a label, in order: decades, then 2 and 5 times a decade
(the 1-2-5 series), then the rest."""
LABEL_GAP = 1.25
"""Labels of a vertical axis are at least this many label heights apart (centre to centre)."""


def _mantissa(exponent: float) -> int:
    """The leading digit of ``10 ** exponent`` (1..9) for a tick of a log axis."""
    return max(1, min(9, int(round(10.0 ** (exponent - math.floor(exponent + 1e-9))))))


def fitting_log_labels(exponents: Sequence[float], pixels_per_decade: float, label_height: float) -> list[str]:
    """Labels for ticks of a log axis at ``10 ** exponent`` that fit without overlapping: decades
    (every second or fifth one when even they are crowded), then the 2s and 5s between them, then
    the other digits, each tier only when all of it fits; ticks left unlabelled get "".

    ``pixels_per_decade`` is the axis's length for a factor of 10, ``label_height`` a label's
    height in pixels: two labels are kept ``LABEL_GAP`` heights apart.
    """
    gap = LABEL_GAP * label_height / max(pixels_per_decade, 1e-9)  # in decades
    chosen: list[float] = []

    def fits(candidates: list[float]) -> bool:
        placed = sorted(chosen + candidates)
        return all(b - a >= gap for a, b in itertools.pairwise(placed))

    tiers = [[e for e in exponents if _mantissa(e) in tier] for tier in LOG_LABEL_TIERS]
    decades = tiers[0]
    for every in (1, 2, 5, 10, 20, 50, 100):
        picked = [e for e in decades if round(e) % every == 0]
        if fits(picked):
            chosen.extend(picked)
            break
    for tier in tiers[1:]:
        if tier and fits(tier):
            chosen.extend(tier)
        elif tier and not chosen:  # within one decade, none of it fits whole: as many as fit, greedily
            for exponent in tier:
                if fits([exponent]):
                    chosen.append(exponent)
    labels = log_labels(list(exponents), label_minor=True)
    kept = set(chosen)
    return [label if exponent in kept else "" for exponent, label in zip(exponents, labels, strict=True)]


def padded_range(low: float, high: float, kind: str, at_zero: bool = True) -> tuple[float, float]:
    """The range an axis shows for data from ``low`` to ``high``.

    A step axis spans at least ``MIN_STEP_SPAN`` steps and a time axis
    ``MIN_SECONDS_SPAN`` seconds; a value axis at least ``MIN_RELATIVE_SPAN`` of its
    magnitude: a flat series gets ±5 % around its value. Data that is all >= 0 gets no
    negative axis when ``at_zero``, but for a sliver under a flat zero (-0.1..1), so its
    line clears the axis; a flat zero that may go negative gets -1..1.
    """
    data_low = low
    span = high - low
    if kind in (STEP, SECONDS):
        minimum = MIN_STEP_SPAN if kind == STEP else MIN_SECONDS_SPAN
        if span < minimum:
            middle = (low + high) / 2
            low, high = middle - minimum / 2, middle + minimum / 2
        else:
            low, high = low - 0.01 * span, high + 0.05 * span
    else:
        magnitude = max(abs(low), abs(high))
        if magnitude == 0:
            # A flat zero just above the axis line (data wait 0 %), or mid-axis when it may go negative.
            return (-0.1, 1.0) if at_zero else (-1.0, 1.0)
        if span <= MIN_RELATIVE_SPAN * magnitude:
            low, high = low - 0.05 * magnitude, high + 0.05 * magnitude
        else:
            low, high = low - 0.05 * span, high + 0.05 * span
    if at_zero and data_low >= 0 and low < 0:
        # Slide a minimum-size window right rather than shrink it; otherwise just cut at zero.
        shift = -low if kind in (STEP, SECONDS) and span < (MIN_STEP_SPAN if kind == STEP else MIN_SECONDS_SPAN) else 0.0
        low, high = 0.0, high + shift
    return low, high
