"""``rankwatch runs prune`` on a real store through the real CLI: old runs go with every row they
own, the newest and the live ones stay, and nothing is deleted without being asked."""

from __future__ import annotations

import os
import time

from rankwatch.protocol import LogLine, MetricRecord
from runner.store.store import RecordBatch, RunStore
from tests.jobs import rankwatch

DAY = 86400.0


def make_run(store: RunStore, *, ended_days_ago: float | None, live: bool = False) -> int:
    """A run with 1,000 metric records and 100 log lines; ended that many days ago, or live (its
    runner is this test's process)."""
    run_id = store.create_run(run_key=f"k{time.time_ns()}", profile="p", spec_toml="", command=None, host="h",
                              workdir=None, runner_pid=os.getpid() if live else 1 << 22, socket=None,
                              world_size=2, status="running")
    now = time.time()
    store.write_batch(run_id, RecordBatch(
        metrics=[MetricRecord(i % 2, now + i, i // 2, "loss", 1.0 / (i + 1), "auto") for i in range(1000)],
        logs=[LogLine(i % 2, now + i, "stdout", f"line {i}", "h") for i in range(100)]))
    if ended_days_ago is not None:
        store.update_run(run_id, ended=now - ended_days_ago * DAY, status="succeeded", exit_code=0)
    return run_id


def remaining(run_ids: list[int]) -> dict[int, tuple[int, int]]:
    with RunStore(readonly=True) as store:
        runs = {run.id for run in store.runs(limit=100)}
        return {run_id: (len(store.metrics(run_id)), len(store.log_lines(run_id))) for run_id in run_ids
                if run_id in runs}


def test_old_runs_go_with_their_rows_and_live_and_recent_ones_stay():
    with RunStore() as store:
        old = [make_run(store, ended_days_ago=days) for days in (90, 45)]
        recent = make_run(store, ended_days_ago=2)
        live = make_run(store, ended_days_ago=None, live=True)
    everything = [*old, recent, live]

    listed = rankwatch("runs", "prune", "--older-than", "30d", "--dry-run")
    assert listed.returncode == 0, listed.stderr
    assert f"2 runs to delete (2,202 rows): {old[0]}, {old[1]}" in listed.stdout
    assert remaining(everything) == {run_id: (1000, 100) for run_id in everything}

    unasked = rankwatch("runs", "prune", "--older-than", "30d")  # no terminal to ask on: refuse
    assert unasked.returncode == 2 and "add --yes" in unasked.stderr
    assert len(remaining(everything)) == 4

    pruned = rankwatch("runs", "prune", "--older-than", "30d", "--yes")
    assert pruned.returncode == 0, pruned.stderr
    assert "deleted 2 runs; store" in pruned.stdout
    assert remaining(everything) == {recent: (1000, 100), live: (1000, 100)}

    by_count = rankwatch("runs", "prune", "--keep", "0", "--yes")
    assert by_count.returncode == 0, by_count.stderr
    assert f"run {live} is live: kept" in by_count.stdout
    assert remaining(everything) == {live: (1000, 100)}


def test_a_prune_without_a_rule_or_with_a_bad_age_says_how_to_write_it():
    bare = rankwatch("runs", "prune")
    assert bare.returncode == 2 and "--older-than AGE (e.g. 30d), --keep N" in bare.stderr
    bad = rankwatch("runs", "prune", "--older-than", "a month")
    assert bad.returncode == 2 and "expected an age such as 30d" in bad.stderr
