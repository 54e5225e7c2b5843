"""Many rows into one table with few trips into SQLite: what keeps the hub's writer thread fed.

``executemany`` with one row per statement steps SQLite once per row, and Python's ``sqlite3``
gives the GIL up around every step and takes it back for the next row's values. When the hub's
event loop is busy (1,024 ranks at 2 steps/s keep it at about one core), taking the GIL back
waits for the loop to give it up, up to the interpreter's switch interval (5 ms): the writer
then stored 2-10 k records/s against the 26 k/s such a run sends, its commits grew without
bound and the live view fell minutes behind. Here a statement inserts up to ``ROWS_PER_STATEMENT``
rows (``INSERT ... VALUES (...), (...), ...``), so the writer takes the GIL back once per
hundreds of rows: 45-58 k rows/s with a busy main thread in the same test, where one row per
statement made 1.5-2.4 k (``tests/bench/PERFORMANCE.md``). Values are bound as they are, as
``executemany`` binds them: nothing goes through text.

The last rows of a batch that do not fill a statement go in statements of 256, 128, ... 1 rows:
a handful of shapes, each prepared once and then found in the connection's statement cache.
"""

from __future__ import annotations

import functools
import itertools
import sqlite3
from collections.abc import Sequence

ROWS_PER_STATEMENT = 500
"""Rows one statement inserts (at most 500 x 8 = 4,000 parameters: SQLite allows 32,766). Beside a
busy event loop 1,000 rows stored 2.3 times as much per second as 200; on a quiet machine 200
stored twice as much as 1,000: so between the two."""

_flatten = itertools.chain.from_iterable


def insert_rows(connection: sqlite3.Connection, head: str, row: str, rows: Sequence[Sequence[object]]) -> None:
    """``head VALUES row, row, ...`` for ``rows``, in the caller's transaction.

    ``head`` is ``INSERT INTO table (columns)``; ``row`` is one row's values, ``(?,?,?)`` (it may
    hold constants, ``(7,?,?)``, as the run id does). Every row has one value per ``?``.
    """
    count = len(rows)
    full = count - count % ROWS_PER_STATEMENT
    if full:
        connection.executemany(_statement(head, row, ROWS_PER_STATEMENT),
                               (tuple(_flatten(rows[start:start + ROWS_PER_STATEMENT]))
                                for start in range(0, full, ROWS_PER_STATEMENT)))
    start = full
    size = ROWS_PER_STATEMENT
    while start < count:
        size = min(size, 1 << ((count - start).bit_length() - 1))  # the largest power of two that fits
        connection.execute(_statement(head, row, size), tuple(_flatten(rows[start:start + size])))
        start += size


@functools.lru_cache(maxsize=64)
def _statement(head: str, row: str, rows: int) -> str:
    return f"{head} VALUES {','.join([row] * rows)}"
