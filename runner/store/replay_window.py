"""What a history replay reads: a bounded window of the run, whatever its size.

Attaching to a live run replays its stored history before the live updates (see
``runner.hub.publisher``). Replaying every record does not scale: 1,024 ranks store a
million records in 20 s, and the live updates queued behind so long a replay pass the
subscriber's memory budget, so it is dropped before the history ends. So a replay reads
at most a fixed number of records, however many the run has:

* **metrics**: the run's most recent ``metric_tail`` records in full, as they came (in row
  order, as before); the older part thinned per series (metric name and rank) to points
  that share ``metric_older_points``, and always the series' exact last record (tables stay
  exact). While the older part is small enough to read whole (``ENVELOPE_SCAN_ROWS``), it
  is thinned as the pyramid keeps old data (``runner.store.pyramid``): per source and time
  bucket its lowest and its highest point, so a chart still draws the curve's envelope.
  Past that, reading every row would make the replay as slow as the run is long (1,024
  ranks store 200 million records an hour), so each bucket is one record found by an index
  seek (a pyramid point among them still stands for its bucket's mean): the replay costs
  the same at any run size;
* **logs, events, GPU and process samples**: the most recent ``keep[table]`` rows; the rest
  is counted as left out.

A run within the budget replays every record, exactly as stored. ``runs show``, CSV export
and ``rankwatch runs`` read the store itself and are not affected: the store keeps it all.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from rankwatch.protocol import HistoryEnd, MetricRecord
from runner.store.pyramid import next_series

DEFAULT_KEEP: Mapping[str, int] = {"logs": 10_000, "events": 5_000, "gpu_samples": 10_000,
                                   "process_samples": 10_000}
"""The most recent rows of each non-metric table a replay sends."""
ENVELOPE_SCAN_ROWS = 500_000
"""Older metric records read whole to keep each bucket's lowest and highest (~1 s); more are sampled."""
MAX_BUCKETS_PER_SERIES = 2_000
"""No series gets more buckets than this (4,000 points), however few series the run has."""
TABLE_KEYS: Mapping[str, str] = {"metrics": "rowid", "logs": "id", "events": "id", "gpu_samples": "rowid",
                                 "process_samples": "rowid"}


@dataclass(frozen=True)
class ReplayBudget:
    """How much of a run a replay sends at most."""

    metric_tail: int = 20_000
    """The most recent metric records sent in full (all series together)."""
    metric_older_points: int = 30_000
    """Points (lowest and highest per bucket) that stand for all older metric records."""
    keep: Mapping[str, int] = field(default_factory=lambda: dict(DEFAULT_KEEP))


@dataclass(frozen=True)
class SeriesSpan:
    """One series' records in the older part of a replay (row id at or below ``MetricWindow.tail_after``)."""

    name: str
    rank: int
    records: int | None
    """None: not counted (a sampled window: counting would read every row)."""
    first_t: float | None = None
    last_t: float | None = None


@dataclass(frozen=True)
class MetricWindow:
    """How a replay sends a run's metrics: ``older`` (row ids in (``after``, ``tail_after``])
    thinned into ``buckets`` per series, then every record with row id in (``tail_after``,
    through] as it came."""

    tail_after: int
    older: tuple[SeriesSpan, ...]
    buckets: int
    envelope: bool = True
    """Each bucket's lowest and highest (the older part was read whole); False: one record per
    bucket, found by an index seek."""
    after: int = 0
    """Rows at or below it were sent before (a catch-up replay); 0: from the run's first."""

    @property
    def decimated(self) -> bool:
        return bool(self.older)

    @property
    def older_records(self) -> int | None:
        """The older records the points stand for; None when not counted (sampled)."""
        counts = [series.records for series in self.older]
        return None if None in counts else sum(count for count in counts if count is not None)


def plan_metrics(connection: sqlite3.Connection, run_id: int, through: int,
                 budget: ReplayBudget = ReplayBudget(), after: int = 0) -> MetricWindow:
    """The metric window of ``run_id`` (rows in (``after``, ``through``]) for ``budget``: every
    row as it came when they fit it. Reads at most ``ENVELOPE_SCAN_ROWS`` index entries, then
    one seek per series."""
    row = connection.execute(
        "SELECT rowid FROM metrics WHERE +run_id = ? AND rowid > ? AND rowid <= ? ORDER BY rowid DESC"
        " LIMIT 1 OFFSET ?", (run_id, after, through, budget.metric_tail)).fetchone()
    if row is None:
        return MetricWindow(after, (), 0, after=after)
    tail_after = int(row[0])
    older_rows = connection.execute(
        "SELECT COUNT(*) FROM (SELECT 1 FROM metrics WHERE +run_id = ? AND rowid > ? AND rowid <= ?"
        " ORDER BY rowid DESC LIMIT ?)", (run_id, after, tail_after, ENVELOPE_SCAN_ROWS + 1)).fetchone()[0]
    if older_rows <= budget.metric_older_points:
        return MetricWindow(after, (), 0, after=after)
    if older_rows <= ENVELOPE_SCAN_ROWS:
        older = tuple(SeriesSpan(str(name), int(rank), int(records), float(first), float(last))
                      for name, rank, records, first, last in connection.execute(
                          "SELECT name, rank, COUNT(*), MIN(t), MAX(t) FROM metrics INDEXED BY metrics_by_series"
                          " WHERE run_id = ? AND rowid > ? AND rowid <= ? GROUP BY name, rank",
                          (run_id, after, tail_after)))
        buckets = budget.metric_older_points // (2 * len(older))
        return MetricWindow(tail_after, older, max(1, min(MAX_BUCKETS_PER_SERIES, buckets)), after=after)
    older = tuple(SeriesSpan(name, rank, None) for name, rank in all_series(connection, run_id))
    buckets = budget.metric_older_points // max(1, len(older))
    return MetricWindow(tail_after, older, max(1, min(MAX_BUCKETS_PER_SERIES, buckets)), envelope=False,
                        after=after)


def all_series(connection: sqlite3.Connection, run_id: int) -> list[tuple[str, int]]:
    """The run's series (name, rank), one index seek each (a loose index scan)."""
    series: list[tuple[str, int]] = []
    current = next_series(connection, run_id, None)
    while current is not None:
        series.append(current)
        current = next_series(connection, run_id, current)
    return series


def older_points(connection: sqlite3.Connection, run_id: int, window: MetricWindow,
                 series: SeriesSpan) -> list[MetricRecord]:
    """The points that stand for ``series`` in the older part of ``window``, in time order: all
    its records when there are few, else per source and time bucket the lowest and the highest
    (a pyramid point counts with its ``low``/``high``), and the series' last record per source."""
    where = "run_id = ? AND name = ? AND rank = ? AND rowid > ? AND rowid <= ?"
    params: tuple[object, ...] = (run_id, series.name, series.rank, window.after, window.tail_after)
    columns = "rowid, rank, t, step, name"
    if not window.envelope or series.records is None or series.first_t is None or series.last_t is None:
        rows = _sampled_rows(connection, where, params, window.buckets)
    elif series.records <= 2 * window.buckets + 1:
        rows = connection.execute(f"SELECT {columns}, value, source FROM metrics WHERE {where}", params).fetchall()
    else:
        width = (series.last_t - series.first_t) / window.buckets or 1.0
        bucket = "CAST((t - ?) / ? AS INTEGER)"
        rows = []
        for extreme in ("MIN(COALESCE(low, value))", "MAX(COALESCE(high, value))"):
            rows += connection.execute(
                f"SELECT {columns}, {extreme}, source FROM metrics WHERE {where} GROUP BY source, {bucket}",
                (*params, series.first_t, width)).fetchall()
        for source in {row[6] for row in rows}:
            rows += connection.execute(
                f"SELECT {columns}, value, source FROM metrics WHERE {where} AND source = ?"
                f" ORDER BY t DESC, rowid DESC LIMIT 1", (*params, source)).fetchall()
    unique = {row[0]: row for row in rows}
    return _in_time_order(unique.values())


def _sampled_rows(connection: sqlite3.Connection, where: str, params: tuple[object, ...],
                  buckets: int) -> list[Any]:
    """One record per time bucket of the series' older part, each found by an index seek, and its
    last record: the cost does not grow with the series' length."""
    columns = "rowid, rank, t, step, name, value, source"
    first = connection.execute(f"SELECT {columns} FROM metrics WHERE {where} ORDER BY t, rowid LIMIT 1",
                               params).fetchone()
    last = connection.execute(f"SELECT {columns} FROM metrics WHERE {where} ORDER BY t DESC, rowid DESC LIMIT 1",
                              params).fetchone()
    if first is None or last is None:
        return []
    rows = [first, last]
    width = (last[2] - first[2]) / buckets
    for index in range(1, buckets if width > 0 else 0):
        row = connection.execute(f"SELECT {columns} FROM metrics WHERE {where} AND t >= ? ORDER BY t LIMIT 1",
                                 (*params, first[2] + index * width)).fetchone()
        if row is not None:
            rows.append(row)
    return rows


def _in_time_order(rows: Iterable[Any]) -> list[MetricRecord]:
    new = tuple.__new__
    return [new(MetricRecord, tuple(row)[1:]) for row in sorted(rows, key=lambda row: (row[2], row[0]))]


def recent_start(connection: sqlite3.Connection, table: str, run_id: int, through: int,
                 keep: int, after: int = 0) -> tuple[int, int]:
    """Where a replay of ``table`` starts to send the run's ``keep`` most recent rows with key in
    (``after``, ``through``]: (the key to read after, how many rows it leaves out, counted up to
    ``HistoryEnd.COUNTED_UP_TO`` and one more: 12.7 million process samples took 0.6 s)."""
    key = TABLE_KEYS[table]
    row = connection.execute(
        f"SELECT {key} FROM {table} WHERE +run_id = ? AND {key} > ? AND {key} <= ? ORDER BY {key} DESC"
        f" LIMIT 1 OFFSET ?", (run_id, after, through, keep)).fetchone()
    if row is None:
        return after, 0
    start = int(row[0])
    left_out = connection.execute(  # counted up to HistoryEnd.COUNTED_UP_TO (+1: "more than that")
        f"SELECT COUNT(*) FROM (SELECT 1 FROM {table} WHERE run_id = ? AND {key} > ? AND {key} <= ? LIMIT ?)",
        (run_id, after, start, HistoryEnd.COUNTED_UP_TO + 1)).fetchone()[0]
    return start, int(left_out)


LATEST_PER: Mapping[str, str] = {"metrics": "rank, name, source", "gpu_samples": "gpu_index",
                                  "process_samples": "rank"}
"""What a catch-up sends one row of (the newest) per table: a series, a GPU, a rank's process."""


@dataclass(frozen=True)
class LatestRows:
    """The newest row of each series (``LATEST_PER``) among rows (``after``, ``through``] of a
    table: what a catch-up sends of it, and how many rows of the range they stand for."""

    rows: list[Any]
    """The contract's records, in the order they were stored."""
    records: int
    """Rows in the range: ``records - len(rows)`` were left out."""


def latest_rows(connection: sqlite3.Connection, table: str, columns: str, record: type[tuple[Any, ...]],
                run_id: int, after: int, through: int) -> LatestRows:
    """The newest row of each series of ``table`` (``LATEST_PER``) with key in (``after``, ``through``],
    as ``record`` values of ``columns``.

    A catch-up (``runner.hub.publisher``) covers the seconds its replay took: it walks those rows
    by key, so it costs what the range holds, not what the run does. (Planned as a replay, a
    range past the budget took the envelope path, whose queries read each series whole: seconds
    at 1,024 ranks, during which more live updates queued than the reader could take, so the
    catch-ups never ended and the GUI was dropped again and again.)
    """
    key = TABLE_KEYS[table]
    rows = connection.execute(
        f"SELECT MAX({key}), {columns}, COUNT(*) FROM {table} WHERE +run_id = ? AND {key} > ? AND {key} <= ?"
        f" GROUP BY {LATEST_PER[table]} ORDER BY 1", (run_id, after, through)).fetchall()
    new = tuple.__new__
    return LatestRows([new(record, tuple(row[1:-1])) for row in rows], sum(int(row[-1]) for row in rows))
