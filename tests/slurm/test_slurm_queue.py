"""A Slurm run that has to wait: queued behind a job that fills the cluster, watched while it
waits, its blocker stopped with Rankwatch's stop, then running to the end.

One scenario serves the assertions:

1. a blocker, ``forever.py`` on both nodes with all their CPUs (a two-node run, so c10d
   rendezvous across nodes too), is started with ``rankwatch run --slurm``;
2. the run under test (``rankwatch run --slurm --nodes 1 --nproc-per-node 2``) is started
   detached, as the GUI starts runs; Slurm keeps it pending (Resources, position 1);
3. ``rankwatch attach`` follows it while it is queued, and detaches (Ctrl-C);
4. the blocker is stopped the way ``rankwatch stop`` and the GUI's Stop do it (the
   runner's ``stop`` control): scancel, verified end, nothing of it left on the node;
5. the run under test starts, ``rankwatch attach`` follows it again, to its end.
"""

from __future__ import annotations

import json
import signal
import time

import pytest

from tests.jobs import SCRIPTS, processes_with_marker, rankwatch, start_rankwatch, wait_for
from tests.slurm.helpers import (
    StatusRecorder,
    lines_until,
    read_store,
    run_by_profile,
    runner_env,
    running_ranks,
    send_stop,
    slurm_flags,
    slurm_job_id,
    slurm_run,
)

pytestmark = [pytest.mark.slurm, pytest.mark.torchrun]
STEPS = 30


@pytest.fixture(scope="module")
def queue(slurm_cluster, tmp_path_factory):
    started = time.monotonic()
    home = tmp_path_factory.mktemp("slurm-queue-home")
    env = runner_env(home, slurm_cluster)
    blocker = start_rankwatch(*slurm_run("forever.py", nodes=2, nproc=1, extra=("--cpus-per-node", "2")), env=env)
    blocker_run = wait_for(lambda: run_by_profile(home, "forever.py"), 60, what="the blocker to be recorded")
    wait_for(lambda: running_ranks(home, blocker_run["id"]) == 2, 120, what="the blocker's ranks to start")
    blocker_run = run_by_profile(home, "forever.py")  # with its socket now
    blocker_job = slurm_job_id(home, blocker_run["id"])

    detached = rankwatch("run", "--detach", "--json", *slurm_flags(1, 2), str(SCRIPTS / "remote_train.py"),
                         "--steps", str(STEPS), "--sleep", "0.05", env=env, timeout=60)
    assert detached.returncode == 0, detached.stderr
    run_id = json.loads(detached.stdout)["run_id"]
    statuses = StatusRecorder(home, run_id)
    wait_for(lambda: read_store(home, lambda store: store.run(run_id)["status"]) == "pending", 30,
             what="the run to be pending")
    job = wait_for(lambda: slurm_job_id(home, run_id), 10, what="the job id")
    wait_for(lambda: slurm_cluster.job(job).get("Reason") == "Resources", 30, what="Slurm to say Resources")
    time.sleep(1.5)  # a few polls: the reason and the position reach the run
    squeue_while_queued = slurm_cluster.run("squeue", "--noheader", "--jobs", job, "--format=%T %r").stdout.split()

    attach = start_rankwatch("attach", str(run_id), "--plain", env=env)
    saw_pending, attach_lines = lines_until(attach.stderr, "pending", 30)  # Rankwatch's own lines: stderr
    attach.send_signal(signal.SIGINT)  # detach: the run goes on
    _, attach_rest = attach.communicate(timeout=15)

    send_stop(blocker_run["socket"])
    blocker_out, blocker_err = blocker.communicate(timeout=120)
    blocker_survivors = processes_with_marker(blocker_run["run_key"])

    wait_for(lambda: read_store(home, lambda store: store.run(run_id)["status"]) == "running", 60,
             what="the run to start once the blocker is gone")
    reattached = rankwatch("attach", str(run_id), "--plain", env=env, timeout=180)
    wait_for(lambda: read_store(home, lambda store: store.run(run_id)["ended"]), 30, what="the run's end")
    seen = statuses.stop()

    def facts(store):
        return {"run": store.run(run_id), "ranks": {row["rank"]: row for row in store.ranks(run_id)},
                "metrics": store.metrics(run_id), "slurm_events": store.events(run_id, kind="slurm"),
                "nodes": store.nodes(run_id), "blocker": store.run(blocker_run["id"]),
                "blocker_nodes": store.nodes(blocker_run["id"])}
    time.sleep(1)  # Slurm writes the completion record as the job ends
    return {"home": home, "job": job, "blocker_job": blocker_job, "statuses": seen,
            "squeue_while_queued": squeue_while_queued, "saw_pending": saw_pending,
            "attach_output": "".join(attach_lines) + attach_rest, "attach_code": attach.returncode,
            "blocker_code": blocker.returncode, "blocker_err": blocker_err, "blocker_survivors": blocker_survivors,
            "reattached": reattached, "seconds": time.monotonic() - started,
            "slurm_job": slurm_cluster.job(job), "slurm_record": slurm_cluster.completion_record(job),
            "blocker_slurm_job": slurm_cluster.job(blocker_job), **read_store(home, facts)}


def test_the_run_is_pending_with_slurms_reason_then_running_then_succeeds(queue):
    assert queue["squeue_while_queued"] == ["PENDING", "Resources"]  # Slurm's own view at that moment
    statuses = queue["statuses"]
    assert statuses.index("pending") < statuses.index("running") < statuses.index("succeeded"), statuses
    pending = [e["data"] for e in queue["slurm_events"] if e["data"]["phase"] == "pending"]
    assert any(p["reason"] == "Resources" and p["position"] == 1 for p in pending), pending
    assert "pending: Resources (waiting for resources to free up), position 1 of 1" in \
        " ".join(e["data"]["message"] for e in queue["slurm_events"])


def test_every_rank_reported_its_loss_and_steps(queue):
    ranks = queue["ranks"]
    assert {rank: (row["state"], row["exit_code"], row["host"]) for rank, row in ranks.items()} == {
        0: ("exited", 0, "n1"), 1: ("exited", 0, "n1")}
    for rank in (0, 1):
        steps = {step for r, step, _t, name, _v, _s in queue["metrics"] if r == rank and name == "loss"}
        assert steps == set(range(STEPS)), f"rank {rank}: loss at steps {sorted(steps)}"


def test_rankwatch_and_slurms_own_record_agree_on_the_end(queue):
    run = queue["run"]
    assert run["status"] == "succeeded" and run["exit_code"] == 0
    assert run["summary"]["slurm"]["job_id"] == queue["job"] and run["summary"]["slurm"]["state"] == "COMPLETED"
    assert queue["slurm_job"]["JobState"] == "COMPLETED" and queue["slurm_job"]["ExitCode"] == "0:0"
    assert queue["slurm_record"]["JobState"] == "COMPLETED"  # the job completion file
    assert [(n["node_rank"], n["host"], n["state"]) for n in queue["nodes"]] == [(0, "n1", "exited")]
    assert run["command"].startswith("#!/bin/bash")  # the sbatch script to submit it by hand


def test_attach_follows_a_queued_run_detaches_and_reattaches_to_it_running(queue):
    assert queue["saw_pending"], queue["attach_output"]
    assert f"Slurm job {queue['job']}: pending: Resources" in queue["attach_output"]
    assert queue["attach_code"] in (0, 130)
    reattached = queue["reattached"]
    assert reattached.returncode == 0, reattached.stderr[-2000:]
    assert f"rank 1/2 step {STEPS - 1}" in reattached.stdout
    assert f"Slurm job {queue['job']}: running on n1" in reattached.stderr


def test_stop_cancels_the_slurm_job_and_leaves_no_process_of_it(queue):
    blocker = queue["blocker"]
    assert blocker["status"] == "stopped", queue["blocker_err"][-3000:]
    assert blocker["summary"]["slurm"]["state"] == "CANCELLED"
    assert f"Slurm job {queue['blocker_job']} cancelled" in blocker["summary"]["headline"]
    assert queue["blocker_slurm_job"]["JobState"] == "CANCELLED"
    assert queue["blocker_survivors"] == []  # agents, torchrun, workers: none left on the node
    assert {n["host"] for n in queue["blocker_nodes"]} == {"n1", "n2"}
