"""What the GUI reads from the run store: the reads the store reader runs.

Each read is a function of a read-only ``RunStore`` (run on the reader's thread, see
``store_reader``) that returns what the models turn into what they show; no model or
widget sees the store itself. A stored run comes back in the types a live run arrives in
(``runner.runstate.messages``: ``RunInfo``, ``RankInfo``, ``NodeInfo``, the contract's
``Event``; ``RankStats`` for its whole-run figures), decoded once, here, as leniently as the
hub's messages are: the models never read a stored row by its keys. :meth:`StoreReads.run_now` is the one read a widget
may make on its own thread: one row by its key, to decide how to open a run.

Every read raises ``RunNotFound`` for a run that is not in the store (the reader
reports it), ``sqlite3.Error`` / ``OSError`` when the store cannot be read.
"""

from __future__ import annotations

import dataclasses
import sqlite3
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rankwatch.protocol import GpuSample, MetricRecord, ProcessSample
from runner.rows import StoredRun
from runner.runstate.messages import (
    Event,
    HistoryEnd,
    LogLine,
    NodeInfo,
    RankInfo,
    RunInfo,
)
from runner.runstate.state import shown_status
from runner.store.liveness import effective_status, is_live
from runner.store.rank_stats import RankStats, run_statistics
from runner.store.replay_window import ReplayBudget
from runner.store.run_figures import RunFigures, run_figures
from runner.store.run_window import RunWindow, read_recent, read_run_window
from runner.store.store import RunNotFound, RunStore

__all__ = ["ListedRun", "RankStats", "RunFigures", "RunNotFound", "RunRecords", "RunStore", "StoreReads",
           "StoredHistory"]

_finished_figures: dict[tuple[str, int], RunFigures] = {}
"""Figures of finished runs, by (store, run id): they cannot change, so the runs list, polled
every few seconds, reads each finished run's records once. Only the reader's thread uses it."""
_live_figures: dict[tuple[str, int], tuple[float, RunFigures]] = {}
"""Figures of live runs, by (store, run id), with the (monotonic) time they were read."""
LIVE_FIGURES_EVERY_S = 15.0


@dataclass
class RunRecords:
    """One run as the store recorded it, in the hub's types; ``window.metric_chunks`` streams (read
    it inside the read)."""

    run: RunInfo
    """The ``runs`` row (a ``StoredRun``: its spec is also read as ``spec``); a column this version
    does not know is kept in ``extra``, a value of the wrong type is None (not measured)."""
    spec_toml: str | None
    """The launch spec as stored (TOML text), None when the run has none."""
    spec: dict[str, Any]
    """``spec_toml`` read as the profile table the run was launched with; empty when unreadable."""
    ranks: tuple[RankInfo, ...]
    nodes: tuple[NodeInfo, ...]
    window: RunWindow
    """Its metrics and samples, bounded as attaching to it would send them
    (``runner.store.run_window``): a big run opens as fast as a small one."""
    logs: list[LogLine]
    """The last ``log_limit`` lines (a malformed stored line is left out, as a published one is)."""
    log_total: int
    events: tuple[Event, ...]
    """As the hub publishes them (an event of a kind from a newer Rankwatch is a warning that
    names it in ``fields["unknown_kind"]``)."""
    rank_results: dict[int, RankStats]
    """Each rank's figures over the whole run (:meth:`StoreReads.rank_results`); empty while it runs."""

    @property
    def history_end(self) -> HistoryEnd:
        """What ``window`` left out, as a live run's ``history_end`` message says it (so a stored
        run shows the same notice of a thinned history)."""
        return HistoryEnd(self.window.decimated, dict(self.window.left_out))


@dataclass(frozen=True)
class ListedRun:
    """A run as the runs list shows it: its stored row (``StoredRun``: the RUN row the hub publishes,
    with its spec, tags and notes), whether it is live, the status a person sees, and its headline
    figures."""

    run: StoredRun
    live: bool
    """Its runner is alive and listening: the GUI can attach to its socket."""
    effective_status: str
    """The stored status; ``lost`` for a runner that died without recording an end, ``hung`` for a
    live run with a stalled rank; empty for a row without a status."""
    figures: RunFigures = dataclasses.field(default_factory=RunFigures)
    """``runner.store.run_figures`` (only :meth:`StoreReads.runs` reads them)."""

    @property
    def id(self) -> int:
        """The run's id."""
        return self.run.id


def _figures(store: RunStore, rows: list[ListedRun]) -> dict[int, RunFigures]:
    """Each run's figures: one query for the runs not known yet (``run_figures``). A finished run's
    are read once; a live run's again once ``LIVE_FIGURES_EVERY_S`` have passed (reading a long
    run's loss takes about a second: not at every poll of the list)."""
    path, now = str(store.path), time.monotonic()
    known: dict[int, RunFigures] = {}
    for row in rows:
        key = (path, row.id)
        if row.run.ended is not None and key in _finished_figures:
            known[row.id] = _finished_figures[key]
        elif row.run.ended is None and key in _live_figures and now - _live_figures[key][0] < LIVE_FIGURES_EVERY_S:
            known[row.id] = _live_figures[key][1]
    fresh = run_figures(store, [row.id for row in rows if row.id not in known])
    for row in rows:
        if row.id in known:
            continue
        figures = fresh.get(row.id, RunFigures())
        if row.run.ended is not None:
            _finished_figures[(path, row.id)] = figures
            _live_figures.pop((path, row.id), None)
        else:
            _live_figures[(path, row.id)] = (now, figures)
    return {**fresh, **known}


def _spec_table(text: str | None) -> dict[str, Any]:
    """A stored spec (TOML text) as the profile table the run was launched with; empty when there
    is none or it cannot be read (a run is still shown without it)."""
    if not text:
        return {}
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # Python 3.10
        import tomli as tomllib
    try:
        return tomllib.loads(text)
    except (ValueError, TypeError):
        return {}


@dataclass
class StoredHistory:
    """A live run's history up to where its live updates begin, read from the store in the GUI's
    own process (``Subscribe.from_store``): bounded as the hub's replay was.

    Attaching at 1,024 ranks, the hub's replay took 30-80 s: its reads wait for the GIL of a hub
    busy with ingest, and the updates queued behind it overflowed. The same window read here
    takes a few seconds, and the live updates join it exactly (``HistoryEnd.stored_through``)."""

    metrics: list[MetricRecord]
    gpu_samples: list[GpuSample]
    process_samples: list[ProcessSample]
    logs: list[LogLine]
    events: list[Event]
    decimated: bool
    """The older metrics came thinned per series (``runner.store.run_window``)."""
    left_out: dict[str, int]
    """Rows of each table not read (``HistoryEnd.left_out``)."""


class StoreReads:
    """The reads of the run store the GUI makes, each a function of a read-only ``RunStore`` that
    the store reader runs on its thread (``store_reader().read(StoreReads.runs, ...)``), except
    ``run_now`` and ``set_run_notes``, which open the store themselves."""

    @staticmethod
    def with_liveness(run: StoredRun) -> ListedRun:
        """The store's ``runs`` row with whether it is live and the status a person sees (``lost`` for
        a runner that died without recording an end): what the runs list shows."""
        return ListedRun(run=run, live=is_live(run), effective_status=effective_status(run) if run.status else "")

    @staticmethod
    def run_now(run_id: int) -> ListedRun:
        """Run ``run_id``'s row with its liveness (see ``with_liveness``), read on this thread.

        Raises:
            RunNotFound: no such run, or no store yet.
            OSError: the store cannot be read (SQLite's own error is its cause).
        """
        try:
            with RunStore(readonly=True) as store:
                return StoreReads.with_liveness(store.stored_run(run_id))
        except sqlite3.Error as error:
            raise OSError(f"the run store cannot be read: {error}") from error

    @staticmethod
    def runs(store: RunStore, limit: int) -> list[ListedRun]:
        """The newest ``limit`` runs, each with its liveness and its figures (``runner.store.run_figures``)."""
        rows = [StoreReads.with_liveness(run) for run in store.runs(limit=limit)]
        stalled = store.stalled_runs([row.id for row in rows if row.live])
        figures = _figures(store, rows)
        # a live run with a stalled rank is hung, as its header and `runs list` say
        return [dataclasses.replace(row, figures=figures.get(row.id, RunFigures()),
                                    effective_status=shown_status(row.effective_status,
                                                                  ["stalled"] if row.id in stalled else []) or "")
                for row in rows]

    @staticmethod
    def set_run_notes(run_id: int, tags: list[str] | None, notes: str | None) -> ListedRun:
        """Write run ``run_id``'s tags and notes (a writable store, opened for this write only: the
        GUI's one write), and return its row as now stored.

        Raises:
            RunNotFound: no such run, or no store yet.
            OSError: the store cannot be written (SQLite's own error is its cause).
        """
        try:
            with RunStore() as store:
                store.resolve_run_id(run_id)
                store.set_run_notes(run_id, tags=tags, notes=notes)
                return StoreReads.with_liveness(store.stored_run(run_id))
        except sqlite3.Error as error:
            raise OSError(f"the run store cannot be written: {error}") from error

    @staticmethod
    def run_records(store: RunStore, run_id: int, log_limit: int) -> RunRecords:
        """Everything recorded of run ``run_id`` (the last ``log_limit`` log lines)."""
        run = store.stored_run(run_id)
        return RunRecords(
            run=run, spec_toml=run.spec_toml or None, spec=_spec_table(run.spec_toml),
            ranks=tuple(store.ranks(run_id)), nodes=tuple(store.stored_nodes(run_id)),
            window=read_run_window(store, run_id), logs=store.log_lines(run_id, limit=log_limit),
            log_total=store.count("logs", run_id),
            events=tuple(store.stored_events(run_id)),
            rank_results=StoreReads.rank_results(store, run_id) if run.ended is not None else {})

    @staticmethod
    def chart_records(store: RunStore, run_id: int) -> RunRecords:
        """What run ``run_id``'s charts are drawn from (its metrics and samples; no logs, events or
        per-rank figures): the runs overlay reads this of each run it compares."""
        run = store.stored_run(run_id)
        return RunRecords(run=run, spec_toml=run.spec_toml or None, spec=_spec_table(run.spec_toml),
                          ranks=tuple(store.ranks(run_id)), nodes=(),
                          window=read_run_window(store, run_id), logs=[], log_total=0, events=(),
                          rank_results={})

    @staticmethod
    def stored_history(store: RunStore, run_id: int, created: float | None,
                       through: dict[str, int]) -> StoredHistory | None:
        """Run ``run_id``'s history through the rows ``through`` (a key per table), bounded as a
        replay (``ReplayBudget``); None when the store's run ``run_id`` is not the run the hub
        publishes (its ``created`` differs: the hub writes another store), so the caller asks the
        hub to replay it."""
        if store.stored_run(run_id).created != created:
            return None
        budget = ReplayBudget()
        window = read_run_window(store, run_id, budget, through)
        metrics = [record for chunk in window.metric_chunks for record in chunk]
        left_out = dict(window.left_out)
        recent = {}
        for table in ("logs", "events"):
            recent[table], skipped = read_recent(store, table, run_id, through.get(table, 0), budget.keep[table])
            if skipped:
                left_out[table] = skipped
        return StoredHistory(metrics, window.gpu_samples, window.process_samples, recent["logs"],
                             recent["events"], window.decimated, left_out)

    @staticmethod
    def rank_results(store: RunStore, run_id: int) -> dict[int, RankStats]:
        """Each rank's figures over the whole run, by rank: ``steps``, ``median_step_time``,
        ``data_wait_share``, ``comm_wait_share``, ``samples_per_s``... (``runner.store.rank_stats``:
        what ``rankwatch show`` and the end of a plain run print)."""
        stats, _logged = run_statistics(store, run_id)
        return {entry.rank: entry for entry in stats}

    @staticmethod
    def export_run(store: RunStore, run_id: int, folder: Path, log_limit: int) -> RunRecords:
        """Write one CSV per store table of run ``run_id`` into ``folder``; then its records (for the
        charts' picture)."""
        store.export_csv(run_id, folder)
        return StoreReads.run_records(store, run_id, log_limit)
