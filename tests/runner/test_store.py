"""The run store: WAL, schema migrations, refusing a newer store, CSV export."""

from __future__ import annotations

import csv
import sqlite3
import subprocess
import sys
import time

import pytest

from rankwatch.protocol import Event, GpuSample, LogLine, MetricRecord, ProcessSample
from runner.store import schema
from runner.store.store import RecordBatch, RunNotFound, RunStore


def new_run(store: RunStore) -> int:
    return store.create_run(run_key=f"k{store.count('runs', 0)}-{len(store.runs())}", profile="p", spec_toml="x = 1", command="torchrun ...", host="h",
                            workdir="/w", runner_pid=1, socket=None, world_size=2, status="running")


def test_store_is_in_wal_mode_and_versioned(tmp_path):
    with RunStore(tmp_path / "runs.db") as store:
        assert store.connection.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert store.connection.execute("PRAGMA user_version").fetchone()[0] == schema.SCHEMA_VERSION


def test_an_old_store_is_migrated_in_place(tmp_path, monkeypatch):
    path = tmp_path / "runs.db"
    with RunStore(path) as store:
        run_id = new_run(store)
    # a future migration adds a column; the existing run survives it
    monkeypatch.setattr(schema, "MIGRATIONS", [*schema.MIGRATIONS, "ALTER TABLE runs ADD COLUMN note TEXT"])
    monkeypatch.setattr(schema, "SCHEMA_VERSION", len(schema.MIGRATIONS))
    with RunStore(path) as store:
        assert store.connection.execute("PRAGMA user_version").fetchone()[0] == len(schema.MIGRATIONS)
        assert store.stored_run(run_id).profile == "p" and "note" in store.stored_run(run_id).extra


def test_a_version_1_store_keeps_its_runs_under_the_run_key_column(tmp_path):
    path = tmp_path / "runs.db"
    connection = sqlite3.connect(path)
    connection.executescript(schema.MIGRATIONS[0] + "; PRAGMA user_version = 1;")
    connection.execute("INSERT INTO runs (job_key, spec_toml, created, status) VALUES ('k1', '', 1.0, 'succeeded')")
    connection.commit()
    connection.close()
    with RunStore(path) as store:
        assert store.stored_run(store.resolve_run_id("last")).run_key == "k1"


def test_a_newer_store_is_refused_not_damaged(tmp_path):
    path = tmp_path / "runs.db"
    with RunStore(path):
        pass
    connection = sqlite3.connect(path)
    connection.execute(f"PRAGMA user_version = {schema.SCHEMA_VERSION + 1}")
    connection.close()
    with pytest.raises(schema.StoreVersionError, match="newer than this Rankwatch"):
        RunStore(path)


def test_batches_and_export_one_csv_per_table(tmp_path):
    with RunStore(tmp_path / "runs.db") as store:
        run_id = new_run(store)
        store.upsert_rank(run_id, 0, host="h", pid=10, state="running")
        store.write_batch(run_id, RecordBatch(
            metrics=[MetricRecord(0, 1.0, 0, "loss", 2.5, "auto"), MetricRecord(0, 2.0, 1, "loss", 2.0, "auto")],
            logs=[LogLine(0, 1.0, "stdout", "hello", "h")], events=[Event(1.0, "rank_started", 0, "")],
            gpu_samples=[GpuSample(1.0, 0, 50.0, 1, 2, 100.0, 60.0, 1400.0)],
            process_samples=[ProcessSample(1.0, 0, 10, 90.0, 1024, 4)]))
        files = store.export_csv(run_id, tmp_path / "csv")
    assert sorted(f.name for f in files) == sorted([*(f"{t}.csv" for t in schema.TABLES), "steps.csv",
                                                    "rank_summary.csv"])
    rows = list(csv.DictReader((tmp_path / "csv" / "metrics.csv").open()))
    assert [(r["rank"], r["step"], r["name"], r["value"]) for r in rows] == [("0", "0", "loss", "2.5"), ("0", "1", "loss", "2.0")]
    assert next(csv.DictReader((tmp_path / "csv" / "logs.csv").open()))["line"] == "hello"


def test_last_and_unknown_runs(tmp_path):
    with RunStore(tmp_path / "runs.db") as store:
        with pytest.raises(RunNotFound, match="no runs recorded yet"):
            store.resolve_run_id("last")
        first, second = new_run(store), new_run(store)
        assert store.resolve_run_id("last") == second and store.resolve_run_id("last-1") == first
        with pytest.raises(RunNotFound, match="no run 99"):
            store.resolve_run_id("99")


RACER = """
import sys, time
from pathlib import Path
from runner.store.store import RunNotFound, RunStore
path, go, role, name = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], sys.argv[4]
(go.parent / f"ready-{name}").touch()
while not go.exists():
    time.sleep(0.001)
if role == "reader":
    try:
        with RunStore(path, readonly=True) as store:
            store.runs()
    except RunNotFound:
        pass
else:
    with RunStore(path) as store:
        store.create_run(run_key=name, profile=None, spec_toml="", command=None, host="h", workdir=None,
                         runner_pid=1, socket=None, world_size=1, status="starting")
"""


def _schema_of(path) -> list[tuple[str, str]]:
    connection = sqlite3.connect(path)
    try:
        return connection.execute("SELECT name, sql FROM sqlite_master ORDER BY name").fetchall()
    finally:
        connection.close()


def test_runners_and_readers_racing_on_a_fresh_store_all_succeed(tmp_path):
    """Processes opening a store that does not exist yet, released together: every one succeeds
    (no "table already exists", no "database is locked"), each runner's run is stored, and the
    schema is exactly the one a store created alone gets. Cost: 4-9 s (4 rounds of 6 processes)."""
    with RunStore(tmp_path / "alone.db"):
        pass
    expected = _schema_of(tmp_path / "alone.db")
    for round_number in range(4):
        folder = tmp_path / f"round{round_number}"
        path, go = folder / "data" / "runs.db", folder / "go"
        folder.mkdir()
        roles = ["runner"] * 4 + ["reader"] * 2
        racers = [subprocess.Popen([sys.executable, "-c", RACER, str(path), str(go), role, f"key-{index}"],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                  for index, role in enumerate(roles)]
        deadline = time.monotonic() + 60
        while len(list(folder.glob("ready-*"))) < len(roles) and time.monotonic() < deadline:
            time.sleep(0.01)  # all imported and waiting: then released at once
        go.touch()
        for racer in racers:
            _output, err = racer.communicate(timeout=60)
            assert racer.returncode == 0, f"round {round_number}: {err}"
        with RunStore(path, readonly=True) as store:
            assert store.connection.execute("PRAGMA user_version").fetchone()[0] == schema.SCHEMA_VERSION
            assert sorted(run.run_key for run in store.runs()) == [f"key-{index}" for index in range(4)]
        assert _schema_of(path) == expected
