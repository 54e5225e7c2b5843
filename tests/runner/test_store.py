"""The run store: WAL, schema migrations, refusing a newer store, CSV export."""

from __future__ import annotations

import csv
import sqlite3

import pytest

from rankwatch._protocol import Event, GpuSample, LogLine, MetricRecord, ProcessSample
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
        assert store.run(run_id)["profile"] == "p" and "note" in store.run(run_id)


def test_a_version_1_store_keeps_its_runs_under_the_run_key_column(tmp_path):
    path = tmp_path / "runs.db"
    connection = sqlite3.connect(path)
    connection.executescript(schema.MIGRATIONS[0] + "; PRAGMA user_version = 1;")
    connection.execute("INSERT INTO runs (job_key, spec_toml, created, status) VALUES ('k1', '', 1.0, 'succeeded')")
    connection.commit()
    connection.close()
    with RunStore(path) as store:
        assert store.run(store.resolve_run_id("last"))["run_key"] == "k1"


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
    assert sorted(f.name for f in files) == sorted(f"{t}.csv" for t in schema.TABLES)
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
