"""The run store: SQLite in WAL mode, the record of truth for every run.

``RunStore`` is one connection. The hub owns a writer store on its writer thread and
commits records in batches (one transaction per batch: tens of thousands of rows a
commit); readers (CLI, GUI, attach) open their own connections, which WAL lets run
alongside the writer. A ``sqlite3.Connection`` must not be shared between threads,
so every thread opens its own ``RunStore``.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runner import paths, privacy
from runner.store.schema import TABLES, migrate

BUSY_TIMEOUT_MS = 10_000


class RunNotFound(LookupError):
    """No run with that id (or no runs at all for ``last``)."""


@dataclass
class RecordBatch:
    """Rows for one write transaction. Tuples match the table columns after ``run_id``."""

    metrics: list[tuple] = field(default_factory=list)
    """(rank, step, t, name, value, source)"""
    logs: list[tuple] = field(default_factory=list)
    """(rank, node, stream, t, line)"""
    events: list[tuple] = field(default_factory=list)
    """(t, kind, rank, data_json)"""
    gpu_samples: list[tuple] = field(default_factory=list)
    """(t, gpu_index, utilization, memory_used, memory_total, power_watts, temperature_c, sm_clock_mhz)"""
    process_samples: list[tuple] = field(default_factory=list)
    """(t, rank, pid, cpu_percent, rss_bytes, threads)"""

    def __len__(self) -> int:
        return (len(self.metrics) + len(self.logs) + len(self.events)
                + len(self.gpu_samples) + len(self.process_samples))

    def extend(self, other: RecordBatch) -> None:
        self.metrics += other.metrics
        self.logs += other.logs
        self.events += other.events
        self.gpu_samples += other.gpu_samples
        self.process_samples += other.process_samples


def connect(path: Path | None = None, *, readonly: bool = False) -> sqlite3.Connection:
    """Open (and migrate) the store. Readers never create or migrate it."""
    path = Path(path) if path is not None else paths.store_path()
    if readonly:
        if not path.exists():
            raise RunNotFound(f"no run store yet at {path}; runs appear here once you `rankwatch run`")
        connection = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=BUSY_TIMEOUT_MS / 1000,
                                     check_same_thread=False)
    else:
        _prepare_private_file(path)
        connection = sqlite3.connect(path, timeout=BUSY_TIMEOUT_MS / 1000, check_same_thread=False)
        connection.execute("PRAGMA journal_mode=WAL")
        connection.execute("PRAGMA synchronous=NORMAL")
        connection.execute("PRAGMA foreign_keys=ON")
        migrate(connection)
    connection.row_factory = sqlite3.Row
    connection.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
    return connection


def _prepare_private_file(path: Path) -> None:
    """Create the store 0600 in a 0700 folder before SQLite opens it (an empty file is an empty
    database). SQLite gives its ``-wal`` and ``-shm`` files the database file's mode, so they
    are private from the start too; files an older version left readable are tightened.

    Raises:
        OSError: the folder or the file cannot be created (read-only file system...).
    """
    if path.parent == paths.data_dir():
        paths.private_data_dir()
    else:
        privacy.make_private_dir(path.parent)
    if not path.exists():
        # O_EXCL: only a file nobody has open yet. Closing a descriptor of a database that a
        # connection of this process has open would drop that connection's POSIX locks.
        with contextlib.suppress(FileExistsError):
            os.close(privacy.create_private_file(path, os.O_WRONLY | os.O_EXCL))
    for suffix in ("-wal", "-shm", "-journal", ""):
        privacy.tighten(f"{path}{suffix}")


class RunStore:
    def __init__(self, path: Path | None = None, *, readonly: bool = False):
        self.path = Path(path) if path is not None else paths.store_path()
        self.connection = connect(self.path, readonly=readonly)

    def close(self) -> None:
        self.connection.close()

    def __enter__(self) -> RunStore:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ---- writing -------------------------------------------------------------------

    def create_run(self, *, run_key: str, profile: str | None, spec_toml: str, command: str | None,
                   host: str, workdir: str | None, runner_pid: int, socket: str | None,
                   world_size: int | None, status: str) -> int:
        with self.connection:
            cursor = self.connection.execute(
                "INSERT INTO runs (run_key, profile, spec_toml, command, host, workdir, created, status,"
                " runner_pid, socket, world_size) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                (run_key, profile, spec_toml, command, host, workdir, time.time(), status, runner_pid,
                 socket, world_size))
        return int(cursor.lastrowid)

    RUN_COLUMNS = frozenset({"started", "ended", "status", "exit_code", "socket", "summary", "command", "world_size"})

    def update_run(self, run_id: int, **values: Any) -> None:
        unknown = set(values) - self.RUN_COLUMNS
        if unknown:
            raise ValueError(f"not run columns: {sorted(unknown)}")
        if "summary" in values and not isinstance(values["summary"], (str, type(None))):
            values["summary"] = json.dumps(values["summary"])
        assignments = ", ".join(f"{k} = ?" for k in values)
        with self.connection:
            self.connection.execute(f"UPDATE runs SET {assignments} WHERE id = ?", (*values.values(), run_id))

    RANK_COLUMNS = ("local_rank", "node_rank", "host", "pid", "world_size", "python", "torch",
                    "gpu_index", "state", "exit_code", "first_seen", "last_seen")

    def upsert_rank(self, run_id: int, rank: int, **values: Any) -> None:
        unknown = set(values) - set(self.RANK_COLUMNS)
        if unknown:
            raise ValueError(f"not rank columns: {sorted(unknown)}")
        columns = ", ".join(["run_id", "rank", *values])
        marks = ", ".join("?" * (2 + len(values)))
        updates = ", ".join(f"{k} = excluded.{k}" for k in values) or "rank = rank"
        with self.connection:
            self.connection.execute(
                f"INSERT INTO ranks ({columns}) VALUES ({marks}) ON CONFLICT (run_id, rank) DO UPDATE SET {updates}",
                (run_id, rank, *values.values()))

    def upsert_node(self, run_id: int, node_rank: int, host: str, state: str, processes: int | None = None,
                    detail: str | None = None) -> None:
        with self.connection:
            self.connection.execute(
                "INSERT INTO nodes (run_id, node_rank, host, state, processes, changed, detail) VALUES (?,?,?,?,?,?,?)"
                " ON CONFLICT (run_id, node_rank) DO UPDATE SET host = excluded.host, state = excluded.state,"
                " processes = COALESCE(excluded.processes, processes), changed = excluded.changed,"
                " detail = excluded.detail",
                (run_id, node_rank, host, state, processes, time.time(), detail))

    def write_batch(self, run_id: int, batch: RecordBatch) -> None:
        """All rows of ``batch`` in one transaction (that is what makes 100k rows/s cheap)."""
        connection = self.connection
        with connection:
            if batch.metrics:
                connection.executemany(
                    "INSERT INTO metrics (run_id, rank, step, t, name, value, source) VALUES (?,?,?,?,?,?,?)",
                    [(run_id, *row) for row in batch.metrics])
            if batch.logs:
                connection.executemany(
                    "INSERT INTO logs (run_id, rank, node, stream, t, line) VALUES (?,?,?,?,?,?)",
                    [(run_id, *row) for row in batch.logs])
            if batch.events:
                connection.executemany(
                    "INSERT INTO events (run_id, t, kind, rank, data) VALUES (?,?,?,?,?)",
                    [(run_id, *row) for row in batch.events])
            if batch.gpu_samples:
                connection.executemany(
                    "INSERT INTO gpu_samples (run_id, t, gpu_index, utilization, memory_used, memory_total,"
                    " power_watts, temperature_c, sm_clock_mhz) VALUES (?,?,?,?,?,?,?,?,?)",
                    [(run_id, *row) for row in batch.gpu_samples])
            if batch.process_samples:
                connection.executemany(
                    "INSERT INTO process_samples (run_id, t, rank, pid, cpu_percent, rss_bytes, threads)"
                    " VALUES (?,?,?,?,?,?,?)",
                    [(run_id, *row) for row in batch.process_samples])

    # ---- reading -------------------------------------------------------------------

    def resolve_run_id(self, run: str | int) -> int:
        """``"last"``, ``"last-1"``, or an id.

        Raises:
            RunNotFound: no such run.
        """
        text = str(run).strip()
        if text.startswith("last"):
            back = 0
            if text != "last":
                try:
                    back = int(text[len("last"):].lstrip("-~"))
                except ValueError:
                    raise RunNotFound(f"{run!r} is not a run id; use a number, 'last' or 'last-N'") from None
            row = self.connection.execute("SELECT id FROM runs ORDER BY id DESC LIMIT 1 OFFSET ?", (back,)).fetchone()
            if row is None:
                raise RunNotFound("no runs recorded yet" if back == 0 else f"fewer than {back + 1} runs recorded")
            return int(row["id"])
        try:
            run_id = int(text)
        except ValueError:
            raise RunNotFound(f"{run!r} is not a run id; use a number from `rankwatch runs list`, or 'last'") from None
        if self.connection.execute("SELECT 1 FROM runs WHERE id = ?", (run_id,)).fetchone() is None:
            raise RunNotFound(f"no run {run_id}; see `rankwatch runs list`")
        return run_id

    def run(self, run_id: int) -> dict[str, Any]:
        row = self.connection.execute("SELECT * FROM runs WHERE id = ?", (run_id,)).fetchone()
        if row is None:
            raise RunNotFound(f"no run {run_id}")
        return _run_dict(row)

    def runs(self, limit: int = 50, live_only: bool = False) -> list[dict[str, Any]]:
        where = "WHERE ended IS NULL" if live_only else ""
        rows = self.connection.execute(f"SELECT * FROM runs {where} ORDER BY id DESC LIMIT ?", (limit,))
        return [_run_dict(row) for row in rows]

    def ranks(self, run_id: int) -> list[dict[str, Any]]:
        rows = self.connection.execute("SELECT * FROM ranks WHERE run_id = ? ORDER BY rank", (run_id,))
        return [dict(row) for row in rows]

    def nodes(self, run_id: int) -> list[dict[str, Any]]:
        rows = self.connection.execute("SELECT * FROM nodes WHERE run_id = ? ORDER BY node_rank", (run_id,))
        return [dict(row) for row in rows]

    def metric_names(self, run_id: int) -> list[str]:
        rows = self.connection.execute("SELECT DISTINCT name FROM metrics WHERE run_id = ? ORDER BY name", (run_id,))
        return [row[0] for row in rows]

    def metrics(self, run_id: int, name: str | None = None, rank: int | None = None,
                source: str | None = None) -> list[tuple]:
        """Rows ``(rank, step, t, name, value, source)`` in time order."""
        clauses, params = ["run_id = ?"], [run_id]
        for column, value in (("name", name), ("rank", rank), ("source", source)):
            if value is not None:
                clauses.append(f"{column} = ?")
                params.append(value)
        sql = f"SELECT rank, step, t, name, value, source FROM metrics WHERE {' AND '.join(clauses)} ORDER BY t, rowid"
        return [tuple(row) for row in self.connection.execute(sql, params)]

    def iter_metrics(self, run_id: int, chunk: int = 20_000) -> Iterator[list[tuple]]:
        """All metric rows of a run in insertion order, ``chunk`` at a time (history replay)."""
        last = 0
        while True:
            rows = self.connection.execute(
                "SELECT rowid, rank, step, t, name, value, source FROM metrics WHERE run_id = ? AND rowid > ?"
                " ORDER BY rowid LIMIT ?", (run_id, last, chunk)).fetchall()
            if not rows:
                return
            last = rows[-1][0]
            yield [tuple(row)[1:] for row in rows]

    def logs(self, run_id: int, rank: int | None = None, limit: int | None = None, after_id: int = 0,
             contains: str | None = None) -> list[dict[str, Any]]:
        clauses, params = ["run_id = ?", "id > ?"], [run_id, after_id]
        if rank is not None:
            clauses.append("rank = ?")
            params.append(rank)
        if contains:
            clauses.append("instr(line, ?) > 0")
            params.append(contains)
        sql = f"SELECT * FROM logs WHERE {' AND '.join(clauses)} ORDER BY id"
        if limit is not None:
            sql = f"SELECT * FROM ({sql.replace('ORDER BY id', 'ORDER BY id DESC')} LIMIT {int(limit)}) ORDER BY id"
        return [dict(row) for row in self.connection.execute(sql, params)]

    def events(self, run_id: int, kind: str | None = None) -> list[dict[str, Any]]:
        sql, params = "SELECT * FROM events WHERE run_id = ?", [run_id]
        if kind is not None:
            sql += " AND kind = ?"
            params.append(kind)
        result = []
        for row in self.connection.execute(sql + " ORDER BY id", params):
            item = dict(row)
            item["data"] = json.loads(item["data"]) if item["data"] else {}
            result.append(item)
        return result

    def gpu_samples(self, run_id: int) -> list[tuple]:
        return [tuple(r) for r in self.connection.execute(
            "SELECT t, gpu_index, utilization, memory_used, memory_total, power_watts, temperature_c, sm_clock_mhz"
            " FROM gpu_samples WHERE run_id = ? ORDER BY t", (run_id,))]

    def process_samples(self, run_id: int) -> list[tuple]:
        return [tuple(r) for r in self.connection.execute(
            "SELECT t, rank, pid, cpu_percent, rss_bytes, threads FROM process_samples WHERE run_id = ? ORDER BY t",
            (run_id,))]

    def count(self, table: str, run_id: int) -> int:
        if table not in TABLES:
            raise ValueError(table)
        column = "id" if table == "runs" else "run_id"
        return int(self.connection.execute(f"SELECT COUNT(*) FROM {table} WHERE {column} = ?", (run_id,)).fetchone()[0])

    def export_csv(self, run_id: int, folder: Path) -> list[Path]:
        """One CSV per table, rows of this run only. Returns the files written."""
        import csv

        folder.mkdir(parents=True, exist_ok=True)
        written = []
        for table in TABLES:
            column = "id" if table == "runs" else "run_id"
            cursor = self.connection.execute(f"SELECT * FROM {table} WHERE {column} = ?", (run_id,))
            target = folder / f"{table}.csv"
            with target.open("w", newline="", encoding="utf-8") as out:
                writer = csv.writer(out)
                writer.writerow([d[0] for d in cursor.description])
                writer.writerows(cursor)
            written.append(target)
        return written


def _run_dict(row: sqlite3.Row) -> dict[str, Any]:
    item = dict(row)
    item["summary"] = json.loads(item["summary"]) if item.get("summary") else None
    return item
