"""The run store's schema and its migrations.

The schema version is SQLite's ``user_version``. ``MIGRATIONS[n]`` brings a store
from version ``n`` to ``n + 1``; opening a store applies the missing ones, so an old
store is upgraded in place and a newer one (from a future Rankwatch) is refused rather
than damaged.

Several processes may open a fresh (or old) store at the same moment: two runners
started together, a runner and the GUI. The version is therefore read again inside a
``BEGIN IMMEDIATE`` transaction (SQLite's write lock, taken before anything is read),
and the missing migrations and the new version are committed in that same
transaction: the first process migrates, the others wait on the lock (the busy
timeout), then find the store current and change nothing.
"""

from __future__ import annotations

import sqlite3

MIGRATIONS: list[str] = [
    # 0 -> 1: the first schema.
    """
    CREATE TABLE runs (
        id          INTEGER PRIMARY KEY AUTOINCREMENT,
        job_key     TEXT NOT NULL UNIQUE,
        profile     TEXT,
        spec_toml   TEXT NOT NULL,
        command     TEXT,
        host        TEXT,
        workdir     TEXT,
        created     REAL NOT NULL,
        started     REAL,
        ended       REAL,
        status      TEXT NOT NULL,
        exit_code   INTEGER,
        runner_pid  INTEGER,
        socket      TEXT,
        world_size  INTEGER,
        summary     TEXT
    );
    CREATE TABLE ranks (
        run_id      INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
        rank        INTEGER NOT NULL,
        local_rank  INTEGER,
        node_rank   INTEGER,
        host        TEXT,
        pid         INTEGER,
        world_size  INTEGER,
        python      TEXT,
        torch       TEXT,
        gpu_index   INTEGER,
        state       TEXT NOT NULL DEFAULT 'waiting',
        exit_code   INTEGER,
        first_seen  REAL,
        last_seen   REAL,
        PRIMARY KEY (run_id, rank)
    );
    CREATE TABLE nodes (
        run_id      INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
        node_rank   INTEGER NOT NULL,
        host        TEXT NOT NULL,
        state       TEXT NOT NULL,
        processes   INTEGER,
        changed     REAL,
        detail      TEXT,
        PRIMARY KEY (run_id, node_rank)
    );
    CREATE TABLE metrics (
        run_id  INTEGER NOT NULL,
        rank    INTEGER NOT NULL,
        step    INTEGER,
        t       REAL NOT NULL,
        name    TEXT NOT NULL,
        value   REAL,
        source  TEXT NOT NULL
    );
    CREATE INDEX metrics_by_series ON metrics (run_id, name, rank, t);
    CREATE TABLE logs (
        id      INTEGER PRIMARY KEY AUTOINCREMENT,
        run_id  INTEGER NOT NULL,
        rank    INTEGER,
        node    TEXT,
        stream  TEXT NOT NULL,
        t       REAL NOT NULL,
        line    TEXT NOT NULL
    );
    CREATE INDEX logs_by_run ON logs (run_id, id);
    CREATE TABLE events (
        id      INTEGER PRIMARY KEY AUTOINCREMENT,
        run_id  INTEGER NOT NULL,
        t       REAL NOT NULL,
        kind    TEXT NOT NULL,
        rank    INTEGER,
        data    TEXT
    );
    CREATE INDEX events_by_run ON events (run_id, id);
    CREATE TABLE gpu_samples (
        run_id        INTEGER NOT NULL,
        t             REAL NOT NULL,
        gpu_index     INTEGER NOT NULL,
        utilization   REAL,
        memory_used   INTEGER,
        memory_total  INTEGER,
        power_watts   REAL,
        temperature_c REAL,
        sm_clock_mhz  REAL
    );
    CREATE INDEX gpu_samples_by_run ON gpu_samples (run_id, t);
    CREATE TABLE process_samples (
        run_id       INTEGER NOT NULL,
        t            REAL NOT NULL,
        rank         INTEGER NOT NULL,
        pid          INTEGER,
        cpu_percent  REAL,
        rss_bytes    INTEGER,
        threads      INTEGER
    );
    CREATE INDEX process_samples_by_run ON process_samples (run_id, t);
    """,
    # 1 -> 2: one word for a run ("job" and "run" named the same thing).
    """
    ALTER TABLE runs RENAME COLUMN job_key TO run_key;
    """,
    # 2 -> 3: what was lost on the way, per rank: records the worker could not send
    # (dropped), records the hub could not store (rejected), and the worker's own count
    # of metric items it sent (so "sent but not stored" can be told).
    """
    ALTER TABLE ranks ADD COLUMN dropped INTEGER;
    ALTER TABLE ranks ADD COLUMN rejected INTEGER;
    ALTER TABLE ranks ADD COLUMN sent INTEGER;
    """,
    # 3 -> 4: the runner process's identity (boot id and start time, see
    # runner.store.liveness.process_identity), so a pid the kernel gave to another process
    # after the runner died does not make a lost run look alive.
    """
    ALTER TABLE runs ADD COLUMN runner_identity TEXT;
    """,
    # 4 -> 5: the most GPU memory NVML saw each rank's process hold (its CUDA context and the
    # allocator's cache included) at any sample: the live row's current value is gone once the
    # run ends, and the GPU's own samples count every process on it.
    """
    ALTER TABLE ranks ADD COLUMN gpu_mem_used_peak INTEGER;
    """,
    # 5 -> 6: what a person says about a run, to find and compare it later (as W&B and
    # TensorBoard users tag runs): its tags (a JSON list of words) and free notes. Empty for
    # every run stored before.
    """
    ALTER TABLE runs ADD COLUMN tags TEXT;
    ALTER TABLE runs ADD COLUMN notes TEXT;
    """,
    # 6 -> 7: the metric pyramid (runner.store.pyramid). Old detail is kept as one point per
    # bucket: the metrics row holds the mean, ``n`` the records it stands for, ``low``/``high``
    # their range (all NULL for a record as it came). ``compactions`` remembers, per run,
    # level and series (metric name and rank), up to which time it is done.
    """
    ALTER TABLE metrics ADD COLUMN n INTEGER;
    ALTER TABLE metrics ADD COLUMN low REAL;
    ALTER TABLE metrics ADD COLUMN high REAL;
    CREATE TABLE compactions (
        run_id   INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
        level    INTEGER NOT NULL,
        name     TEXT NOT NULL,
        rank     INTEGER NOT NULL,
        through  REAL NOT NULL,
        PRIMARY KEY (run_id, level, name, rank)
    );
    """,
    # 7 -> 8: each ended run's per-rank statistics (``runner.store.rank_stats``) and its runs-list
    # figures (``runner.store.run_figures``), kept by its hub once the run has ended, so `runs
    # show`, the end of `rankwatch run` and the History read one row instead of every record
    # (2.5 s each at 1,024 ranks for 20 s, and growing with the run). ``version`` is the
    # computations'; figures of another version are not read.
    """
    CREATE TABLE run_statistics (
        run_id   INTEGER PRIMARY KEY REFERENCES runs(id) ON DELETE CASCADE,
        version  INTEGER NOT NULL,
        ranks    TEXT NOT NULL,
        logged   TEXT NOT NULL,
        figures  TEXT
    );
    """,
    # 8 -> 9: a live run's statistics as its hub has tallied them (``runner.store.statistics_tally``),
    # written every ``LIVE_STATISTICS_SECONDS``: `runs show` and the History of a live run read
    # them with the store's rank rows instead of every record (two minutes at 1,024 ranks after
    # ten). ``ranks`` holds each rank's ``RecordFigures``; ``t`` when they were tallied.
    """
    CREATE TABLE live_statistics (
        run_id   INTEGER PRIMARY KEY REFERENCES runs(id) ON DELETE CASCADE,
        version  INTEGER NOT NULL,
        t        REAL NOT NULL,
        ranks    TEXT NOT NULL,
        logged   TEXT NOT NULL,
        figures  TEXT
    );
    """,
    # 9 -> 10: the sample pyramid (runner.store.sample_pyramid): GPU and process samples older
    # than the full-detail window are kept as one row per bucket, like the metrics.
    # ``sample_compactions`` remembers, per run, level and table, up to which time it is done.
    """
    CREATE TABLE sample_compactions (
        run_id      INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
        level       INTEGER NOT NULL,
        table_name  TEXT NOT NULL,
        through     REAL NOT NULL,
        PRIMARY KEY (run_id, level, table_name)
    );
    """,
]

SCHEMA_VERSION = len(MIGRATIONS)
TABLES = ("runs", "ranks", "nodes", "metrics", "logs", "events", "gpu_samples", "process_samples", "compactions",
          "sample_compactions")
DERIVED_TABLES = ("run_statistics", "live_statistics")
"""Tables computed from the others (not exported; deleted with their run)."""


class StoreVersionError(RuntimeError):
    """The store was written by a newer Rankwatch."""


StoreError = sqlite3.Error
"""What the store raises when SQLite cannot open, read or write it (locked beyond the busy
timeout, corrupt, full). Code outside ``runner.store`` catches this name, never ``sqlite3``'s:
only the store speaks SQLite (an import-linter contract holds it)."""


def migrate(connection: sqlite3.Connection) -> int:
    """Bring ``connection``'s database to ``SCHEMA_VERSION``; returns the version found.

    Safe when other processes open or migrate the same store at the same time (see
    the module docstring). ``connection`` must have a busy timeout and no open
    transaction.

    Raises:
        StoreVersionError: the database is newer than this code.
        sqlite3.OperationalError: the write lock was not granted within the busy
            timeout, or a migration failed (nothing of it is kept: rolled back).
    """
    found = _version(connection)
    _refuse_newer(found)
    if found == SCHEMA_VERSION:
        return found  # the common case: no lock taken, readers and the hub's writer undisturbed
    connection.execute("BEGIN IMMEDIATE")
    try:
        current = _version(connection)  # another process may have migrated meanwhile
        _refuse_newer(current)
        for version in range(current, SCHEMA_VERSION):
            for statement in _statements(MIGRATIONS[version]):
                connection.execute(statement)
            connection.execute(f"PRAGMA user_version = {version + 1}")
        connection.execute("COMMIT")
    except BaseException:
        if connection.in_transaction:
            connection.execute("ROLLBACK")
        raise
    return found


def _version(connection: sqlite3.Connection) -> int:
    return int(connection.execute("PRAGMA user_version").fetchone()[0])


def _refuse_newer(version: int) -> None:
    if version > SCHEMA_VERSION:
        raise StoreVersionError(
            f"the run store has schema version {version}, newer than this Rankwatch ({SCHEMA_VERSION}); "
            "upgrade rankwatch or point RANKWATCH_HOME elsewhere")


def _statements(script: str) -> list[str]:
    """``script`` cut into its SQL statements (``executescript`` would commit the open
    transaction first, so each statement runs on its own inside it)."""
    statements, pending = [], ""
    for line in script.splitlines(keepends=True):
        pending += line
        if sqlite3.complete_statement(pending):
            statements.append(pending.strip())
            pending = ""
    if pending.strip():
        statements.append(pending.strip())
    return statements
