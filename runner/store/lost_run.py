"""Recording a run whose runner died without recording its end (SIGKILL, the OOM killer, a
hard crash): what the run's watchdog (``runner.launch.sentinel``) writes once the job is down.

The row then says the run was lost, when the runner died, how the job was ended, and
what the store holds of it, checked by counting: the metric records and log lines
stored per rank, the time of the newest one, and per rank what the store itself shows
was lost (the worker's own count of records it sent, from its last stored heartbeat,
against the records stored from it; the records its worker dropped), in the ``losses``
shape a clean end writes (``rankwatch.describe_losses`` words it). What
reached the runner after its last store commit (its last batch: up to 50 ms, or 0.5 s
of metrics in a run nobody watched live, ``runner.hub.freshness``) is not in the store and cannot be counted from it: the
summary says so rather than claiming nothing was lost.

Standard library only: the watchdog starts in milliseconds and runs this after the
runner is gone.
"""

from __future__ import annotations

import json
import sqlite3
import time
from typing import TypedDict

from runner.state import Outcome

BUSY_TIMEOUT_SECONDS = 10.0
UNFINISHED_RANK_STATES = ("waiting", "running", "stalled")
WORKER_SOURCES = ("auto", "log")
"""Metric sources a worker sends (``parsed`` records are read from output by the runner)."""
NOT_STORED = ("records that reached the runner after its last store commit (its last batch: the hub commits "
              "every few tens of milliseconds) were not stored and cannot be counted")


class StoredCounts(TypedDict):
    metrics: int
    logs: int


class LostRunner(TypedDict):
    """The summary's ``runner_lost``: how the runner died and what the store holds of the run
    (``runner.diagnosis.summary.LostRunner`` reads it)."""

    runner_pid: int | None
    died: float
    processes_killed: int
    stored: StoredCounts
    newest_record_t: float | None
    not_stored: str


class RankLoss(TypedDict):
    """One entry of the summary's ``losses`` (``runner.rank_failure.RankLosses`` reads it)."""

    rank: int
    dropped: int
    rejected: int
    not_received: int


class _LostSummary(TypedDict):
    outcome: str
    headline: str
    runner_lost: LostRunner


class LostSummary(_LostSummary, total=False):
    """What the watchdog writes into the run's summary (over what the runner had concluded)."""

    losses: list[RankLoss]


def record_lost_run(store_path: str, run_id: int, *, died: float, processes_killed: int) -> bool:
    """Mark run ``run_id`` lost (if it has no end yet) with the death time ``died`` and a
    summary of how; its ranks that had not finished become ``lost``. Returns whether the
    row was changed (False: the run had an end already).

    Raises:
        StoreError (``sqlite3.Error``): the store cannot be opened or written (locked beyond the busy
            timeout, disk full, read-only).
    """
    connection = sqlite3.connect(store_path, timeout=BUSY_TIMEOUT_SECONDS, isolation_level=None)
    try:
        connection.execute("BEGIN IMMEDIATE")
        try:
            row = connection.execute("SELECT runner_pid, ended, summary FROM runs WHERE id = ?", (run_id,)).fetchone()
            if row is None or row[1] is not None:
                connection.execute("ROLLBACK")
                return False
            summary = {**_earlier_summary(row[2]),
                       **_summary(connection, run_id, runner_pid=row[0], died=died, processes_killed=processes_killed)}
            connection.execute("UPDATE runs SET status = 'lost', ended = ?, summary = ? WHERE id = ?",
                               (died, json.dumps(summary), run_id))
            marks = ",".join("?" * len(UNFINISHED_RANK_STATES))
            connection.execute(f"UPDATE ranks SET state = 'lost' WHERE run_id = ? AND state IN ({marks})",
                               (run_id, *UNFINISHED_RANK_STATES))
            connection.execute("COMMIT")
        except BaseException:
            if connection.in_transaction:
                connection.execute("ROLLBACK")
            raise
    finally:
        connection.close()
    return True


def _earlier_summary(text: str | None) -> dict[str, object]:
    """What the runner had concluded before it died (a triage written while stopping), kept."""
    try:
        earlier = json.loads(text) if text else {}
    except ValueError:
        return {}
    return earlier if isinstance(earlier, dict) else {}


def _summary(connection: sqlite3.Connection, run_id: int, *, runner_pid: int | None, died: float,
             processes_killed: int) -> LostSummary:
    marks = ",".join("?" * len(WORKER_SOURCES))
    from_workers = dict(connection.execute(
        f"SELECT rank, SUM(COALESCE(n, 1)) FROM metrics WHERE run_id = ? AND source IN ({marks}) GROUP BY rank",
        (run_id, *WORKER_SOURCES)).fetchall())
    metrics, newest_metric = connection.execute(
        "SELECT COALESCE(SUM(COALESCE(n, 1)), 0), MAX(t) FROM metrics WHERE run_id = ?", (run_id,)).fetchone()
    logs, newest_log = connection.execute("SELECT COUNT(*), MAX(t) FROM logs WHERE run_id = ?", (run_id,)).fetchone()
    losses: list[RankLoss] = []
    for rank, sent, dropped, rejected in connection.execute(
            "SELECT rank, sent, dropped, rejected FROM ranks WHERE run_id = ? ORDER BY rank", (run_id,)):
        stored = from_workers.get(rank, 0) + (rejected or 0)
        not_received = max(0, sent - stored) if sent is not None else 0
        if dropped or rejected or not_received:
            losses.append({"rank": rank, "dropped": dropped or 0, "rejected": rejected or 0,
                           "not_received": not_received})
    newest = max((t for t in (newest_metric, newest_log) if t is not None), default=None)
    who = f"the runner (pid {runner_pid})" if runner_pid else "the runner"
    killed = f"; {processes_killed} process(es) needed SIGKILL" if processes_killed else ""
    summary: LostSummary = {
        "outcome": Outcome.LOST.value,
        "headline": (f"{who} died at {time.strftime('%H:%M:%S', time.localtime(died))} without recording the end "
                     f"(killed, e.g. by SIGKILL or the OOM killer, or crashed); its watchdog stopped the job{killed}"),
        "runner_lost": {"runner_pid": runner_pid, "died": died, "processes_killed": processes_killed,
                        "stored": {"metrics": metrics, "logs": logs}, "newest_record_t": newest,
                        "not_stored": NOT_STORED},
    }
    if losses:
        summary["losses"] = losses
    return summary
