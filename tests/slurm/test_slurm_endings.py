"""How Slurm runs end when Slurm, not the ranks, ends them, and when a rank fails.

Two runs of ``forever.py`` share the cluster at once (one process each):

* one is submitted with a time limit (``--time 1``). Waiting a minute (Slurm checks
  limits every 30 s, so up to 90 s) would be the slowest part of the suite, so once
  it runs the test moves the job's end time to now (``scontrol update EndTime=now``,
  what an administrator does to shorten a job): Slurm's own time-limit enforcement
  then ends it within its next check, exactly as at the limit, and records TIMEOUT;
* the other is cancelled from outside Rankwatch with ``scancel``.

(A rank that raises on Slurm: ``test_slurm_login.py``.)
"""

from __future__ import annotations

import time

import pytest

from tests.jobs import processes_with_marker, start_rankwatch, wait_for
from tests.slurm.helpers import (
    read_store,
    runner_env,
    slurm_job_id,
    slurm_run,
)

pytestmark = [pytest.mark.slurm, pytest.mark.torchrun]


@pytest.fixture(scope="module")
def ended_by_slurm(slurm_cluster, tmp_path_factory):
    started = time.monotonic()
    home = tmp_path_factory.mktemp("slurm-endings-home")
    env = runner_env(home, slurm_cluster)

    def submitted(name: str):
        runs = read_store(home, lambda store: store.runs(limit=10)) or []
        return next((run for run in runs if f"--job-name={name}" in (run["command"] or "")), None)

    runners, runs = {}, {}
    for name, extra in (("limited", ("--time", "1")), ("cancelled", ())):
        # One after the other: two runners creating a fresh run store at the same moment race (see the report).
        runners[name] = start_rankwatch(*slurm_run("forever.py", extra=(*extra, "--job-name", name)), env=env)
        runs[name] = wait_for(lambda name=name: submitted(name), 60, what=f"the {name} run to be submitted")
    limited, cancelled = runners["limited"], runners["cancelled"]
    for run in runs.values():  # training: steps measured
        wait_for(lambda run=run: read_store(home, lambda store: store.metrics(run["id"], name="loss")), 120,
                 what="the first steps")
    jobs = {name: slurm_job_id(home, run["id"]) for name, run in runs.items()}

    slurm_cluster.run("scontrol", "update", f"JobId={jobs['limited']}", "EndTime=now")
    slurm_cluster.run("scancel", jobs["cancelled"])
    outputs = {"limited": limited.communicate(timeout=120), "cancelled": cancelled.communicate(timeout=120)}
    survivors = {name: processes_with_marker(run["run_key"]) for name, run in runs.items()}

    def facts(store):
        return {name: {"run": store.run(run["id"]), "ranks": store.ranks(run["id"])} for name, run in runs.items()}
    return {"jobs": jobs, "outputs": outputs, "codes": {"limited": limited.returncode,
                                                         "cancelled": cancelled.returncode},
            "survivors": survivors, "slurm": {name: slurm_cluster.job(job) for name, job in jobs.items()},
            "seconds": time.monotonic() - started, **read_store(home, facts)}


def test_a_run_past_its_time_limit_is_reported_as_timeout_with_its_ranks(ended_by_slurm):
    run, ranks = ended_by_slurm["limited"]["run"], ended_by_slurm["limited"]["ranks"]
    assert "#SBATCH --time=1" in run["command"]
    assert ended_by_slurm["slurm"]["limited"]["JobState"] == "TIMEOUT"
    assert run["status"] == "failed" and run["summary"]["outcome"] == "timeout"
    [rank] = ranks
    assert rank["state"] == "stopped"
    headline = run["summary"]["headline"]
    assert headline.startswith(f"Slurm job {ended_by_slurm['jobs']['limited']} reached its time limit")
    assert "rank 0 stopped at step " in headline
    assert ended_by_slurm["codes"]["limited"] == run["exit_code"] != 0
    stderr = ended_by_slurm["outputs"]["limited"][1]
    assert "reached its time limit" in stderr[stderr.rindex("── Rankwatch"):]


def test_a_scancel_from_outside_is_reported_as_cancelled(ended_by_slurm):
    run, ranks = ended_by_slurm["cancelled"]["run"], ended_by_slurm["cancelled"]["ranks"]
    assert ended_by_slurm["slurm"]["cancelled"]["JobState"] == "CANCELLED"
    assert run["status"] == "stopped" and run["summary"]["outcome"] == "cancelled"
    assert run["summary"]["headline"].startswith(
        f"Slurm job {ended_by_slurm['jobs']['cancelled']} was cancelled outside Rankwatch")
    assert [rank["state"] for rank in ranks] == ["stopped"]
    assert ended_by_slurm["codes"]["cancelled"] == run["exit_code"] == 143  # as for SIGTERM


def test_nothing_of_either_job_is_left_on_the_node(ended_by_slurm):
    assert ended_by_slurm["survivors"] == {"limited": [], "cancelled": []}

