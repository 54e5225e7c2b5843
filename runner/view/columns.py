"""Which columns of the live rank table fit the terminal, chosen by priority.

At 80 columns with eight ranks, a table of every column squeezed each one until
nothing was legible (``ra… st… ms/st…``, ``runn…``, ``3.509e…``). Like nvitop and
htop, the table now shows fewer columns rather than cut ones: each column has a
priority (rank, state, step and loss first), a column whose every value is "–" takes
no room, and the columns that fit, in priority order, are shown in their usual order
at their full width. A cell is never cut: a number is formatted to be short instead
(``format_rate``), or its column is left out and named under the table.

Pure text arithmetic (no rich): the chooser is tested at any width without a terminal.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum

from runner.format import MISSING, format_amount

COLUMN_GAP = 2
"""Cells between two columns: the table's padding and its (blank) divider (``show_edge=False``)."""


class Justify(str, Enum):
    LEFT = "left"
    RIGHT = "right"


@dataclass(frozen=True)
class Column:
    """One column the rank table can show."""

    key: str
    header: str
    priority: int
    """Lower comes first when the width runs out."""
    short_header: str | None = None
    """A shorter header used when the full one would cost another column its place."""
    justify: Justify = Justify.RIGHT
    always: bool = False
    """Shown even when every value is "–" (the rank and its state say what the row is)."""


@dataclass(frozen=True)
class ChosenColumns:
    shown: list[Column]
    """In the order given to the chooser (the table's order), not by priority."""
    headers: dict[str, str]
    """key -> the header chosen for it (full or short)."""
    widths: dict[str, int]
    """key -> the column's width in cells: its widest cell or header."""
    too_narrow: list[Column] = field(default_factory=list)
    """Columns with values that did not fit (named under the table), by priority."""
    empty: list[Column] = field(default_factory=list)
    """Columns whose every value is "–" (left out without a word)."""

    @property
    def width(self) -> int:
        return table_width(self.widths.values())


def text_width(text: str) -> int:
    """Cells ``text`` takes on a terminal (an East Asian wide character takes two)."""
    return sum(2 if unicodedata.east_asian_width(char) in ("W", "F") else 1 for char in text)


def table_width(widths) -> int:
    widths = list(widths)
    return sum(widths) + COLUMN_GAP * max(0, len(widths) - 1)


def choose_columns(columns: Sequence[Column], cells: Mapping[str, Sequence[str]], width: int) -> ChosenColumns:
    """The columns that fit ``width`` cells, most important first, each as wide as its widest cell.

    Two passes: which columns fit is decided with their short headers (so a long header never
    costs a column its place), then the room left gives columns their full header, by priority.
    The columns marked ``always`` are kept even when they alone overflow (the terminal wraps).
    """
    filled = [column for column in columns
              if column.always or any(cell != MISSING for cell in cells.get(column.key, ()))]
    empty = [column for column in columns if column not in filled]

    def cells_width(column: Column) -> int:
        return max((text_width(cell) for cell in cells.get(column.key, ())), default=0)

    def narrowest(column: Column) -> int:
        return max(cells_width(column), text_width(column.short_header or column.header))

    chosen: dict[str, int] = {}
    too_narrow: list[Column] = []
    used = 0
    for column in sorted(filled, key=lambda column: column.priority):
        extra = narrowest(column) + (COLUMN_GAP if chosen else 0)
        if used + extra <= width or column.always:
            chosen[column.key] = narrowest(column)
            used += extra
        else:
            too_narrow.append(column)
    headers = {}
    for column in sorted((column for column in filled if column.key in chosen), key=lambda column: column.priority):
        full = max(cells_width(column), text_width(column.header))
        if full == chosen[column.key] or used + full - chosen[column.key] <= width:
            used += full - chosen[column.key]
            chosen[column.key] = full
            headers[column.key] = column.header
        else:
            headers[column.key] = column.short_header or column.header
    shown = [column for column in columns if column.key in chosen]
    return ChosenColumns(shown=shown, headers=headers, widths={column.key: chosen[column.key] for column in shown},
                         too_narrow=too_narrow, empty=empty)


SI_PREFIXES = ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))


def format_rate(value: object) -> str:
    """A throughput in at most five cells with three significant digits: ``950``, ``12.3k``,
    ``123k``, ``1.23M``; a small rate as ``format_amount`` words it; "–" when not measured."""
    text = format_amount(value)
    if text == MISSING:
        return text
    number = float(value)  # type: ignore[arg-type]  # format_amount read it as a finite number
    magnitude = abs(number)
    for scale, prefix in SI_PREFIXES:
        if magnitude >= scale * 0.9995:  # 999.6 rounds to "1.00k", not "1000"
            scaled = number / scale
            if abs(scaled) >= 99.95:
                return f"{scaled:.0f}{prefix}"
            if abs(scaled) >= 9.995:
                return f"{scaled:.1f}{prefix}"
            return f"{scaled:.2f}{prefix}"
    return text
