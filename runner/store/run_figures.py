"""Each run's headline figures for the runs list, for many runs in one query.

The runs list compares runs at a glance, as W&B's runs table does: the final and the best
loss, the steps, the throughput. These are read for every listed run at once (one SQL
statement over the loss and throughput records of those runs, through the
``metrics_by_series`` index), never by reading each run whole.

* ``final_loss``: the mean over ranks of the loss at the run's newest step;
* ``best_loss``: the lowest of those per-step means (what the loss overlay draws);
  each rank's loss comes from its most deliberate source (measured, then ``rankwatch.log``,
  then parsed from printed lines), as the live table and ``runner.store.rank_stats`` do;
* ``steps``: optimizer steps measured (the newest measured step + 1); without zero-code
  instrumentation the newest step the loss was logged at + 1;
* ``samples_per_s``: the job's throughput: the sum over ranks of each rank's total samples
  over its total step time (``rank_stats``' per-rank figure, added up).

A figure not measured is ``None`` (shown "–"), never 0. An ended run's figures are read from
what its hub kept (``rank_stats.keep_run_statistics``, the ``run_statistics`` table): one row,
where the query reads every loss record of the run (2.6 s at 1,024 ranks for 20 s, 66 s after
ten minutes). A live run's are what its hub tallied lately (``live_statistics``).
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TypedDict

from rankwatch import protocol
from runner.rows import StoredRun
from runner.store.kept_json import kept_float, kept_int, kept_object, loaded_json
from runner.store.liveness import runner_alive

_LEVEL = (f"CASE source WHEN '{protocol.SOURCE_AUTO}' THEN 0 WHEN '{protocol.SOURCE_LOG}' THEN 1"
          f" WHEN '{protocol.SOURCE_PARSED}' THEN 2 ELSE 9 END")

_SQL = f"""
WITH loss AS (
    SELECT run_id, rank, step, value, {_LEVEL} AS level FROM metrics
    WHERE run_id IN ({{marks}}) AND name = ? AND step IS NOT NULL AND value IS NOT NULL),
chosen AS (SELECT run_id, rank, MIN(level) AS level FROM loss GROUP BY run_id, rank),
per_step AS (
    SELECT loss.run_id, loss.step, AVG(loss.value) AS mean FROM loss
    JOIN chosen ON chosen.run_id = loss.run_id AND chosen.rank = loss.rank AND chosen.level = loss.level
    GROUP BY loss.run_id, loss.step),
best AS (SELECT run_id, MIN(mean) AS best_loss FROM per_step GROUP BY run_id),
final AS (SELECT run_id, mean AS final_loss, MAX(step) AS last_step FROM per_step GROUP BY run_id),
measured AS (
    SELECT run_id, MAX(step) AS last_step FROM metrics
    WHERE run_id IN ({{marks}}) AND name = ? AND source = ? AND step IS NOT NULL GROUP BY run_id),
rates AS (
    SELECT rate.run_id, rate.rank, SUM(rate.value * time.value * COALESCE(time.n, 1)) AS samples,
           SUM(time.value * COALESCE(time.n, 1)) AS seconds
    FROM metrics AS rate JOIN metrics AS time
      ON time.run_id = rate.run_id AND time.name = ? AND time.rank = rate.rank AND time.t = rate.t
         AND time.step = rate.step AND time.source = rate.source
    WHERE rate.run_id IN ({{marks}}) AND rate.name = ? AND rate.source = ? AND rate.value IS NOT NULL
      AND time.value IS NOT NULL
    GROUP BY rate.run_id, rate.rank),
throughput AS (
    SELECT run_id, SUM(samples / seconds) AS samples_per_s FROM rates WHERE seconds > 0 GROUP BY run_id),
listed AS (SELECT run_id FROM final UNION SELECT run_id FROM measured UNION SELECT run_id FROM throughput)
SELECT listed.run_id, final.final_loss, best.best_loss, measured.last_step, final.last_step,
       throughput.samples_per_s
FROM listed
LEFT JOIN final ON final.run_id = listed.run_id
LEFT JOIN best ON best.run_id = listed.run_id
LEFT JOIN measured ON measured.run_id = listed.run_id
LEFT JOIN throughput ON throughput.run_id = listed.run_id
"""


@dataclass(frozen=True)
class RunFigures:
    """One run's headline figures (see the module); ``None`` where not measured."""

    final_loss: float | None = None
    best_loss: float | None = None
    steps: int | None = None
    samples_per_s: float | None = None

    def to_json(self) -> RunFiguresJson:
        return {"final_loss": self.final_loss, "best_loss": self.best_loss, "steps": self.steps,
                "samples_per_s": self.samples_per_s}

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> RunFigures:
        """As ``to_json`` wrote it (kept in the store); a value of the wrong type reads as None."""
        return cls(final_loss=kept_float(data.get("final_loss")), best_loss=kept_float(data.get("best_loss")),
                   steps=kept_int(data.get("steps")), samples_per_s=kept_float(data.get("samples_per_s")))


class RunFiguresJson(TypedDict):
    """``RunFigures`` as the store keeps them."""

    final_loss: float | None
    best_loss: float | None
    steps: int | None
    samples_per_s: float | None


KEPT_VERSION = 1
"""The version of what ``run_figures`` and ``rank_stats.run_statistics`` compute, kept with an
ended run's figures: raise it when a figure's definition changes, and the figures kept by the
older code are computed again rather than read."""
LIVE_STATISTICS_SECONDS = 30.0
"""How often a live run's hub writes what it has tallied (``rank_stats.keep_live_statistics``)."""
LIVE_STALE_SECONDS = 3 * LIVE_STATISTICS_SECONDS
"""A live run's tally older than this is not read: its runner is gone or stuck, and records it
stored after the tally would be missing (they are computed from the records instead)."""


def run_figures(store, run_ids: Sequence[int]) -> dict[int, RunFigures]:
    """The figures of each of ``run_ids`` that recorded any (the others are left out): kept
    ones where the run's hub kept them, the others computed.

    Raises:
        runner.store.schema.StoreError: the store cannot be read.
    """
    kept = _kept_figures(store, run_ids)
    kept.update(_live_figures(store, [run_id for run_id in run_ids if run_id not in kept]))
    computed = computed_run_figures(store, [run_id for run_id in run_ids if run_id not in kept])
    return {**computed, **{run_id: figures for run_id, figures in kept.items() if figures is not None}}


def _kept_figures(store, run_ids: Sequence[int]) -> dict[int, RunFigures | None]:
    """run id -> its kept figures; None for a run kept as having recorded none."""
    if not run_ids:
        return {}
    ids = [int(run_id) for run_id in run_ids]
    marks = ", ".join("?" * len(ids))
    try:
        rows = store.connection.execute(
            f"SELECT run_id, figures FROM run_statistics WHERE version = ? AND figures IS NOT NULL"
            f" AND run_id IN ({marks})", (KEPT_VERSION, *ids)).fetchall()
    except sqlite3.OperationalError:  # a store read-only at an older schema: no such table
        return {}
    return {int(run_id): _kept(text) for run_id, text in rows}


def _kept(text: str | None) -> RunFigures | None:
    """Figures as kept; None for a run kept as having recorded none (an empty object)."""
    data = kept_object(loaded_json(text))
    return RunFigures.from_json(data) if data else None


def _live_figures(store, run_ids: Sequence[int], now: float | None = None) -> dict[int, RunFigures | None]:
    """run id -> the figures its hub tallied, for runs whose runner is alive and wrote them lately."""
    if not run_ids:
        return {}
    ids = [int(run_id) for run_id in run_ids]
    marks = ", ".join("?" * len(ids))
    since = (time.time() if now is None else now) - LIVE_STALE_SECONDS
    try:
        rows = store.connection.execute(
            f"SELECT live.run_id, live.figures, runs.ended, runs.runner_pid, runs.runner_identity, runs.created"
            f" FROM live_statistics AS live JOIN runs ON runs.id = live.run_id"
            f" WHERE live.version = ? AND live.figures IS NOT NULL AND runs.ended IS NULL AND live.t >= ?"
            f" AND live.run_id IN ({marks})", (KEPT_VERSION, since, *ids)).fetchall()
    except sqlite3.OperationalError:  # a store read-only at an older schema: no such table
        return {}
    return {int(run_id): _kept(text) for run_id, text, ended, pid, identity, created in rows
            if runner_alive(StoredRun(ended=ended, runner_pid=pid, runner_identity=identity, created=created))}


def computed_run_figures(store, run_ids: Sequence[int]) -> dict[int, RunFigures]:
    """The figures of each of ``run_ids``, computed from their records."""
    if not run_ids:
        return {}
    ids = [int(run_id) for run_id in run_ids]
    marks = ", ".join("?" * len(ids))
    params = (*ids, protocol.LOSS, *ids, protocol.STEP_TIME, protocol.SOURCE_AUTO,
              protocol.STEP_TIME, *ids, protocol.SAMPLES_PER_SECOND, protocol.SOURCE_AUTO)
    figures = {}
    for run_id, final, best, measured_step, loss_step, rate in store.connection.execute(
            _SQL.format(marks=marks), params):
        last = measured_step if measured_step is not None else loss_step
        figures[int(run_id)] = RunFigures(final_loss=final, best_loss=best,
                                          steps=None if last is None else int(last) + 1, samples_per_s=rate)
    return figures
