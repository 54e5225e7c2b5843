"""Submission against the real cluster, without training: what Slurm refuses is refused before
anything is submitted, and a queued job does not outlive a runner that was killed."""

from __future__ import annotations

import os
import signal
import sys

import pytest

from tests.jobs import SCRIPTS, rankwatch, start_rankwatch, wait_for
from tests.slurm.helpers import read_store, run_by_profile, runner_env, slurm_job_id, slurm_run

pytestmark = [pytest.mark.slurm]


def queue_of(cluster) -> str:
    return cluster.run("squeue", "--noheader", "--format=%i").stdout.strip()


@pytest.mark.parametrize(("flags", "expected"), [  # worded as the flag the value came from
    (["--partition", "nope"], "--partition: sbatch refused it here: invalid partition specified: nope"),
    (["--nodes", "3"], "--nodes: Slurm has no such nodes here: 3 node(s) with 1 CPU(s) each"),
    (["--gpus-per-node", "1"], "--gpus-per-node: sbatch refused it here: Invalid generic resource (gres)"),
    (["--interpreter", "/usr/bin/python3"], "--interpreter: rankwatch is not installed for /usr/bin/python3 here"),
])
def test_what_slurm_or_the_cluster_would_refuse_is_refused_before_submission(on_slurm, tmp_path, flags, expected):
    before = queue_of(on_slurm)
    result = rankwatch("run", "--plain", "--slurm", "--interpreter", sys.executable, "--workdir", str(tmp_path),
                       *flags, str(SCRIPTS / "hello_ranks.py"))
    assert result.returncode == 2, result.stderr
    assert f"rankwatch: {expected}" in result.stderr, result.stderr
    assert queue_of(on_slurm) == before  # nothing submitted


def test_a_queued_job_is_cancelled_when_its_runner_is_killed(slurm_cluster, tmp_path):
    env = runner_env(tmp_path, slurm_cluster)
    runner = start_rankwatch(*slurm_run("forever.py", workdir=tmp_path, extra=("--sbatch-option=--begin=now+600",)), env=env)
    run = wait_for(lambda: run_by_profile(tmp_path, "forever.py"), 60, what="the run to be recorded")
    job = wait_for(lambda: slurm_job_id(tmp_path, run.id), 30, what="the job to be submitted")
    wait_for(lambda: slurm_cluster.job(job).get("Reason") == "BeginTime", 30, what="Slurm to hold it")
    wait_for(lambda: any(event.fields.get("reason") == "BeginTime" for event in
                         read_store(tmp_path, lambda store: store.stored_events(run.id, kind="slurm")) or []),
             30, what="the run to show Slurm's reason")
    os.kill(runner.pid, signal.SIGKILL)
    runner.communicate(timeout=10)
    wait_for(lambda: slurm_cluster.job(job).get("JobState") == "CANCELLED", 30,
             what="the watchdog to cancel the job")
