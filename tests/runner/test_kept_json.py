"""What a run's hub kept in the store (its per-rank statistics, its runs-list figures) is read
back leniently by any later Rankwatch: a key a newer version added is left out and a value of the
wrong type reads as not measured, instead of `runs show` and the runs list failing on the row.
A real SQLite store; the kept row written as a newer hub would."""

from __future__ import annotations

import json
import math

from runner.store import run_figures
from runner.store.rank_stats import LoggedKey, RankStats, run_statistics
from runner.store.store import RunStore


def _kept_by_a_newer_hub(store: RunStore) -> int:
    run_id = store.create_run(run_key="k" * 24, profile="p", spec_toml="", command=None, host="h", workdir=None,
                              runner_pid=1, socket=None, world_size=2, status="succeeded")
    ranks = [{"rank": 0, "steps": 10, "last_loss": float("nan"), "gpu_util": "51", "phase_shares": {"forward": 0.5},
              "energy_joules": 12.5},
             {"rank": 1, "steps": 10.0, "median_step_time": 0.25, "state": 3}]
    logged = [{"name": "lr", "sources": ["log"], "last_by_rank": {"0": 0.1, "one": 0.2}, "unit": "1"}]
    figures = {"final_loss": 1.5, "best_loss": "low", "steps": 10, "samples_per_s": None, "tokens_per_s": 9.0}
    with store.connection:
        store.connection.execute(
            "INSERT INTO run_statistics (run_id, version, ranks, logged, figures) VALUES (?, ?, ?, ?, ?)",
            (run_id, run_figures.KEPT_VERSION, json.dumps(ranks), json.dumps(logged), json.dumps(figures)))
    return run_id


def test_kept_rank_statistics_from_a_newer_hub_read_with_wrong_types_as_not_measured(tmp_path):
    with RunStore(tmp_path / "runs.db") as store:
        run_id = _kept_by_a_newer_hub(store)
        stats, logged = run_statistics(store, run_id)
    first, second = stats
    assert (first.rank, first.steps, first.gpu_util, first.phase_shares) == (0, 10, None, {"forward": 0.5})
    assert first.last_loss is not None and math.isnan(first.last_loss)  # a loss that went NaN was measured NaN
    assert (second.rank, second.steps, second.median_step_time, second.state) == (1, 10, 0.25, None)
    assert logged == [LoggedKey("lr", ("log",), {0: 0.1})]
    assert RankStats.from_json(first.to_json()).steps == first.steps  # what is written reads back


def test_kept_run_figures_from_a_newer_hub_read_with_wrong_types_as_not_measured(tmp_path):
    with RunStore(tmp_path / "runs.db") as store:
        run_id = _kept_by_a_newer_hub(store)
        figures = run_figures.run_figures(store, [run_id])
    assert figures == {run_id: run_figures.RunFigures(final_loss=1.5, best_loss=None, steps=10, samples_per_s=None)}
