"""Rows go into SQLite hundreds per statement, exactly as ``executemany`` would store them."""

from __future__ import annotations

import math
import sqlite3

import pytest

from runner.store.bulk_insert import ROWS_PER_STATEMENT, insert_rows

COLUMNS = "(run_id, rank, t, step, name, value, source)"


def _rows(count: int) -> list[tuple]:
    values = [0.1 + 0.2, math.pi * 1e300, -0.0, 5e-324, None, float("inf"), 1 / 3]
    return [(rank % 7, 1.8e9 + rank / 3, None if rank % 11 == 0 else rank, f"m{rank % 5}",
             values[rank % len(values)], "auto") for rank in range(count)]


@pytest.mark.parametrize("count", [1, 7, ROWS_PER_STATEMENT, 2 * ROWS_PER_STATEMENT + 371])
def test_rows_are_stored_in_order_and_bit_for_bit_as_executemany_stores_them(count):
    connection = sqlite3.connect(":memory:")
    for table in ("bulk", "one_by_one"):
        connection.execute(f"CREATE TABLE {table} (run_id, rank, t, step, name, value, source)")
    rows = _rows(count)
    statements: list[str] = []
    connection.set_trace_callback(statements.append)
    with connection:
        insert_rows(connection, f"INSERT INTO bulk {COLUMNS}", "(3,?,?,?,?,?,?)", rows)
    bulk_statements = [s for s in statements if s.startswith("INSERT INTO bulk")]
    connection.set_trace_callback(None)
    with connection:
        connection.executemany(f"INSERT INTO one_by_one {COLUMNS} VALUES (3,?,?,?,?,?,?)", rows)
    bulk = connection.execute("SELECT * FROM bulk ORDER BY rowid").fetchall()
    one_by_one = connection.execute("SELECT * FROM one_by_one ORDER BY rowid").fetchall()
    assert len(bulk) == count
    assert [repr(row) for row in bulk] == [repr(row) for row in one_by_one]  # -0.0 and 5e-324 too
    full, rest = divmod(count, ROWS_PER_STATEMENT)
    assert len(bulk_statements) == full + bin(rest).count("1")  # a statement per 500 rows, then 256, 128, ...
