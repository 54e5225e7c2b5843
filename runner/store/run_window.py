"""A stored run's records read as attaching to it would send them: bounded, whatever its size.

Opening a run from the History read every metric record and sample it had: a 1,024-rank run
of ten minutes holds 18 million records (minutes of reading and gigabytes of memory in the
GUI), three days at that scale hundreds of millions. Attaching to a live run reads a bounded
window instead (``runner.store.replay_window``: the newest records in full, the older ones
thinned per series, the newest rows of each samples table). A stored run is read through the
same window and budget, so a run looks the same open or attached, and opens in the same time
at any size. A run within the budget is read whole, exactly as before.

What was thinned or left out is said (``decimated``, ``left_out``), as a replay's
``history_end`` says it; ``runs show``, ``runs logs`` and CSV export read the store itself.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from rankwatch.protocol import GpuSample, MetricRecord, ProcessSample
from runner.store.replay_window import (
    MetricWindow,
    ReplayBudget,
    older_points,
    plan_metrics,
    recent_start,
)
from runner.store.store import RunStore

__all__ = ["RunWindow", "read_recent", "read_run_window"]

CHUNK_ROWS = 20_000
"""Metric records handed over at a time (``RunWindow.metric_chunks``)."""


@dataclass
class RunWindow:
    """The bounded records of one run; ``metric_chunks`` streams (read it inside the store read)."""

    metric_chunks: Iterator[list[MetricRecord]]
    gpu_samples: list[GpuSample]
    process_samples: list[ProcessSample]
    decimated: bool
    """The older metrics came thinned per series (each bucket's low and high, or one point)."""
    left_out: dict[str, int] = field(default_factory=dict)
    """Rows of each table not read (the oldest samples; thinned metric records when counted)."""


def read_run_window(store: RunStore, run_id: int, budget: ReplayBudget | None = None,
                    through: Mapping[str, int] | None = None) -> RunWindow:
    """Run ``run_id``'s metrics and samples within ``budget`` (the hub's default when None), as a
    history replay sends them: the rows up to ``through`` (a key per table: where a live
    subscription began, ``HistoryEnd.stored_through``), else all rows committed so far."""
    budget = budget or ReplayBudget()
    last = dict(through) if through is not None else store.last_rowids(run_id)
    left_out: dict[str, int] = {}
    samples: dict[str, list[Any]] = {}
    for table in ("gpu_samples", "process_samples"):
        start, skipped = recent_start(store.connection, table, run_id, last[table], budget.keep[table])
        samples[table] = [row for chunk in _chunks(store, table, run_id, start, last[table]) for row in chunk]
        if skipped:
            left_out[table] = skipped
    window = plan_metrics(store.connection, run_id, last["metrics"], budget)
    return RunWindow(_metric_chunks(store, run_id, window, last["metrics"], left_out),
                     samples["gpu_samples"], samples["process_samples"], window.decimated, left_out)


def read_recent(store: RunStore, table: str, run_id: int, through: int, keep: int) -> tuple[list[Any], int]:
    """The run's ``keep`` most recent rows of ``table`` (``logs``, ``events``...) with key up to
    ``through``, in order, as the hub's replay sends them; and how many older ones it left out."""
    start, skipped = recent_start(store.connection, table, run_id, through, keep)
    return [row for chunk in _chunks(store, table, run_id, start, through) for row in chunk], skipped


def _metric_chunks(store: RunStore, run_id: int, window: MetricWindow, through: int,
                   left_out: dict[str, int]) -> Iterator[list[MetricRecord]]:
    """The older part's points, a chunk of series at a time, then the tail as it came; the
    thinned records are counted into ``left_out`` once the points are read (when countable)."""
    if window.decimated:
        points: list[MetricRecord] = []
        sent = 0
        for series in window.older:
            points += older_points(store.connection, run_id, window, series)
            if len(points) >= CHUNK_ROWS:
                sent += len(points)
                yield points
                points = []
        if points:
            sent += len(points)
            yield points
        if window.older_records is not None:
            left_out["metrics"] = window.older_records - sent
    yield from _chunks(store, "metrics", run_id, window.tail_after, through)


def _chunks(store: RunStore, table: str, run_id: int, after: int, through: int) -> Iterator[list[Any]]:
    """Records of ``table`` with key in (``after``, ``through``], in key order, a chunk at a time."""
    while after < through:
        rows, after = store.read_chunk(table, run_id, after, through, CHUNK_ROWS)
        if not rows:
            return
        yield rows

