"""The agent on its own (no ssh, no torch): a fake head on TCP, a fake torchrun+worker.

What it forwards and how it tags it, and that it stops its node's processes when the
head goes away by each route (stdin ends, the TCP connection drops) or asks it to.
Here no sentinel of a head runner is around to clean up, so these tests show the
agent's own cleanup.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import threading
import time

import psutil
import pytest

from rankwatch import protocol
from runner import paths
from runner.remote.launch_message import LaunchMessage, stop_line
from tests.jobs import SCRIPTS, processes_with_marker, wait_for

TOKEN = "the-run_key-token"


class FakeHead:
    """A TCP listener in place of the head runner: keeps every message of one agent's that the
    real hub would take (``read_as_the_hub_does``); the reasons of the others go to ``bad_lines``."""

    def __init__(self):
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.messages: list[dict] = []
        self.bad_lines: list[str] = []
        self.connection: socket.socket | None = None
        self.closed_by_agent = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        self.connection, _ = self.server.accept()
        buffer = b""
        while True:
            try:
                chunk = self.connection.recv(65536)
            except OSError:
                break
            if not chunk:
                break
            buffer += chunk
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                if line.strip():
                    self._keep(line)
        self.closed_by_agent.set()

    def _keep(self, line: bytes) -> None:
        try:
            fields = read_as_the_hub_does(line, first=not self.messages)
        except protocol.ProtocolError as error:
            self.bad_lines.append(error.reason)
            return
        self.messages.append(fields)

    def of_type(self, kind: str) -> list[dict]:
        return [m for m in list(self.messages) if m["type"] == kind]

    def drop(self) -> None:
        """The head vanishes: its end of the connection closes."""
        self.connection.shutdown(socket.SHUT_RDWR)
        self.connection.close()

    def close(self) -> None:
        self.server.close()


def read_as_the_hub_does(line: bytes, first: bool) -> dict:
    """An agent's line as the real hub takes it over TCP (``runner.hub.server``): an
    ``agent_hello`` with the run's token first, then worker and agent messages, each through its
    typed ``from_wire``.

    Raises:
        rankwatch.protocol.ProtocolError: the real hub would refuse the line.
    """
    fields = protocol.decode(line)
    kind = fields["type"]
    if first and (kind != protocol.AgentHello.TYPE or fields.get("token") != TOKEN):
        raise protocol.ProtocolError("not_allowed_first", f"{kind} before the agent's hello with the token")
    if kind == protocol.Metrics.TYPE:
        protocol.Metrics.from_wire(dict(fields))
    elif kind in protocol.WORKER_TYPES or kind in protocol.AGENT_TYPES:
        protocol.message_from_wire(dict(fields))
    else:
        raise protocol.ProtocolError("wrong_direction", str(kind))
    return fields


def start_agent(head: FakeHead, run_key: str, mode: str, workdir, *mode_args: str) -> subprocess.Popen:
    env = dict(os.environ, RANKWATCH_RUN_KEY=run_key)  # as the head's remote command sets it
    agent = subprocess.Popen([sys.executable, "-m", "runner", "agent"], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    launch = LaunchMessage(
        token=TOKEN, head_host="127.0.0.1", head_port=head.port, run_key=run_key, run=7, node_rank=1,
        host="node-b", argv=(sys.executable, str(SCRIPTS / "remote_fake_node.py"), mode, *mode_args),
        env={"RANKWATCH_NODE_RANK": "1", "RANKWATCH_NODE_HOST": "node-b"}, cwd=str(workdir), grace=2.0,
        sample_interval=0.25)
    agent.stdin.write(launch.encode())
    agent.stdin.flush()
    return agent


@pytest.fixture
def head():
    fake = FakeHead()
    yield fake
    fake.close()


def test_agent_forwards_tagged_messages_reports_a_lost_worker_and_exits_with_torchruns_status(head, tmp_path):
    run_key = "agenttest" + os.urandom(4).hex()
    agent = start_agent(head, run_key, "exit", tmp_path)
    agent.wait(timeout=30)  # stdin stays open, as an ssh session to a live head would
    assert agent.returncode == 3, agent.stderr.read()
    assert head.closed_by_agent.wait(5)
    kinds = [m["type"] for m in head.messages]
    assert kinds[0] == "agent_hello" and kinds[-1] == "node_exit"
    assert head.bad_lines == []  # the real hub takes every line the agent sent
    hello = head.messages[0]
    assert hello["token"] == "the-run_key-token" and hello["node_rank"] == 1 and hello["run_key"] == run_key
    [worker_hello] = head.of_type("hello")
    assert worker_hello["rank"] == 0 and "token" not in worker_hello  # the agent's own token stays there
    [metrics] = head.of_type("metrics")
    assert metrics["rank"] == 0 and metrics["items"][0][2:4] == ["loss", 0.5]
    lines = [m for m in head.of_type("log") if m["rank"] == 0]
    assert [(m["line"], m["node"], m["node_rank"]) for m in lines] == [("hello from the fake worker", "node-b", 1)]
    assert [m["rank"] for m in head.of_type("worker_lost")] == [0]  # it died without its exit message
    assert head.messages[-1]["code"] == 3 and head.messages[-1]["node_rank"] == 1
    assert processes_with_marker(run_key) == []


@pytest.mark.parametrize("how", ["stdin ends", "tcp drops", "stop line"])
def test_agent_stops_its_workers_when_the_head_goes_away_or_asks(head, tmp_path, how):
    run_key = "agenttest" + os.urandom(4).hex()
    agent = start_agent(head, run_key, "forever", tmp_path)
    wait_for(lambda: head.of_type("hello"), 20, what="the fake worker's hello")
    worker_pid = head.of_type("hello")[0]["pid"]
    assert worker_pid in [p.pid for p in processes_with_marker(run_key)]

    socket_path = paths.socket_dir() / f"agent-{run_key[:12]}-1.sock"
    with socket.socket(socket.AF_UNIX) as intruder:  # the relay wants the agent's token too
        intruder.connect(str(socket_path))
        intruder.sendall(b'{"type":"hello","v":1,"token":"guess","rank":5}\n')
        assert b"wrong or missing token" in intruder.recv(1000)
        assert intruder.recv(1000) == b""

    started = time.monotonic()
    if how == "stdin ends":
        agent.stdin.close()
    elif how == "tcp drops":
        head.drop()
    else:
        agent.stdin.write(stop_line(force=False))
        agent.stdin.flush()
    agent.wait(timeout=20)
    assert time.monotonic() - started < 10  # SIGTERM is enough for this worker: no grace period wasted
    assert processes_with_marker(run_key) == []
    assert all(m.get("rank") != 5 for m in head.of_type("hello"))
    if how != "tcp drops":
        [node_exit] = head.of_type("node_exit")
        expected = "ssh session" if how == "stdin ends" else "asked to stop"
        assert expected in node_exit["reason"]


def test_a_child_left_behind_by_the_nodes_torchrun_is_ended_before_the_agent_reports(head, tmp_path):
    """torchrun ends of itself, its worker's child (in a session of its own, ignoring SIGTERM) would live
    on: the node ends it as the head's does, SIGKILL after the keeper's grace period."""
    run_key = "agenttest" + os.urandom(4).hex()
    agent = start_agent(head, run_key, "exit", tmp_path, "child")
    try:
        agent.wait(timeout=30)
        assert agent.returncode == 3, agent.stderr.read()
        assert processes_with_marker(run_key) == []
        assert head.messages[-1]["type"] == "node_exit"
    finally:
        kill_what_is_left(run_key)


def test_a_sigkilled_agent_leaves_nothing_of_its_node_behind(head, tmp_path):
    """The agent dies (OOM killer, kill -9): its torchrun's keeper stops torchrun and, after the grace
    period, kills what is left, a worker's child that ignores SIGTERM included."""
    run_key = "agenttest" + os.urandom(4).hex()
    agent = start_agent(head, run_key, "forever", tmp_path, "child")
    try:
        wait_for(lambda: len(processes_with_marker(run_key)) >= 4, 20, what="agent, keeper, torchrun and its child")
        agent.kill()
        agent.wait(timeout=5)
        killed = time.monotonic()
        while processes_with_marker(run_key) and time.monotonic() - killed < 10:
            time.sleep(0.2)
        assert processes_with_marker(run_key) == []
    finally:
        kill_what_is_left(run_key)


def kill_what_is_left(run_key: str) -> None:
    """What a failing test left behind (by its run's marker: ours only)."""
    for process in processes_with_marker(run_key):
        with contextlib.suppress(psutil.Error):
            process.kill()


def test_the_fake_head_refuses_the_lines_the_real_hub_refuses_from_an_agent(tmp_path):
    """The same agent lines to the real hub over TCP and to ``FakeHead``: a worker_lost whose rank
    is not a number, metrics that name no rank, a subscriber's message; a good heartbeat."""
    import asyncio

    from tests.hubs import open_hub

    def line(**fields: object) -> bytes:
        return protocol.encode(str(fields.pop("type")), **fields)

    lines = [protocol.AgentHello(1, token=TOKEN, run_key="k", host="node-b").encode(),
             line(type="worker_lost", rank="x", t=1.0), line(type="metrics", items=[[1.0, 0, "loss", 0.5, "auto"]]),
             line(type="subscribe", history=False), line(type="heartbeat", rank=0, t=2.0)]

    async def real_hub_refusals() -> dict[str, int]:
        hub, _socket_path = await open_hub(tmp_path, token=TOKEN)
        port = await hub.serve_tcp("127.0.0.1", 0)
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"".join(lines))
        await writer.drain()
        await asyncio.sleep(0.3)
        writer.close()
        await hub.close()
        return {key: count for key, count in hub.stats.items() if key.startswith("bad_")}

    assert asyncio.run(real_hub_refusals()) == {"bad_worker_lost": 1, "bad_metrics": 1,
                                                "bad_line_wrong_direction": 1}
    head = FakeHead()
    try:
        with socket.create_connection(("127.0.0.1", head.port)) as agent:
            agent.sendall(b"".join(lines))
        assert head.closed_by_agent.wait(5)
        assert [message["type"] for message in head.messages] == ["agent_hello", "heartbeat"]
        assert sorted(head.bad_lines) == ["invalid", "invalid", "wrong_direction"]
    finally:
        head.close()
