"""The run store: SQLite in WAL mode, the record of truth for every run.

``RunStore`` is one connection. The hub owns a writer store on its writer thread and
commits records in batches (one transaction per batch: tens of thousands of rows a
commit); readers (CLI, GUI, attach) open their own connections, which WAL lets run
alongside the writer. A ``sqlite3.Connection`` must not be shared between threads,
so every thread opens its own ``RunStore``.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import sqlite3
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from rankwatch.protocol import (
    COMPUTE_TIME,
    CPU_WAIT,
    DATA_WAIT,
    LOSS,
    PHASE_CLOCK,
    PHASE_METRICS,
    SAMPLES_PER_SECOND,
    SKIPPED_STEP,
    SOURCE_AUTO,
    STEP_TIME,
    Event,
    GpuSample,
    LogLine,
    MetricRecord,
    MetricRow,
    ProcessSample,
    clock_name,
)
from runner import paths, privacy
from runner.rows import JsonObject, NodeInfo, StoredRank, StoredRun, wire_float, wire_int
from runner.store.bulk_insert import insert_rows
from runner.store.liveness import process_identity
from runner.store.rank_stats import RANK_SUMMARY_COLUMNS, rank_summary_rows, run_statistics
from runner.store.schema import TABLES, migrate

BUSY_TIMEOUT_MS = 10_000
RECORD_CLASSES: dict[str, type[tuple[Any, ...]]] = {
    "metrics": MetricRecord, "logs": LogLine, "gpu_samples": GpuSample, "process_samples": ProcessSample}
"""The contract's record for each record table (events are ``Event``)."""
STORE_FULL_CODES = frozenset({13, 10, 8, 14, 3})
"""SQLITE_FULL, SQLITE_IOERR, SQLITE_READONLY, SQLITE_CANTOPEN, SQLITE_PERM: the store cannot take rows."""
SQLITE_BUSY, SQLITE_LOCKED = 5, 6

ColumnValue = str | int | float | None
"""What a column of a row holds (SQLite's own types, but blobs: no column here holds one)."""
RunColumnValue = ColumnValue | JsonObject
"""A ``runs`` column as ``update_run`` takes it: the summary is a JSON object, stored as its text."""


class RunNotFound(LookupError):
    """No run with that id (or no runs at all for ``last``)."""


@dataclass
class RecordBatch:
    """Records for one write transaction, in the contract's shapes (``rankwatch.protocol``)."""

    metrics: list[MetricRow] = field(default_factory=list)
    """Plain rows or ``MetricRecord`` (the same tuple, named)."""
    logs: list[LogLine] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    gpu_samples: list[GpuSample] = field(default_factory=list)
    process_samples: list[ProcessSample] = field(default_factory=list)

    def __len__(self) -> int:
        return (len(self.metrics) + len(self.logs) + len(self.events)
                + len(self.gpu_samples) + len(self.process_samples))

    def extend(self, other: RecordBatch) -> None:
        self.metrics += other.metrics
        self.logs += other.logs
        self.events += other.events
        self.gpu_samples += other.gpu_samples
        self.process_samples += other.process_samples

    def halves(self) -> tuple[RecordBatch, RecordBatch]:
        """This batch cut in two of (nearly) equal row counts, to find the row a write refused."""
        tables = (self.metrics, self.logs, self.events, self.gpu_samples, self.process_samples)
        left = len(self) // 2
        first: list[list[Any]] = []
        second: list[list[Any]] = []
        for rows in tables:
            taken = min(left, len(rows))
            first.append(rows[:taken])
            second.append(rows[taken:])
            left -= taken
        return RecordBatch(*first), RecordBatch(*second)


def is_store_full(error: BaseException) -> bool:
    """Whether SQLite refused for want of room or of write access (not because of one row)."""
    if not isinstance(error, sqlite3.Error):
        return isinstance(error, OSError)
    code = getattr(error, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF in STORE_FULL_CODES
    text = str(error).lower()
    return any(word in text for word in ("disk is full", "disk i/o error", "readonly", "unable to open"))


def connect(path: Path | None = None, *, readonly: bool = False) -> sqlite3.Connection:
    """Open (and migrate) the store. Readers never create or migrate it.

    Raises:
        RunNotFound: ``readonly`` and there is no store yet (or one still being created).
        StoreVersionError: the store was written by a newer Rankwatch.
        sqlite3.Error, OSError: the store cannot be opened or created (see ``is_store_full``).
    """
    path = Path(path) if path is not None else paths.store_path()
    if readonly:
        if not path.exists():
            raise RunNotFound(f"no run store yet at {path}; runs appear here once you `rankwatch run`")
        connection = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=BUSY_TIMEOUT_MS / 1000,
                                     check_same_thread=False)
        versions: list[int] = []
        try:
            _retry_while_busy(lambda: versions.append(connection.execute("PRAGMA user_version").fetchone()[0]))
        except BaseException:
            connection.close()
            raise
        if versions[-1] == 0:  # created a moment ago, its schema not committed yet: no runs in it
            connection.close()
            raise RunNotFound(f"no runs recorded yet in {path}; runs appear here once you `rankwatch run`")
    else:
        _prepare_private_file(path)
        connection = sqlite3.connect(path, timeout=BUSY_TIMEOUT_MS / 1000, check_same_thread=False)
        try:
            _retry_while_busy(lambda: _set_up(connection))
        except BaseException:
            connection.close()
            raise
    connection.row_factory = sqlite3.Row
    connection.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
    return connection


def _set_up(connection: sqlite3.Connection) -> None:
    """WAL mode, then the schema (created or migrated). Safe to repeat after a busy refusal."""
    connection.execute("PRAGMA journal_mode=WAL")
    connection.execute("PRAGMA synchronous=NORMAL")
    connection.execute("PRAGMA foreign_keys=ON")
    migrate(connection)


def _retry_while_busy(action: Callable[[], None]) -> None:
    """Run ``action`` again while SQLite answers "database is locked", up to the busy timeout.

    The busy timeout alone does not cover opening: switching a fresh store to WAL, or
    another process recovering the WAL, is refused at once (SQLITE_BUSY without the busy
    handler) when several processes open a new store together.

    Raises:
        sqlite3.OperationalError: still locked after ``BUSY_TIMEOUT_MS``, or any other error.
    """
    deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
    pause = 0.005
    while True:
        try:
            action()
            return
        except sqlite3.OperationalError as error:
            if not _is_busy(error) or time.monotonic() + pause > deadline:
                raise
        time.sleep(pause)
        pause = min(pause * 2, 0.2)


def _is_busy(error: sqlite3.OperationalError) -> bool:
    code = getattr(error, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF in (SQLITE_BUSY, SQLITE_LOCKED)
    return "locked" in str(error).lower()


def _prepare_private_file(path: Path) -> None:
    """Create the store 0600 in a 0700 folder before SQLite opens it (an empty file is an empty
    database). SQLite gives its ``-wal`` and ``-shm`` files the database file's mode, so they
    are private from the start too; files an older version left readable are tightened.

    Raises:
        PermissionError: the store or one of its files belongs to another user (planted).
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
        problem = privacy.foreign_owner_problem(f"{path}{suffix}")
        if problem is not None:
            raise PermissionError(f"{problem}: another user could read the store; remove it")
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
        """A new run row; returns its id. The runner's identity is read here, while ``runner_pid``
        (the caller, or its parent) is surely the runner, to tell it from a later process given
        the same pid."""
        identity = process_identity(runner_pid)
        with self.connection:
            cursor = self.connection.execute(
                "INSERT INTO runs (run_key, profile, spec_toml, command, host, workdir, created, status,"
                " runner_pid, runner_identity, socket, world_size) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                (run_key, profile, spec_toml, command, host, workdir, time.time(), status, runner_pid,
                 identity, socket, world_size))
        assert cursor.lastrowid is not None
        return int(cursor.lastrowid)

    RUN_COLUMNS = frozenset({"started", "ended", "status", "exit_code", "socket", "summary", "command", "world_size"})

    def update_run(self, run_id: int, **values: RunColumnValue) -> None:
        unknown = set(values) - self.RUN_COLUMNS
        if unknown:
            raise ValueError(f"not run columns: {sorted(unknown)}")
        if "summary" in values and not isinstance(values["summary"], (str, type(None))):
            values["summary"] = json.dumps(values["summary"])
        assignments = ", ".join(f"{k} = ?" for k in values)
        with self.connection:
            self.connection.execute(f"UPDATE runs SET {assignments} WHERE id = ?", (*values.values(), run_id))

    def set_run_notes(self, run_id: int, *, tags: Iterable[str] | None = None, notes: str | None = None) -> None:
        """What a person says about run ``run_id``: its ``tags`` (stored as given by
        :func:`normalize_tags`) and its ``notes``; a value left ``None`` is kept as it is.

        Raises:
            RunNotFound: no such run.
            sqlite3.Error: the store cannot be written.
        """
        values: dict[str, str | None] = {}
        if tags is not None:
            words = normalize_tags(tags)
            values["tags"] = json.dumps(words) if words else None
        if notes is not None:
            values["notes"] = notes.strip() or None
        if not values:
            return
        assignments = ", ".join(f"{column} = ?" for column in values)
        with self.connection:
            cursor = self.connection.execute(f"UPDATE runs SET {assignments} WHERE id = ?", (*values.values(), run_id))
        if cursor.rowcount == 0:
            raise RunNotFound(f"no run {run_id}; see `rankwatch runs list`")

    RANK_COLUMNS = ("local_rank", "node_rank", "host", "pid", "world_size", "python", "torch",
                    "gpu_index", "state", "exit_code", "first_seen", "last_seen", "dropped", "rejected", "sent",
                    "gpu_mem_used_peak")

    def upsert_rank(self, run_id: int, rank: int, **values: ColumnValue) -> None:
        with self.connection:
            self._upsert_rank(run_id, rank, values)

    def _upsert_rank(self, run_id: int, rank: int, values: dict[str, ColumnValue]) -> None:
        self.connection.execute(_rank_upsert_statement(tuple(values)), (run_id, rank, *values.values()))

    def _upsert_ranks(self, run_id: int, rank_rows: list[tuple[int, dict[str, ColumnValue]]]) -> None:
        """Each run of consecutive rows with the same columns (a flush's changed rows all have the
        hub's) in one ``executemany``: at 1,024 ranks a flush upserts hundreds of rows, and one
        statement each cost the writer thread as much as the metric records themselves."""
        start = 0
        while start < len(rank_rows):
            columns = tuple(rank_rows[start][1])
            end = start + 1
            while end < len(rank_rows) and tuple(rank_rows[end][1]) == columns:
                end += 1
            self.connection.executemany(_rank_upsert_statement(columns),
                                        [(run_id, rank, *values.values()) for rank, values in rank_rows[start:end]])
            start = end

    def upsert_node(self, run_id: int, node_rank: int, host: str, state: str, processes: int | None = None,
                    detail: str | None = None) -> None:
        with self.connection:
            self.connection.execute(
                "INSERT INTO nodes (run_id, node_rank, host, state, processes, changed, detail) VALUES (?,?,?,?,?,?,?)"
                " ON CONFLICT (run_id, node_rank) DO UPDATE SET host = excluded.host, state = excluded.state,"
                " processes = COALESCE(excluded.processes, processes), changed = excluded.changed,"
                " detail = excluded.detail",
                (run_id, node_rank, host, state, processes, time.time(), detail))

    def write_batch(self, run_id: int, batch: RecordBatch,
                    rank_rows: list[tuple[int, dict[str, ColumnValue]]] | None = None) -> None:
        """All rows of ``batch`` (and ``rank_rows``: (rank, columns) upserts) in one transaction.

        One transaction is what makes 100k rows/s cheap, and hundreds of rows a statement
        (``runner.store.bulk_insert``) what keeps it so beside a busy event loop. The run id goes
        into the statement itself (an int), so each record is handed to SQLite as it is.

        Raises:
            sqlite3.Error: the transaction was rolled back (nothing of it is stored).
        """
        connection = self.connection
        run = int(run_id)
        with connection:
            if batch.metrics:
                insert_rows(connection, "INSERT INTO metrics (run_id, rank, t, step, name, value, source)",
                            f"({run},?,?,?,?,?,?)", batch.metrics)
            if batch.logs:
                insert_rows(connection, "INSERT INTO logs (run_id, rank, t, stream, line, node)",
                            f"({run},?,?,?,?,?)", batch.logs)
            if batch.events:
                insert_rows(connection, "INSERT INTO events (run_id, t, kind, rank, data)",
                            f"({run},?,?,?,?)", [event.to_row() for event in batch.events])
            if batch.gpu_samples:
                insert_rows(connection, "INSERT INTO gpu_samples (run_id, t, gpu_index, utilization, memory_used,"
                            " memory_total, power_watts, temperature_c, sm_clock_mhz)",
                            f"({run},?,?,?,?,?,?,?,?)", batch.gpu_samples)
            if batch.process_samples:
                insert_rows(connection, "INSERT INTO process_samples (run_id, t, rank, pid, cpu_percent, rss_bytes,"
                            " threads)", f"({run},?,?,?,?,?,?)", batch.process_samples)
            if rank_rows:
                self._upsert_ranks(run, rank_rows)

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

    def stored_run(self, run_id: int) -> StoredRun:
        """Run ``run_id``, typed.

        Raises:
            RunNotFound: no such run.
        """
        return StoredRun.from_wire(dict(self._run_row(run_id)))

    def _run_row(self, run_id: int) -> sqlite3.Row:
        row = self.connection.execute("SELECT * FROM runs WHERE id = ?", (run_id,)).fetchone()
        if row is None:
            raise RunNotFound(f"no run {run_id}")
        return row

    def runs(self, limit: int = 50, live_only: bool = False) -> list[StoredRun]:
        """The newest ``limit`` runs, newest first (only those without an end with ``live_only``)."""
        where = "WHERE ended IS NULL" if live_only else ""
        rows = self.connection.execute(f"SELECT * FROM runs {where} ORDER BY id DESC LIMIT ?", (limit,))
        return [StoredRun.from_wire(dict(row)) for row in rows]

    def stalled_runs(self, run_ids: list[int]) -> set[int]:
        """Which of ``run_ids`` have a rank the stall monitor marked ``stalled`` (as of its last commit)."""
        if not run_ids:
            return set()
        marks = ", ".join("?" for _ in run_ids)
        rows = self.connection.execute(
            f"SELECT DISTINCT run_id FROM ranks WHERE state = 'stalled' AND run_id IN ({marks})", run_ids)
        return {int(row[0]) for row in rows}

    def ranks(self, run_id: int) -> list[StoredRank]:
        """The run's ranks, by rank (``run_id`` kept in ``extra``)."""
        rows = self.connection.execute("SELECT * FROM ranks WHERE run_id = ? ORDER BY rank", (run_id,))
        return [StoredRank.from_wire(dict(row)) for row in rows]

    def nodes(self, run_id: int) -> list[JsonObject]:
        """The run's nodes as the hub sends them (its NODE objects: ``NodeInfo.to_wire``, as its live
        node updates), for the publisher's snapshot; every reader takes :meth:`stored_nodes`."""
        return [node.to_wire() for node in self.stored_nodes(run_id)]

    def stored_nodes(self, run_id: int) -> list[NodeInfo]:
        """The run's nodes, typed, by node rank (``run_id`` kept in ``extra``)."""
        return [NodeInfo.from_wire(dict(row)) for row in self._node_rows(run_id)]

    def _node_rows(self, run_id: int) -> sqlite3.Cursor:
        return self.connection.execute("SELECT * FROM nodes WHERE run_id = ? ORDER BY node_rank", (run_id,))

    def metric_names(self, run_id: int) -> list[str]:
        """The names of the run's metrics, sorted: one seek down ``metrics_by_series`` per name (a
        loose index scan). ``SELECT DISTINCT`` read every index entry of the run: 1.9 s for a
        1,024-rank run of ten minutes, at every `runs show`."""
        names: list[str] = []
        row = self.connection.execute("SELECT name FROM metrics WHERE run_id = ? ORDER BY name LIMIT 1",
                                      (run_id,)).fetchone()
        while row is not None:
            names.append(row[0])
            row = self.connection.execute(
                "SELECT name FROM metrics WHERE run_id = ? AND name > ? ORDER BY name LIMIT 1",
                (run_id, row[0])).fetchone()
        return names

    def metrics(self, run_id: int, name: str | None = None, rank: int | None = None,
                source: str | None = None) -> list[MetricRecord]:
        """Records ``(rank, t, step, name, value, source)`` in time order."""
        clauses, params = ["run_id = ?"], list[object]([run_id])
        filters: tuple[tuple[str, str | int | None], ...] = (("name", name), ("rank", rank), ("source", source))
        for column, value in filters:
            if value is not None:
                clauses.append(f"{column} = ?")
                params.append(value)
        sql = f"SELECT rank, t, step, name, value, source FROM metrics WHERE {' AND '.join(clauses)} ORDER BY t, rowid"
        new = tuple.__new__
        return [new(MetricRecord, row) for row in self.connection.execute(sql, params)]

    def iter_metrics(self, run_id: int, chunk: int = 20_000) -> Iterator[list[MetricRecord]]:
        """All metric records of a run in insertion order, ``chunk`` at a time."""
        after = 0
        while True:
            records, after = self.read_chunk("metrics", run_id, after, None, chunk)
            if not records:
                return
            yield records

    RECORD_TABLES: ClassVar[dict[str, tuple[str, str]]] = {
        "metrics": ("rowid", "rank, t, step, name, value, source"),
        "logs": ("id", "rank, t, stream, line, node"),
        "events": ("id", "t, kind, rank, data"),
        "gpu_samples": ("rowid", "t, gpu_index, utilization, memory_used, memory_total, power_watts,"
                                 " temperature_c, sm_clock_mhz"),
        "process_samples": ("rowid", "t, rank, pid, cpu_percent, rss_bytes, threads"),
    }
    """Record tables: the key rows are read in, and the record's columns in the contract's order."""

    def read_chunk(self, table: str, run_id: int, after: int, through: int | None,
                   limit: int) -> tuple[list[Any], int]:
        """Up to ``limit`` records of ``table`` with key in (``after``, ``through``], in key order,
        as the contract's values; and the last key read (``after`` when none)."""
        key, columns = self.RECORD_TABLES[table]
        bound = "" if through is None else f" AND {key} <= {int(through)}"
        # "+run_id": walk the rows in key order; an index on run_id would sort the whole run each time
        rows = self.connection.execute(
            f"SELECT {key}, {columns} FROM {table} WHERE +run_id = ? AND {key} > ?{bound} ORDER BY {key} LIMIT ?",
            (run_id, after, limit)).fetchall()
        if not rows:
            return [], after
        last = int(rows[-1][0])
        new = tuple.__new__
        if table == "events":
            return [Event.from_store(row[1], row[2], row[3], json.loads(row[4]) if row[4] else None)
                    for row in rows], last
        record_class = RECORD_CLASSES[table]
        return [new(record_class, tuple(row)[1:]) for row in rows], last

    def last_rowids(self, run_id: int) -> dict[str, int]:
        """The newest key of each record table (a history replay of ``run_id`` stops there: every
        row of the run committed so far is at or below it). Constant time: no scan of the run."""
        return {table: int(self.connection.execute(f"SELECT COALESCE(MAX({key}), 0) FROM {table}").fetchone()[0])
                for table, (key, _columns) in self.RECORD_TABLES.items()}

    def log_lines(self, run_id: int, rank: int | None = None, limit: int | None = None,
                  contains: str | None = None) -> list[LogLine]:
        """The run's printed lines in order, as the hub publishes them: only rank ``rank``'s, only the
        last ``limit``, only those containing ``contains``, when given (a malformed stored line is
        left out, as a published one is)."""
        lines = []
        for row in self._log_rows(run_id, rank, limit, contains):
            line = LogLine.from_wire((row["rank"], row["t"], row["stream"], row["line"], row["node"]))
            if line is not None:
                lines.append(line)
        return lines

    def _log_rows(self, run_id: int, rank: int | None, limit: int | None, contains: str | None) -> sqlite3.Cursor:
        clauses, params = ["run_id = ?"], list[object]([run_id])
        if rank is not None:
            clauses.append("rank = ?")
            params.append(rank)
        if contains:
            clauses.append("instr(line, ?) > 0")
            params.append(contains)
        sql = f"SELECT * FROM logs WHERE {' AND '.join(clauses)} ORDER BY id"
        if limit is not None:
            sql = f"SELECT * FROM ({sql.replace('ORDER BY id', 'ORDER BY id DESC')} LIMIT {int(limit)}) ORDER BY id"
        return self.connection.execute(sql, params)

    def stored_events(self, run_id: int, kind: str | None = None) -> list[Event]:
        """The run's events in order (only those of ``kind``, when given), as the hub publishes them:
        a kind from a newer Rankwatch is a warning that names it (``Event.from_store``), a rank or
        time of the wrong type is None / 0."""
        events = []
        for row in self._event_rows(run_id, kind):
            data = json.loads(row["data"]) if row["data"] else {}
            events.append(Event.from_store(wire_float(row["t"]) or 0.0, str(row["kind"]), wire_int(row["rank"]),
                                           data if isinstance(data, dict) else {}))
        return events

    def _event_rows(self, run_id: int, kind: str | None) -> sqlite3.Cursor:
        sql, params = "SELECT * FROM events WHERE run_id = ?", list[object]([run_id])
        if kind is not None:
            sql += " AND kind = ?"
            params.append(kind)
        return self.connection.execute(sql + " ORDER BY id", params)

    def gpu_samples(self, run_id: int) -> list[GpuSample]:
        return [tuple.__new__(GpuSample, row) for row in self.connection.execute(
            "SELECT t, gpu_index, utilization, memory_used, memory_total, power_watts, temperature_c, sm_clock_mhz"
            " FROM gpu_samples WHERE run_id = ? ORDER BY t", (run_id,))]

    def process_samples(self, run_id: int) -> list[ProcessSample]:
        return [tuple.__new__(ProcessSample, row) for row in self.connection.execute(
            "SELECT t, rank, pid, cpu_percent, rss_bytes, threads FROM process_samples WHERE run_id = ? ORDER BY t",
            (run_id,))]

    def count(self, table: str, run_id: int) -> int:
        if table not in TABLES:
            raise ValueError(table)
        column = "id" if table == "runs" else "run_id"
        return int(self.connection.execute(f"SELECT COUNT(*) FROM {table} WHERE {column} = ?", (run_id,)).fetchone()[0])

    def export_csv(self, run_id: int, folder: Path) -> list[Path]:
        """One CSV per table, rows of this run only; then ``steps.csv`` (``steps``) and
        ``rank_summary.csv`` (each rank's ``runner.store.rank_stats.RankStats``, what `runs show`
        gives). Returns the files written. A value not measured is an empty cell."""
        folder.mkdir(parents=True, exist_ok=True)
        written = []
        for table in TABLES:
            column = "id" if table == "runs" else "run_id"
            cursor = self.connection.execute(f"SELECT * FROM {table} WHERE {column} = ?", (run_id,))
            written.append(_write_csv(folder / f"{table}.csv", [d[0] for d in cursor.description], cursor))
        written.append(_write_csv(folder / "steps.csv", list(STEP_TABLE_COLUMNS), self.steps(run_id)))
        stats, _logged = run_statistics(self, run_id)
        written.append(_write_csv(folder / "rank_summary.csv", list(RANK_SUMMARY_COLUMNS), rank_summary_rows(stats)))
        return written

    def steps(self, run_id: int) -> Iterator[tuple[Any, ...]]:
        """Every measured step of the run, one row per rank and step in ``STEP_TABLE_COLUMNS`` order
        (rank, then time): the records the zero-code instrumentation made of it, side by side; None
        where a value was not measured. ``skipped_step`` is 1 or 0, ``phase_clock`` "gpu" or "cpu".

        Rows are keyed by rank, time and step, not rank and step: a rank restarted by torchrun
        counts its steps from 0 again, and each step's records share the time of its step row."""
        pivot = ", ".join(["MAX(CASE WHEN name = ? THEN value END)"] * len(STEP_METRICS))
        names = ", ".join("?" * len(STEP_METRICS))
        cursor = self.connection.execute(
            f"SELECT rank, step, t, {pivot} FROM metrics WHERE run_id = ? AND source = ? AND step IS NOT NULL"
            f" AND name IN ({names}) GROUP BY rank, t, step ORDER BY rank, t, step",
            (*STEP_METRICS, run_id, SOURCE_AUTO, *STEP_METRICS))
        skipped = 3 + STEP_METRICS.index(SKIPPED_STEP)
        clock = 3 + STEP_METRICS.index(PHASE_CLOCK)
        for row in cursor:
            values = list(row)
            values[skipped] = 1 if values[skipped] else 0
            values[clock] = clock_name(values[clock])
            yield tuple(values)


@functools.lru_cache(maxsize=64)
def _rank_upsert_statement(columns: tuple[str, ...]) -> str:
    """The upsert of a rank row's ``columns`` (built once per set of columns).

    Raises:
        ValueError: a name that is not a column of ``ranks``.
    """
    unknown = set(columns) - set(RunStore.RANK_COLUMNS)
    if unknown:
        raise ValueError(f"not rank columns: {sorted(unknown)}")
    names = ", ".join(["run_id", "rank", *columns])
    marks = ", ".join("?" * (2 + len(columns)))
    updates = ", ".join(f"{name} = excluded.{name}" for name in columns) or "rank = rank"
    return f"INSERT INTO ranks ({names}) VALUES ({marks}) ON CONFLICT (run_id, rank) DO UPDATE SET {updates}"


STEP_METRICS = (LOSS, STEP_TIME, DATA_WAIT, SAMPLES_PER_SECOND, CPU_WAIT, SKIPPED_STEP, PHASE_CLOCK, *PHASE_METRICS,
                COMPUTE_TIME)
"""The measured records of a step, as the columns of ``RunStore.steps`` (after rank, step, t)."""
STEP_TABLE_COLUMNS = ("rank", "step", "t", *STEP_METRICS)
"""The columns of an export's ``steps.csv``: a wide table, one row per rank and step."""


def _write_csv(target: Path, header: list[str], rows: Iterable[Iterable[Any]]) -> Path:
    import csv

    with target.open("w", newline="", encoding="utf-8") as out:
        writer = csv.writer(out)
        writer.writerow(header)
        writer.writerows(rows)
    return target


def normalize_tags(tags: Iterable[str]) -> list[str]:
    """Tags as stored: each stripped, commas split apart, empty ones and repeats left out, in
    the order given (``["lr 3e-4, baseline", "baseline"]`` -> ``["lr 3e-4", "baseline"]``)."""
    result: list[str] = []
    for tag in tags:
        for part in str(tag).split(","):
            word = part.strip()
            if word and word not in result:
                result.append(word)
    return result


def stored_rank_json(row: StoredRank) -> JsonObject:
    """The ``ranks`` row as the table holds it, column for column (what `runs show --json` gives of
    a rank before its figures): not the RANK row's wire, which has the live-only fields too."""
    return {**row.extra, "rank": row.rank, **{column: getattr(row, column) for column in RunStore.RANK_COLUMNS}}

