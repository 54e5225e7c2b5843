"""Tags and notes stored with a run, and the runs list's figures read for many runs at once."""

from __future__ import annotations

import sqlite3

import pytest

from rankwatch.protocol import MetricRecord
from runner.store import schema
from runner.store.run_figures import RunFigures, run_figures
from runner.store.store import RecordBatch, RunNotFound, RunStore


def new_run(store: RunStore, key: str) -> int:
    return store.create_run(run_key=key, profile="p", spec_toml="", command=None, host="h", workdir=None,
                            runner_pid=1, socket=None, world_size=2, status="running")


def version_5_store(path) -> None:
    """A store as the Rankwatch before tags wrote it, with one run in it."""
    connection = sqlite3.connect(path)
    for version in range(5):
        for statement in schema._statements(schema.MIGRATIONS[version]):
            connection.execute(statement)
    connection.execute("PRAGMA user_version = 5")
    connection.execute("INSERT INTO runs (run_key, spec_toml, created, status) VALUES ('old', '', 1.0, 'succeeded')")
    connection.commit()
    connection.close()


def test_tags_and_notes_are_stored_with_the_run(tmp_path):
    with RunStore(tmp_path / "runs.db") as store:
        run_id = new_run(store, "a")
        assert (store.stored_run(run_id).tags, store.stored_run(run_id).notes) == ((), None)
        store.set_run_notes(run_id, tags=["baseline, lr 3e-4", " baseline ", ""], notes="  warmup too short  ")
    with RunStore(tmp_path / "runs.db", readonly=True) as store:
        assert store.stored_run(run_id).tags == ("baseline", "lr 3e-4")
        assert store.stored_run(run_id).notes == "warmup too short"
    with RunStore(tmp_path / "runs.db") as store:
        store.set_run_notes(run_id, notes="")  # tags left as they are
        assert (store.stored_run(run_id).tags, store.stored_run(run_id).notes) == (("baseline", "lr 3e-4"), None)
        with pytest.raises(RunNotFound, match="no run 99"):
            store.set_run_notes(99, tags=["x"])


def test_a_store_from_before_tags_is_migrated_and_keeps_its_runs(tmp_path):
    path = tmp_path / "runs.db"
    version_5_store(path)
    with RunStore(path, readonly=True) as store:  # readers never migrate: no tags yet, no error
        assert store.stored_run(1).tags == () and store.stored_run(1).notes is None
    with RunStore(path) as store:
        assert store.connection.execute("PRAGMA user_version").fetchone()[0] == schema.SCHEMA_VERSION
        assert store.stored_run(1).run_key == "old"
        store.set_run_notes(1, tags=["kept"], notes="still here")
        assert store.stored_run(1).tags == ("kept",)


def test_run_figures_are_read_for_several_runs_in_one_call(tmp_path):
    with RunStore(tmp_path / "runs.db") as store:
        first, second, silent = new_run(store, "a"), new_run(store, "b"), new_run(store, "c")
        batch = RecordBatch()
        for step in range(10):
            for rank in range(2):
                t = 100.0 + step
                # Rank 1 bottoms out at step 5, and the printed 0.0 losses are not preferred.
                loss = 5.0 - step if rank == 0 else 5.0 - min(step, 5) + (step > 5) * 2.0
                batch.metrics.append(MetricRecord(rank, t, step, "loss", loss, "auto"))
                batch.metrics.append(MetricRecord(rank, t, step, "loss", 0.0, "parsed"))
                batch.metrics.append(MetricRecord(rank, t, step, "step_time", 0.5 if rank == 0 else 0.25, "auto"))
                batch.metrics.append(MetricRecord(rank, t, step, "samples_per_s", 64.0 if rank == 0 else 128.0, "auto"))
        store.write_batch(first, batch)
        logged = RecordBatch(metrics=[MetricRecord(0, 100.0 + step, step, "loss", 1.0 / (step + 1), "log")
                                      for step in range(4)])
        store.write_batch(second, logged)
        figures = run_figures(store, [first, second, silent])
    per_step = [((5.0 - step) + (5.0 - min(step, 5) + (step > 5) * 2.0)) / 2 for step in range(10)]
    assert figures[first] == RunFigures(final_loss=per_step[-1], best_loss=min(per_step), steps=10,
                                        samples_per_s=64.0 + 128.0)
    assert figures[second] == RunFigures(final_loss=0.25, best_loss=0.25, steps=4, samples_per_s=None)
    assert silent not in figures
