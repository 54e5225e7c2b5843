"""How numbers read in the terminal (and wherever plain text shows a value).

At the bottom of the runner, beside ``runner.exit_status``: the terminal view, the CLI and the
diagnosis's hints word a number alike, and none of them is below another.

A value that was not measured is ``None`` and reads "–"; a measured value keeps
enough digits to be told apart from zero (a loss of 1e-9 is "1.000e-09", not
"0.0000").
"""

from __future__ import annotations

import math

from runner.exit_status import describe_exit_code

MISSING = "–"
"""What a value that was not measured reads as (an en dash)."""

__all__ = ["MISSING", "describe_exit_code", "format_amount", "format_bytes", "format_duration", "format_fixed",
           "format_memory_pair", "format_number", "format_percent", "parse_rank_ranges", "rank_ranges", "ranks_text"]


def _finite(value: object) -> float | None:
    if value is None or isinstance(value, bool):
        return None
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def format_number(value: object, decimals: int = 4) -> str:
    """``0.5012``; scientific below 0.01 or from 1e5 on (``1.000e-09``, ``2.500e+07``), so a value always
    keeps at least three significant digits; "–" when missing.

    NaN and infinities are shown as such (a diverged loss must not read as "–").
    """
    if isinstance(value, float) and math.isnan(value):
        return "nan"
    if isinstance(value, float) and math.isinf(value):
        return "inf" if value > 0 else "-inf"
    number = _finite(value)
    if number is None:
        return MISSING
    magnitude = abs(number)
    if magnitude != 0 and (magnitude < 1e-2 or magnitude >= 1e5):
        return f"{number:.3e}"
    return f"{number:.{decimals}f}"


def format_fixed(value: object, pattern: str, scale: float = 1.0) -> str:
    """``pattern.format(value * scale)``, or "–" when the value is missing or not a number."""
    number = _finite(value)
    if number is None:
        return MISSING
    return pattern.format(number * scale)


def format_amount(value: object, scale: float = 1.0) -> str:
    """A rate or a duration with about three significant digits: ``1234``, ``12.3``, ``1.23``,
    ``0.0123``, ``4.0e-05``; "–" when missing."""
    number = _finite(value)
    if number is None:
        return MISSING
    number *= scale
    magnitude = abs(number)
    if magnitude >= 100 or magnitude == 0:
        return f"{number:.0f}"
    if magnitude >= 10:
        return f"{number:.1f}"
    if magnitude >= 1:
        return f"{number:.2f}"
    if magnitude >= 1e-4:
        return f"{number:.3g}"
    return f"{number:.1e}"


def format_percent(share: object) -> str:
    """A share 0..1 as ``40%`` (``<1%`` for a small share that is not zero); "–" when not measured."""
    number = _finite(share)
    if number is None:
        return MISSING
    if 0 < number < 0.005:
        return "<1%"
    return f"{100 * number:.0f}%"


def format_duration(seconds: object) -> str:
    """``1:02:03`` or ``2:03``; "–" when unknown."""
    number = _finite(seconds)
    if number is None:
        return MISSING
    total = int(max(0, round(number)))
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def format_bytes(value: object) -> str:
    number = _finite(value)
    if number is None:
        return MISSING
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(number) < 1024 or unit == "TiB":
            if unit == "B" or abs(number) >= 100:
                return f"{number:.0f} {unit}"
            return f"{number:.1f} {unit}"
        number /= 1024
    return MISSING


BYTE_UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}


def format_memory_pair(first: int | None, second: int | None) -> str:
    """``0.9/1.2 GiB``: two amounts of memory in the unit of the larger ("–" for one not known)."""
    known = [value for value in (first, second) if value is not None]
    if not known:
        return MISSING
    unit = format_bytes(max(known)).split()[-1]
    scale = BYTE_UNITS[unit]

    def amount(value: int | None) -> str:
        if value is None:
            return MISSING
        number = value / scale
        return f"{number:.0f}" if unit == "B" or number >= 100 else f"{number:.1f}"

    return f"{amount(first)}/{amount(second)} {unit}"


def rank_ranges(ranks: object) -> str:
    """``0-511, 513-1023``: the ranks sorted, three or more in a row as a range, so that a
    thousand ranks read in one line (``0, 1`` and ``0, 2, 5`` stay as they are)."""
    ordered = sorted(set(ranks))  # type: ignore[call-overload]
    parts: list[str] = []
    start = 0
    while start < len(ordered):
        end = start
        while end + 1 < len(ordered) and ordered[end + 1] == ordered[end] + 1:
            end += 1
        if end - start >= 2:
            parts.append(f"{ordered[start]}-{ordered[end]}")
        else:
            parts.extend(str(rank) for rank in ordered[start:end + 1])
        start = end + 1
    return ", ".join(parts)


def ranks_text(ranks: object) -> str:
    """``rank 3``, ``ranks 0, 1`` or ``ranks 0-511, 513-1023``: how every message names ranks."""
    ordered = sorted(set(ranks))  # type: ignore[call-overload]
    return f"rank {ordered[0]}" if len(ordered) == 1 else "ranks " + rank_ranges(ordered)


def parse_rank_ranges(text: str) -> set[int]:
    """The ranks ``512-519, 3`` names (numbers and ranges, split by commas or spaces): what
    ``rank_ranges`` writes reads back.

    Raises:
        ValueError: a part that is neither a rank nor a range of ranks, said with an example.
    """
    ranks: set[int] = set()
    for part in text.replace(",", " ").split():
        first, dash, last = part.partition("-")
        try:
            low, high = int(first), int(last) if dash else int(first)
        except ValueError:
            raise ValueError(f"{part!r} is not a rank or a range of ranks (e.g. 3 or 512-519)") from None
        if low < 0 or high < low:
            raise ValueError(f"{part!r} is not a range of ranks: it goes from the lower to the higher, e.g. 512-519")
        ranks.update(range(low, high + 1))
    if not ranks:
        raise ValueError("no rank given (e.g. 3, 512-519 or all)")
    return ranks
