"""The run store's disk fills mid-run: training goes on, the user is told once, the run ends
recorded "store incomplete: disk full". Needs root to mount a small tmpfs (skipped otherwise).

The store alone is put on the small disk (``RANKWATCH_STORE``); torchrun's own files stay
in the data directory (what a full data directory does to those is a separate test)."""

from __future__ import annotations

import os

import pytest

from runner.store.store import RunStore
from tests.jobs import SCRIPTS, rankwatch

pytestmark = pytest.mark.torchrun


def test_a_full_store_disk_never_stops_training_and_the_run_ends_recorded(small_disk):
    store_file = small_disk / "runs.db"
    env = dict(os.environ, RANKWATCH_STORE=str(store_file))
    result = rankwatch("run", "--plain", "--status-every", "0", "--nproc-per-node", "2", "--gpus", "cpu",
                       str(SCRIPTS / "many_records.py"), "12", env=env, timeout=180)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Traceback" not in result.stdout + result.stderr
    assert result.stdout.count("done: ") == 2  # both ranks trained to the end
    told = [line for line in (result.stdout + result.stderr).splitlines()
            if "the run store stopped taking records (disk full" in line]
    assert len(told) == 1, told
    assert "store incomplete: disk full" in result.stderr  # the end-of-run block says so
    with RunStore(store_file, readonly=True) as store:
        run = store.stored_run(store.resolve_run_id("last"))
    assert run.status == "succeeded" and run.ended is not None, run
    assert run.summary["store_incomplete"] == "disk full"
    assert run.summary["headline"].endswith("(store incomplete: disk full)")
