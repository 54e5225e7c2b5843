"""The sample pyramid: GPU and process samples kept as the metric pyramid keeps records.

The samplers write a row per GPU and per rank every sample interval (1 s by default): at 1,024
ranks that is 1,024 process rows a second, ~88 million a day, and a store that grows with time
whatever the run does. So samples older than the full-detail window are replaced, per GPU or
rank, by one row per 10 s bucket, and those older than a day by one per 5 min bucket (the
metric pyramid's ``levels()``).

A bucket's row is a sample like any other: each column the mean of the samples in the bucket
that measured it, at the time and with the row id of the newest, and the newest's pid (a
restarted rank keeps its newest process). Reading the table in row order still meets each GPU's
or rank's samples in time order, and readers (charts, ``runs show``'s GPU %, attach) need no
change: old samples are only sparser. A bucket's row does not say how many samples it stands
for: samples come at a steady interval, so every bucket of a level weighs the same, and a mean
over time is a mean over its rows.

Work goes a bucket at a time over the whole table (every GPU or rank of the bucket together,
through the ``(run_id, t)`` index), from where ``sample_compactions`` says the level got, about
``SLICE_ROWS`` rows per call in one short transaction, as the metric pyramid does.
"""

from __future__ import annotations

import math
import sqlite3
from dataclasses import dataclass

from runner.store.pyramid import DEFAULT_FULL_DETAIL, SLICE_ROWS, Level, levels

__all__ = ["SAMPLE_TABLES", "SampleSlice", "SampleTable", "compact_samples", "compact_samples_slice"]


@dataclass(frozen=True)
class SampleTable:
    """A samples table: ``key`` tells its series apart, ``values`` are averaged, ``newest`` taken
    from the newest sample of the bucket."""

    name: str
    key: str
    values: tuple[str, ...]
    newest: tuple[str, ...] = ()


SAMPLE_TABLES = (
    SampleTable("gpu_samples", "gpu_index",
                ("utilization", "memory_used", "memory_total", "power_watts", "temperature_c", "sm_clock_mhz")),
    SampleTable("process_samples", "rank", ("cpu_percent", "rss_bytes", "threads"), newest=("pid",)),
)
INTEGER_COLUMNS = frozenset({"memory_used", "memory_total", "rss_bytes", "threads"})
"""Columns that hold whole numbers: their bucket mean is rounded."""


@dataclass(frozen=True)
class SampleSlice:
    """One call's work: rows replaced by bucket rows, and whether the level is done for now."""

    replaced: int
    points: int
    done: bool


def compact_samples_slice(connection: sqlite3.Connection, table: SampleTable, run_id: int, level: Level,
                          now: float, slice_rows: int = SLICE_ROWS) -> SampleSlice:
    """Compact ``table``'s samples of ``run_id`` that are older than ``level.after`` at ``now``,
    bucket by bucket from where the level got, until about ``slice_rows`` rows were replaced."""
    cutoff = math.floor((now - level.after) / level.width) * level.width  # whole buckets only
    replaced = points = 0
    with connection:
        start = _next_start(connection, table, run_id, _through(connection, table, run_id, level), level)
        while start is not None and start + level.width <= cutoff:
            if replaced >= slice_rows:
                return SampleSlice(replaced, points, False)
            end = start + level.width
            done, made = _replace_bucket(connection, table, run_id, start, end)
            replaced += done
            points += made
            connection.execute(
                "INSERT INTO sample_compactions (run_id, level, table_name, through) VALUES (?, ?, ?, ?)"
                " ON CONFLICT (run_id, level, table_name) DO UPDATE SET through = excluded.through",
                (run_id, level.number, table.name, end))
            start = _next_start(connection, table, run_id, end, level)
    return SampleSlice(replaced, points, True)


def compact_samples(connection: sqlite3.Connection, run_id: int, now: float,
                    full_detail: float = DEFAULT_FULL_DETAIL) -> int:
    """Compact every samples table of ``run_id`` that is old enough at ``now``, every level (a
    finished run at once; the hub does a live one a slice at a time). Returns the rows replaced."""
    replaced = 0
    for level in levels(full_detail):
        for table in SAMPLE_TABLES:
            while True:
                result = compact_samples_slice(connection, table, run_id, level, now)
                replaced += result.replaced
                if result.done:
                    break
    return replaced


def _through(connection: sqlite3.Connection, table: SampleTable, run_id: int, level: Level) -> float:
    """How far ``level`` got in ``table`` (minus infinity: not begun)."""
    row = connection.execute("SELECT through FROM sample_compactions WHERE run_id = ? AND level = ? AND table_name = ?",
                             (run_id, level.number, table.name)).fetchone()
    return -math.inf if row is None else float(row[0])


def _next_start(connection: sqlite3.Connection, table: SampleTable, run_id: int, after: float,
                level: Level) -> float | None:
    """The start of the bucket holding the first sample at or after ``after`` (a gap of hours in
    the samples is crossed with one index seek, not bucket by bucket); None: there is none yet."""
    first = connection.execute(f"SELECT MIN(t) FROM {table.name} WHERE run_id = ? AND t >= ?",
                               (run_id, after)).fetchone()[0]
    return None if first is None else max(after, math.floor(first / level.width) * level.width)


def _replace_bucket(connection: sqlite3.Connection, table: SampleTable, run_id: int, start: float,
                    end: float) -> tuple[int, int]:
    """The samples in [``start``, ``end``): each GPU's or rank's two or more become one row."""
    where = f"run_id = ? AND t >= ? AND t < ? AND {table.key} IN" \
            f" (SELECT {table.key} FROM {table.name} WHERE run_id = ? AND t >= ? AND t < ?" \
            f" GROUP BY {table.key} HAVING COUNT(*) > 1)"
    params = (run_id, start, end, run_id, start, end)
    means = ", ".join(f"ROUND(AVG({column}))" if column in INTEGER_COLUMNS else f"AVG({column})"
                      for column in table.values)
    newest = "".join(f", {column}" for column in table.newest)
    made = connection.execute(  # MAX(t) is the only MIN/MAX: SQLite takes rowid and ``newest`` from its row
        f"SELECT rowid, MAX(t), {table.key}, {means}{newest} FROM {table.name} WHERE {where}"
        f" GROUP BY {table.key}", params).fetchall()
    if not made:
        return 0, 0
    replaced = connection.execute(f"DELETE FROM {table.name} WHERE {where}", params).rowcount
    columns = ("rowid", "run_id", "t", table.key, *table.values, *table.newest)
    marks = ", ".join("?" for _ in columns)
    connection.executemany(
        f"INSERT INTO {table.name} ({', '.join(columns)}) VALUES ({marks})",
        [(rowid, run_id, t, key, *_whole(table, values)) for rowid, t, key, *values in made])
    return replaced, len(made)


def _whole(table: SampleTable, values: list[object]) -> list[object]:
    """The bucket's values as their columns hold them: ``ROUND`` gives a REAL; whole-number
    columns get an int back."""
    names = (*table.values, *table.newest)
    return [int(value) if name in INTEGER_COLUMNS and isinstance(value, float) else value
            for name, value in zip(names, values, strict=True)]
