"""A Slurm run's life on a busy cluster, and every way Slurm runs end, in one scenario.

The test cluster has two nodes of 2 CPUs. Three runs fill it (their ranks log steps with
``rankwatch.log`` and no torch, ``logging_steps.py``):

* the *blocker*, 2 processes: it is stopped the way ``rankwatch stop`` and the GUI's Stop
  do it (the runner's ``stop`` control): scancel, a verified end, nothing left on the node;
* *limited*, 1 process, submitted with a time limit (``--time 1``). Waiting a minute for it
  (Slurm checks limits every 30 s, so up to 90 s) would make it the slowest test of the
  suite, so once it runs the test moves the job's end time to now (``scontrol update
  EndTime=now``, what an administrator does to shorten a job): Slurm's own time-limit
  enforcement ends it at its next check, exactly as at the limit, and records TIMEOUT;
* the *outsider*, 1 process, cancelled with ``scancel`` from outside Rankwatch.

Slurm ends each of the three by signalling every process of its job step at once; each
node's agent must then see its processes end by themselves (torchrun stopped by Slurm's
SIGTERM, no second one from Rankwatch) and report the node's end, well before Slurm's
SIGKILL (its KillWait), and nothing of the job may be left on the node.

Meanwhile the run under test, ``rankwatch run --slurm --nodes 1 --nproc-per-node 2`` with a
real DDP training script, is started detached (as the GUI starts runs): Slurm keeps it
pending (Resources, position 1); ``rankwatch attach`` follows it while it waits and
detaches; once a node is free it runs (the blocker's node is free at once, while *limited*
waits for Slurm's next time-limit check), and ``rankwatch attach``, started as soon as the
run shows "running", follows it to its end. Its statuses are recorded as they change, from
its submission on.
"""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from runner.rows import StoredRun
from tests.jobs import SCRIPTS, processes_with_marker, rankwatch, start_rankwatch, wait_for
from tests.slurm.helpers import (
    StatusRecorder,
    lines_until,
    read_store,
    runner_env,
    send_stop,
    slurm_flags,
    slurm_job_id,
)

pytestmark = [pytest.mark.slurm, pytest.mark.torchrun]
STEPS = 30
LOGGING_STEPS = str(Path(__file__).parent / "logging_steps.py")
FILLERS = {"blocker": ("--nproc-per-node", "2"), "limited": ("--time", "1"), "outsider": ()}
"""Job name -> extra flags of the three runs that fill the cluster (4 CPUs)."""


def submitted(home: Path, job_name: str) -> StoredRun | None:
    runs = read_store(home, lambda store: store.runs(limit=10)) or []
    return next((run for run in runs if f"--job-name={job_name}\n" in (run.command or "")), None)


def has_steps(home: Path, run_id: int) -> bool:
    return bool(read_store(home, lambda store: store.metrics(run_id, name="loss")))


def command_lines(processes) -> list[str]:
    lines = []
    for process in processes:
        with contextlib.suppress(psutil.Error):
            lines.append(" ".join(process.cmdline()))
    return lines


@pytest.fixture(scope="module")
def lifecycle(slurm_cluster, tmp_path_factory):
    started = time.monotonic()
    home = tmp_path_factory.mktemp("slurm-lifecycle-home")
    env = runner_env(home, slurm_cluster)
    runners, runs = {}, {}
    for name, extra in FILLERS.items():
        command = ["run", "--plain", *slurm_flags(home, 1, 1), *extra, "--job-name", name, LOGGING_STEPS]
        runners[name] = start_rankwatch(*command, env=env)
        # One after the other: two runners creating a fresh run store at once race (see the report).
        runs[name] = wait_for(lambda name=name: submitted(home, name), 60, what=f"the {name} run to be submitted")
    for name, run in runs.items():
        wait_for(lambda run=run: has_steps(home, run.id), 120, what=f"the {name} run's first steps")
        runs[name] = read_store(home, lambda store, run=run: store.stored_run(run.id))  # with its socket now
    jobs = {name: slurm_job_id(home, run.id) for name, run in runs.items()}
    marked = {name: command_lines(processes_with_marker(run.run_key)) for name, run in runs.items()}
    filled = time.monotonic()

    detached = rankwatch("run", "--detach", "--json", *slurm_flags(home, 1, 2), str(SCRIPTS / "remote_train.py"),
                         "--steps", str(STEPS), "--sleep", "0.05", env=env, timeout=60)
    assert detached.returncode == 0, detached.stderr
    run_id = json.loads(detached.stdout)["run_id"]
    statuses = StatusRecorder(home, run_id)
    job = wait_for(lambda: slurm_job_id(home, run_id), 30, what="the run to be submitted")
    wait_for(lambda: slurm_cluster.job(job).get("Reason") == "Resources", 30, what="Slurm to say Resources")
    squeue_while_queued = slurm_cluster.run("squeue", "--noheader", "--jobs", job, "--format=%T %r").stdout.split()
    wait_for(lambda: any(event.fields.get("reason") == "Resources" for event in
                         read_store(home, lambda store: store.stored_events(run_id, kind="slurm")) or []),
             10, what="the run to show Slurm's reason")
    attach = start_rankwatch("attach", str(run_id), "--plain", env=env)
    saw_pending, attach_lines = lines_until(attach.stderr, "pending: Resources", 30)  # Rankwatch's own lines: stderr
    attach.send_signal(signal.SIGINT)  # detach: the run goes on
    _, attach_rest = attach.communicate(timeout=15)

    # Not checked here: a job that already ended cannot be shortened, and the test of its timeout
    # says what Slurm reported; an error here would end every test of the module and leave the
    # cluster full for the next module's jobs.
    shortened = slurm_cluster.run("scontrol", "update", f"JobId={jobs['limited']}", "EndTime=now", check=False)
    slurm_cluster.run("scancel", jobs["outsider"])
    send_stop(runs["blocker"].socket or "")
    wait_for(lambda: "running" in statuses.seen, 150, what="the run to start once a node is free")
    reattach = start_rankwatch("attach", str(run_id), "--plain", env=env)
    outputs = {name: runner.communicate(timeout=120) for name, runner in runners.items()}
    survivors = {name: processes_with_marker(run.run_key) + slurm_cluster.processes_of(jobs[name])
                 for name, run in runs.items()}
    ended = time.monotonic()

    stdout, stderr = reattach.communicate(timeout=180)
    reattached = subprocess.CompletedProcess(reattach.args, reattach.returncode, stdout, stderr)
    wait_for(lambda: read_store(home, lambda store: store.stored_run(run_id).ended), 30, what="the run's end")
    seen = statuses.stop()

    def facts(store):
        return {"run": store.stored_run(run_id), "ranks": {row.rank: row for row in store.ranks(run_id)},
                "metrics": store.metrics(run_id), "slurm_events": store.stored_events(run_id, kind="slurm"),
                "nodes": store.stored_nodes(run_id), "logs": store.log_lines(run_id),
                "fillers": {name: {"run": store.stored_run(run.id), "ranks": store.ranks(run.id),
                                   "nodes": store.stored_nodes(run.id), "warnings": store.stored_events(run.id, kind="warning")}
                            for name, run in runs.items()}}
    return {"job": job, "jobs": jobs, "marked": marked, "statuses": seen, "squeue_while_queued": squeue_while_queued,
            "saw_pending": saw_pending, "attach_output": "".join(attach_lines) + attach_rest,
            "attach_code": attach.returncode, "outputs": outputs, "survivors": survivors,
            "codes": {name: runner.returncode for name, runner in runners.items()}, "reattached": reattached,
            "shortened": shortened, "slurm_job": slurm_cluster.job(job),
            "slurm_record": slurm_cluster.completion_record(job),
            "slurm_jobs": {name: slurm_cluster.job(filler) for name, filler in jobs.items()},
            "seconds": {"filling": filled - started, "ending": ended - filled, "total": time.monotonic() - started},
            **read_store(home, facts)}


# ---- the run under test ---------------------------------------------------------------------------

def test_the_run_is_pending_with_slurms_reason_then_running_then_succeeds(lifecycle):
    assert lifecycle["squeue_while_queued"] == ["PENDING", "Resources"]  # Slurm's own view at that moment
    statuses = lifecycle["statuses"]
    assert statuses.index("pending") < statuses.index("running") < statuses.index("succeeded"), statuses
    pending = [event.fields for event in lifecycle["slurm_events"] if event.fields["phase"] == "pending"]
    assert any(item["reason"] == "Resources" and item["position"] == 1 for item in pending), pending
    assert "pending: Resources (waiting for resources to free up), position 1 of 1" in \
        " ".join(event.message for event in lifecycle["slurm_events"])


def test_every_rank_reported_its_loss_and_steps(lifecycle):
    ranks = lifecycle["ranks"]
    assert {rank: (row.state, row.exit_code) for rank, row in ranks.items()} == {0: ("exited", 0),
                                                                                      1: ("exited", 0)}
    assert ranks[0].host == ranks[1].host == lifecycle["nodes"][0].host  # the node Slurm named
    for rank in (0, 1):
        steps = {step for r, _t, step, name, _v, _s in lifecycle["metrics"] if r == rank and name == "loss"}
        assert steps == set(range(STEPS)), f"rank {rank}: loss at steps {sorted(steps)}"


def test_every_line_a_rank_printed_on_its_slurm_node_is_stored_under_that_rank(lifecycle):
    """Worker output on a Slurm node: the agent's output socket hands each worker its pipes, and the
    agent forwards each line with the rank and the node Slurm named."""
    printed = [row for row in lifecycle["logs"] if row.stream == "stdout" and " step " in row.line]
    by_text = {row.line.split(" loss ")[0]: (row.rank, row.node) for row in printed}
    host = lifecycle["nodes"][0].host
    assert len(printed) == 2 * STEPS  # each line once
    assert by_text == {f"rank {rank}/2 step {step}": (rank, host) for rank in (0, 1) for step in range(STEPS)}


def test_rankwatch_and_slurms_own_record_agree_on_the_end(lifecycle):
    run = lifecycle["run"]
    assert run.status == "succeeded" and run.exit_code == 0
    assert run.summary["slurm"]["job_id"] == lifecycle["job"] and run.summary["slurm"]["state"] == "COMPLETED"
    assert lifecycle["slurm_job"]["JobState"] == "COMPLETED" and lifecycle["slurm_job"]["ExitCode"] == "0:0"
    assert lifecycle["slurm_record"]["JobState"] == "COMPLETED"  # Slurm's job completion file
    [node] = lifecycle["nodes"]
    assert node.state == "exited" and node.host == lifecycle["slurm_job"]["NodeList"]
    assert run.command.startswith("#!/bin/bash")  # the sbatch script, to submit it by hand


def test_attach_follows_a_queued_run_detaches_and_reattaches_to_it_running(lifecycle):
    assert lifecycle["saw_pending"], lifecycle["attach_output"]
    assert f"Slurm job {lifecycle['job']}: pending: Resources" in lifecycle["attach_output"]
    assert lifecycle["attach_code"] in (0, 130)
    reattached = lifecycle["reattached"]
    assert reattached.returncode == 0, reattached.stderr[-2000:]
    assert f"rank 1/2 step {STEPS - 1}" in reattached.stdout
    assert f"Slurm job {lifecycle['job']}: running on " in reattached.stderr


# ---- the runs Slurm or Rankwatch ended ------------------------------------------------------------

def torchrun_status_reported_by_the_agent(filler: dict) -> int:
    """torchrun's exit status on the filler's node, as its agent reported it: the agent outlived its
    workers and torchrun, so Slurm never had to SIGKILL the step after its KillWait."""
    [node] = filler["nodes"]
    assert node.detail.startswith("torchrun exit status "), node
    return int(node.detail.removeprefix("torchrun exit status "))


def test_the_run_marker_is_on_what_the_agent_started_and_not_on_slurms_own_processes(lifecycle):
    """Rankwatch's clean-up on a node ends what carries the run's marker: never srun or the batch
    script, which wait for the agent and which Slurm ends."""
    for name, commands in lifecycle["marked"].items():
        assert any(" -m runner.launch.keeper " in line for line in commands), (name, commands)
        assert any(" -m rankwatch._bootstrap " in line for line in commands), (name, commands)
        assert not any(line.startswith("srun ") or "slurm_script" in line or "runner.slurm.agent" in line
                       for line in commands), (name, commands)


def test_stop_cancels_the_slurm_job_and_leaves_no_process_of_it(lifecycle):
    blocker = lifecycle["fillers"]["blocker"]
    assert blocker["run"].status == "stopped", lifecycle["outputs"]["blocker"][1][-3000:]
    assert blocker["run"].summary["slurm"]["state"] == "CANCELLED"
    assert f"Slurm job {lifecycle['jobs']['blocker']} cancelled" in blocker["run"].summary["headline"]
    assert lifecycle["slurm_jobs"]["blocker"]["JobState"] == "CANCELLED"
    assert [rank.state for rank in blocker["ranks"]] == ["stopped", "stopped"]
    # torchrun ended on Slurm's one SIGTERM (a second one would have broken off its shutdown)
    assert torchrun_status_reported_by_the_agent(blocker) != 128 + signal.SIGKILL
    assert lifecycle["survivors"]["blocker"] == []  # batch script, srun, agent, torchrun, workers: none left


def test_a_run_past_its_time_limit_is_reported_as_timeout_with_its_ranks(lifecycle):
    run, ranks = lifecycle["fillers"]["limited"]["run"], lifecycle["fillers"]["limited"]["ranks"]
    assert "#SBATCH --time=1\n" in run.command
    shortened = lifecycle["shortened"]
    assert lifecycle["slurm_jobs"]["limited"]["JobState"] == "TIMEOUT", (shortened.returncode, shortened.stderr)
    assert run.status == "failed" and run.summary["outcome"] == "timeout"
    assert [rank.state for rank in ranks] == ["stopped"]
    headline = run.summary["headline"]
    assert headline.startswith(f"Slurm job {lifecycle['jobs']['limited']} reached its time limit (00:01:00) after ")
    assert "; rank 0 stopped at step " in headline
    assert lifecycle["codes"]["limited"] == run.exit_code != 0
    stderr = lifecycle["outputs"]["limited"][1]
    assert "reached its time limit" in stderr[stderr.rindex("── Rankwatch"):]
    torchrun_status_reported_by_the_agent(lifecycle["fillers"]["limited"])  # Slurm sends SIGTERM twice here
    assert any(event.message.endswith("its agent stopped the workers: Slurm ended the job step (SIGTERM)")
               for event in lifecycle["fillers"]["limited"]["warnings"]), lifecycle["fillers"]["limited"]["warnings"]
    assert lifecycle["survivors"]["limited"] == []


def test_a_scancel_from_outside_is_reported_as_cancelled(lifecycle):
    run, ranks = lifecycle["fillers"]["outsider"]["run"], lifecycle["fillers"]["outsider"]["ranks"]
    assert lifecycle["slurm_jobs"]["outsider"]["JobState"] == "CANCELLED"
    assert run.status == "stopped" and run.summary["outcome"] == "cancelled"
    assert run.summary["headline"].startswith(
        f"Slurm job {lifecycle['jobs']['outsider']} was cancelled outside Rankwatch")
    assert [rank.state for rank in ranks] == ["stopped"]
    assert lifecycle["codes"]["outsider"] == run.exit_code == 143  # as for SIGTERM
    assert torchrun_status_reported_by_the_agent(lifecycle["fillers"]["outsider"]) != 128 + signal.SIGKILL
    assert any(event.message.endswith("its agent stopped the workers: Slurm ended the job step (SIGTERM)")
               for event in lifecycle["fillers"]["outsider"]["warnings"]), lifecycle["fillers"]["outsider"]["warnings"]
    assert lifecycle["survivors"]["outsider"] == []
