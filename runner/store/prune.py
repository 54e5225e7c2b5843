"""Deleting old runs from the store: what ``rankwatch runs prune`` chooses, deletes and frees.

A store keeps every run until the user says otherwise; a team's workstation after months of
jobs holds gigabytes of runs nobody opens. Pruning picks runs by age (ended before a moment)
and by count (all but the newest N), never a live run -- its runner still writes -- and a run
whose runner was lost counts by when it was created. Deleting removes every row the run owns;
``VACUUM`` then gives the space back to the file system (SQLite keeps freed pages otherwise).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from runner.rows import StoredRun
from runner.store.liveness import runner_alive
from runner.store.schema import DERIVED_TABLES, TABLES
from runner.store.store import RunStore


@dataclass(frozen=True)
class PruneChoice:
    """The runs a prune would delete, and the live ones it leaves whatever the rule says."""

    run_ids: tuple[int, ...]
    kept_live: tuple[int, ...]


def choose_runs(store: RunStore, *, ended_before: float | None = None, keep: int | None = None) -> PruneChoice:
    """Runs that ended before ``ended_before`` (seconds since 1970), and runs beyond the newest
    ``keep``; either rule alone, or both (a run goes when either picks it). Live runs never go."""
    if ended_before is None and keep is None:
        raise ValueError("choose by age, by count, or both")
    rows = store.connection.execute("SELECT * FROM runs ORDER BY id DESC").fetchall()
    chosen, kept_live = [], []
    for index, row in enumerate(rows):
        run = StoredRun.from_wire(dict(row))
        when = run.ended or run.created or 0.0
        picked = (ended_before is not None and when < ended_before) or (keep is not None and index >= keep)
        if not picked:
            continue
        if runner_alive(run):
            kept_live.append(int(row["id"]))
        else:
            chosen.append(int(row["id"]))
    return PruneChoice(tuple(sorted(chosen)), tuple(sorted(kept_live)))


def record_count(store: RunStore, run_ids: tuple[int, ...]) -> int:
    """Rows the runs hold in every table (what deleting them removes)."""
    if not run_ids:
        return 0
    marks = ", ".join("?" for _ in run_ids)
    total = 0
    for table in TABLES:
        column = "id" if table == "runs" else "run_id"
        total += store.connection.execute(f"SELECT COUNT(*) FROM {table} WHERE {column} IN ({marks})",
                                          run_ids).fetchone()[0]
    return total


def delete_runs(store: RunStore, run_ids: tuple[int, ...], *, vacuum: bool = True) -> None:
    """Delete the runs and every row they own in one transaction; then ``VACUUM`` (optional:
    it rewrites the whole file, minutes for a store of many gigabytes)."""
    if not run_ids:
        return
    marks = ", ".join("?" for _ in run_ids)
    with store.connection:
        for table in (*DERIVED_TABLES, *TABLES):
            column = "id" if table == "runs" else "run_id"
            store.connection.execute(f"DELETE FROM {table} WHERE {column} IN ({marks})", run_ids)
    if vacuum:
        store.connection.execute("VACUUM")


def store_bytes(path: Path) -> int:
    """The store's size on disk, with its write-ahead log."""
    return sum(os.path.getsize(part) for part in (path, Path(f"{path}-wal")) if part.exists())


def seconds_ago(seconds: float) -> float:
    return time.time() - seconds
