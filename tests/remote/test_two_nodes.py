"""Two "nodes" over real ssh: node 0 is this machine, node 1 is 127.0.0.1 through the
test's sshd, so its torchrun runs under an agent, with c10d rendezvous between them.

One finished job serves the assertions about outcome, telemetry and log tags, and the
head's TCP listener is probed with wrong, missing and misplaced credentials while it
runs. Stop and SIGKILL of the head each get a job of their own.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest

from rankwatch import protocol
from runner.store.store import RunStore
from tests.jobs import (
    SCRIPTS,
    latest_run,
    processes_with_marker,
    ranks_running,
    rankwatch,
    start_rankwatch,
    wait_for,
)

pytestmark = [pytest.mark.ssh, pytest.mark.torchrun]

HOSTS = "localhost:1,127.0.0.1:1"
NODE_OF_RANK = {0: "localhost", 1: "127.0.0.1"}


def two_node_args(script: str, *script_args: str) -> list[str]:
    return ["run", "--plain", "--hosts", HOSTS, "--gpus", "cpu", "--interpreter", sys.executable,
            "--omp-num-threads", "1", str(SCRIPTS / script), *script_args]


def ssh_clients(run_key: str) -> list[psutil.Process]:
    """ssh processes started for this job (their remote command names the job key)."""
    found = []
    for process in psutil.process_iter(["name", "cmdline"]):
        cmdline = process.info["cmdline"] or []
        if process.info["name"] == "ssh" and any(run_key in word for word in cmdline):
            found.append(process)
    return found


def talk_to_head(port: int, *messages: bytes) -> list[dict]:
    """Send ``messages`` to the head's agent port; everything it answers until it hangs up."""
    with socket.create_connection(("127.0.0.1", port), timeout=15) as client:
        for message in messages:
            client.sendall(message)
        received = b""
        while chunk := client.recv(65536):
            received += chunk
    return [json.loads(line) for line in received.splitlines()]


@pytest.fixture(scope="module")
def finished_job(sshd, tmp_path_factory):
    home = tmp_path_factory.mktemp("two-nodes-home")
    env = dict(os.environ, RANKWATCH_HOME=str(home), RANKWATCH_SSH_OPTIONS=sshd.options,
               RANKWATCH_SOCKET_DIR=tempfile.mkdtemp(prefix="rw-", dir="/tmp"))
    started = time.monotonic()
    runner = start_rankwatch(*two_node_args("remote_train.py", "--steps", "60"), env=env)
    store_file = home / "data" / "runs.db"
    run = wait_for(lambda: latest_run(home), 60, what="the run to be recorded")
    with RunStore(store_file, readonly=True) as store:
        wait_for(lambda: len([r for r in store.ranks(run.id) if r.state == "running"]) == 2, 90,
                 what="both ranks to say hello")
        [listening] = store.stored_events(run.id, kind="agents_listening")
    listeners = {c.laddr.ip for c in psutil.Process(runner.pid).net_connections(kind="tcp")
                 if c.status == psutil.CONN_LISTEN}
    port = listening.fields["port"]
    probes = {
        "wrong token": talk_to_head(port, protocol.encode("agent_hello", token="not-the-token", run_key=run.run_key,
                                                          node_rank=1, host="intruder")),
        "no token": talk_to_head(port, protocol.encode("agent_hello", run_key=run.run_key, node_rank=1)),
        "subscriber": talk_to_head(port, protocol.encode("subscribe", history=True)),
        "worker hello": talk_to_head(port, protocol.encode("hello", token="x", rank=0)),
        "garbage": talk_to_head(port, b"GET / HTTP/1.0\r\n\r\n"),
    }
    stdout, stderr = runner.communicate(timeout=180)
    with RunStore(store_file, readonly=True) as store:
        stored = {"run": store.stored_run(run.id), "ranks": {r.rank: r for r in store.ranks(run.id)},
                  "nodes": {n.node_rank: n for n in store.stored_nodes(run.id)},
                  "logs": store.log_lines(run.id), "refused": store.stored_events(run.id, kind="refused"),
                  "metrics": {(rank, name) for rank, *_rest, name in
                              [(m[0], m[3]) for m in store.metrics(run.id)]},
                  "process_ranks": {row[1] for row in store.process_samples(run.id)}}
    return {"returncode": runner.returncode, "stdout": stdout, "stderr": stderr, "seconds": time.monotonic() - started,
            "probes": probes, "listeners": listeners, "port": port, **stored}


def test_two_node_job_over_ssh_finishes(finished_job):
    assert finished_job["returncode"] == 0, finished_job["stderr"][-3000:]
    assert finished_job["run"].status == "succeeded"
    assert {n: row.state for n, row in finished_job["nodes"].items()} == {0: "exited", 1: "exited"}
    assert {r: (row.node_rank, row.host) for r, row in finished_job["ranks"].items()} == {
        0: (0, "localhost"), 1: (1, "127.0.0.1")}


def test_telemetry_from_every_rank_is_in_the_store(finished_job):
    for rank in (0, 1):
        for name in ("loss", "step_time"):
            assert (rank, name) in finished_job["metrics"], f"no {name} for rank {rank}"
    assert finished_job["process_ranks"] >= {0, 1}  # rank 1's CPU and memory sampled on its node by the agent


def test_every_log_line_is_tagged_with_its_node(finished_job):
    logs = finished_job["logs"]
    for rank in NODE_OF_RANK:
        steps = [row for row in logs if row.rank == rank and f"rank {rank}/2 step" in row.line]
        assert len(steps) == 60, f"rank {rank} printed 60 steps"
    assert all(row.node == NODE_OF_RANK[row.rank] for row in logs if row.rank is not None)
    assert all(row.node in NODE_OF_RANK.values() for row in logs)  # torchrun's own lines too
    assert "[127.0.0.1 rank 1] rank 1/2 step 59" in finished_job["stdout"]


def test_the_head_listens_for_agents_only_on_loopback_and_refuses_clients_without_the_token(finished_job):
    assert finished_job["listeners"] <= {"127.0.0.1"}, "the head must not listen on every interface"
    for name, answer in finished_job["probes"].items():
        assert [m["type"] for m in answer] == ["error"], f"{name}: {answer}"  # nothing else, then hung up
    assert "wrong or missing token" in finished_job["probes"]["wrong token"][0]["message"]
    assert "wrong or missing token" in finished_job["probes"]["no token"][0]["message"]
    assert len(finished_job["refused"]) == 5
    assert finished_job["returncode"] == 0  # and the job went on unaffected


def start_forever_job() -> tuple:
    runner = start_rankwatch(*two_node_args("forever.py"))
    run = wait_for(lambda: latest_run(), 60, what="the run to be recorded")
    wait_for(lambda: ranks_running(run.id, 2), 90, what="both ranks to say hello")
    run_key = run.run_key
    on_node_one = [p for p in processes_with_marker(run_key) if "agent" in p.cmdline()]
    assert on_node_one, "node 1's agent carries the job marker"
    assert ssh_clients(run_key)
    return runner, run, run_key


def test_stop_ends_every_process_of_the_job_on_both_nodes(over_ssh):
    runner, run, run_key = start_forever_job()
    runner.send_signal(signal.SIGINT)
    runner.communicate(timeout=40)
    assert runner.returncode == 130
    assert processes_with_marker(run_key) == []
    assert ssh_clients(run_key) == []
    with RunStore(readonly=True) as store:
        assert store.stored_run(run.id).status == "stopped"
        assert all(node.state != "lost" for node in store.stored_nodes(run.id))  # stopped, not lost


def test_sigkill_of_the_head_runner_leaves_no_process_on_either_node(over_ssh):
    runner, _run, run_key = start_forever_job()
    os.kill(runner.pid, signal.SIGKILL)
    runner.communicate(timeout=10)
    wait_for(lambda: processes_with_marker(run_key) == [] and ssh_clients(run_key) == [], 30,
             what="every process of the job to end")


def test_a_node_that_drops_out_is_lost_with_the_time_and_the_job_ends(over_ssh):
    runner, run, run_key = start_forever_job()
    [agent] = [p for p in processes_with_marker(run_key) if p.cmdline()[-2:] == ["runner", "agent"]]
    killed_at = time.time()
    agent.kill()  # as if node 1 crashed: no node_exit, its connection just drops
    runner.communicate(timeout=60)
    assert runner.returncode != 0
    with RunStore(readonly=True) as store:
        nodes = {n.node_rank: n for n in store.stored_nodes(run.id)}
        [lost] = store.stored_events(run.id, kind="node_lost")
        ranks = {r.rank: r for r in store.ranks(run.id)}
        finished = store.stored_run(run.id)
    assert finished.status == "failed" and finished.summary["first_failure"]["rank"] == 1
    assert nodes[1].state == "lost" and nodes[0].state != "lost"
    assert killed_at <= lost.t <= killed_at + 10 and killed_at <= nodes[1].changed <= killed_at + 10
    assert time.strftime("%H:%M:%S", time.localtime(lost.t)) in nodes[1].detail
    assert ranks[1].state == "lost"
    wait_for(lambda: processes_with_marker(run_key) == [] and ssh_clients(run_key) == [], 15,
             what="every process of the job to end")


def test_a_failure_on_the_remote_node_is_named_with_its_rank_host_and_exception(over_ssh):
    result = rankwatch(*two_node_args("fail_rank1.py", "--on-node", "1"), timeout=180)
    assert result.returncode == 1, result.stderr[-3000:]
    summary = result.stderr[result.stderr.rindex("── Rankwatch"):]
    # c10d gives node 1 rank 0 or rank 1 (it orders the agents by process id): the summary names the one it got
    assert re.search(r"rank (\d) on 127\.0\.0\.1 failed first \(exit code 1\): ValueError: bad batch shape on "
                     r"rank \1\n", summary), summary
    with RunStore(readonly=True) as store:
        run = store.stored_run(store.resolve_run_id("last"))
        nodes = {n.node_rank: n for n in store.stored_nodes(run.id)}
    assert nodes[1].state == "failed" and nodes[1].detail == "torchrun exit status 1"


def test_a_hang_on_the_remote_node_shows_the_remote_ranks_stack_and_flight_recorder_with_its_host(over_ssh):
    """Rank 0 (this node) waits in a barrier, rank 1 (node 1, over ssh) sleeps in a helper: the head asks
    node 1's agent for rank 1's stack; its Flight Recorder comes through the agent's relay. About 40 s."""
    runner = start_rankwatch(*two_node_args("diag_hang.py")[:-1], "--stall-timeout", "5", str(SCRIPTS / "diag_hang.py"))
    try:
        run = wait_for(lambda: latest_run(), 60, what="the run to be recorded")

        def events_of(kind: str):
            with RunStore(readonly=True) as store:
                return store.stored_events(run.id, kind=kind)
        [capture] = wait_for(lambda: events_of("stacks"), 150, interval=0.5, what="the stall's stack capture")
        deadline = time.monotonic() + 30
        while not (flights := events_of("flight_recorder")) and time.monotonic() < deadline:
            time.sleep(0.5)
        seen = [f"{event.kind.value} (rank {event.rank}): {event.message}" for event in events_of(None)]  # why, if none came
    finally:
        runner.send_signal(signal.SIGINT)
        _out, err = runner.communicate(timeout=60)
    stacks_folder = Path(capture.fields["text_path"]).parent
    assert len(flights) == 1, (f"Flight Recorder events: {flights}\nevents: {seen}\n"
                               f"{stacks_folder}: {sorted(path.name for path in stacks_folder.iterdir())}\n"
                               f"runner stderr: {err[-6000:]}")
    [flight] = flights
    data = capture.fields
    assert data["missing"] == [] and data["ranks"] == [0, 1]
    verdict = data["verdict"]  # shown whole when it is wrong: its "progressing" says which rank it thought moved
    assert verdict["culprits"] == [1] and verdict["collective"] == "barrier", verdict
    assert any("diag_hang.py" in line and "wait_for_checkpoint" in line for line in verdict["details"]), verdict
    assert data["hosts"] == {"1": "127.0.0.1"}
    dumps = Path(data["text_path"]).read_text(encoding="utf-8")
    assert "==== rank 1 (on 127.0.0.1, through its node's agent): every thread" in dumps
    assert "wait_for_checkpoint" in dumps.split("==== rank 1 (on 127.0.0.1")[1]
    assert flight.fields["ranks"] == [0, 1] and flight.fields["culprits"] == [1]
    assert "rank 1 is the culprit" in err
