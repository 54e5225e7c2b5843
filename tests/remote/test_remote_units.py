"""The pieces of multi-node launching that need no ssh and no job."""

from __future__ import annotations

import asyncio
import os
import shlex
import time

import pytest

from rankwatch import protocol
from runner.hub.hub import Hub
from runner.hub.observer import HubObserver
from runner.launch.command import BOOTSTRAP_MODULE
from runner.profile.resolve import ResolvedNode
from runner.remote import addresses
from runner.remote.launch_message import (
    LaunchMessage,
    LaunchMessageError,
    decode_control,
    localise,
    stop_line,
)
from runner.remote.preflight import HeadVersions, judge
from runner.remote.remote_node import RemoteNode
from runner.remote.ssh import explain_ssh_failure, remote_python_command, ssh_argv

NODE = ResolvedNode(node_rank=1, host="node-b", processes=2, python="/opt/my envs/python", workdir="/data/job dir",
                    user="alice", ssh_port=2222)


def launch_message(**changes) -> LaunchMessage:
    fields = dict(token="s3cret-token", head_host="10.0.0.1", head_port=4000, run_key="runkey", run=3, node_rank=1,
                  host="node-b", argv=("python", "-m", "torch.distributed.run", "--tee=3", "--log-dir=",
                                       "-m", BOOTSTRAP_MODULE, "train.py", "--log-dir=keep"),
                  env={"RANKWATCH_SOCKET": "", "RANKWATCH_TOKEN": "", "A": "1"}, cwd="/data/job dir")
    fields.update(changes)
    return LaunchMessage(**fields)


def test_ssh_argv_is_a_list_with_options_before_the_host_and_one_quoted_remote_command(monkeypatch):
    monkeypatch.setenv("RANKWATCH_SSH_OPTIONS", "-F '/tmp/my config' -o LogLevel=ERROR")
    command = remote_python_command(NODE.python, ["-m", "runner", "agent"], env={"RANKWATCH_RUN_KEY": "k"})
    argv = ssh_argv(NODE, command)
    assert argv[0] == "ssh" and argv[-3:] == ["--", "node-b", command]
    assert argv[argv.index("BatchMode=yes") - 1: argv.index("BatchMode=yes") + 1] == ["-o", "BatchMode=yes"]
    assert argv[argv.index("-F") + 1] == "/tmp/my config"
    assert argv[argv.index("-p") + 1] == "2222" and argv[argv.index("-l") + 1] == "alice"
    assert shlex.split(command) == ["cd", "/", "&&", "exec", "env", "RANKWATCH_RUN_KEY=k", "/opt/my envs/python",
                                    "-m", "runner", "agent"]


def test_the_token_goes_over_stdin_never_into_the_ssh_command():
    message = launch_message()
    node = RemoteNode(NODE, message, on_lines=lambda *_: None, on_lost=lambda *_: None)
    assert not any("s3cret-token" in word for word in node.argv)
    assert b"s3cret-token" in message.encode()
    assert LaunchMessage.decode(message.encode()) == message


@pytest.mark.parametrize("line, complaint", [
    (b"", "no launch message on stdin"),
    (b"not json\n", "not valid"),
    (b'{"type":"stop","v":1}\n', "expected a launch message first"),
    (b'{"type":"launch","v":1,"head_host":"h"}\n', "no valid 'token'"),
])
def test_a_bad_launch_message_is_one_clear_line(line, complaint):
    with pytest.raises(LaunchMessageError, match=complaint):
        LaunchMessage.decode(line)


def test_control_lines():
    assert decode_control(stop_line(force=True)) == {"type": "stop", "v": 1, "force": True}
    assert decode_control(b"garbage\n") is None
    request = decode_control(protocol.StackRequest([1, 3]).encode())
    assert request == {"type": "stack_request", "v": 1, "ranks": [1, 3]}
    assert protocol.StackRequest.from_wire({"ranks": [1, "x", True, 2]}).ranks == [1, 2]


def test_the_agent_fills_in_only_its_own_socket_token_and_folders():
    command = localise(launch_message(), socket="/run/a.sock", token="local", log_dir="/w/torchrun", stacks_dir="/w/s")
    assert command.argv[4] == "--log-dir=/w/torchrun"
    assert command.argv[-1] == "--log-dir=keep"  # the script's own argument is left alone
    assert command.env["RANKWATCH_SOCKET"] == "/run/a.sock" and command.env["RANKWATCH_TOKEN"] == "local"
    assert command.env["RANKWATCH_RUN_KEY"] == "runkey" and command.env["A"] == "1" and command.cwd == "/data/job dir"


@pytest.mark.parametrize("stderr, advice", [
    ("alice@node-b: Permission denied (publickey).", "ssh-copy-id -p 2222 alice@node-b"),
    ("Host key verification failed.", "run `ssh -p 2222 alice@node-b` once by hand"),
    ("ssh: Could not resolve hostname node-b: Name or service not known", "check the host name"),
    ("ssh: connect to host node-b port 2222: Connection refused", "is sshd running on node-b (port 2222)?"),
    ("ssh: connect to host node-b port 2222: Connection timed out", "check the network"),
])
def test_ssh_failures_come_with_advice(stderr, advice):
    text = explain_ssh_failure(NODE, "Warning: Permanently added 'x'\n" + stderr + "\n")
    assert text.startswith(f"cannot reach node-b over ssh ({stderr})") and advice in text


def test_versions_that_differ_from_the_head_are_refused():
    info = {"rankwatch": "0.2.0", "torch": "2.3.1+cu121", "workdir": {"path": "/w", "exists": True},
            "script": {"path": "/w/train.py", "exists": False}}
    head = HeadVersions(rankwatch="0.1.0", torch="2.4.0+cpu", python="/venv/bin/python")
    messages = [str(error) for error in judge(None, NODE, info, head)]
    assert messages == [
        "nodes[1].python: Rankwatch 0.2.0 is installed for /opt/my envs/python on node-b but 0.1.0 here; install "
        "the same version on every node: /opt/my envs/python -m pip install rankwatch==0.1.0",
        "nodes[1].python: torch 2.3.1+cu121 on node-b but 2.4.0+cpu on the head (/venv/bin/python); torchrun's "
        "rendezvous needs the same torch release on every node",
        "script: /w/train.py does not exist on node-b (node 1); copy the code there or give a path that exists on "
        "every node"]
    same_release = dict(info, rankwatch="0.1.0", torch="2.4.1+cu121", script=None)
    assert judge(None, NODE, same_release, head) == []


def test_head_address_toward_a_node(monkeypatch):
    monkeypatch.setattr(addresses, "configured_hostname", lambda node: node.host)
    local = ResolvedNode(1, "localhost", 1, "python3", "/", None, None)
    assert addresses.address_toward(local) == "127.0.0.1"
    assert addresses.address_toward(ResolvedNode(1, "127.0.0.2", 1, "python3", "/", None, None)) == "127.0.0.1"
    with pytest.raises(addresses.HeadAddressError) as error:
        addresses.address_toward(ResolvedNode(2, "no-such-host.invalid", 1, "python3", "/", None, None))
    assert error.value.field == "nodes[2].host" and "RANKWATCH_HEAD_ADDRESS" in error.value.message


def test_the_hub_over_tcp_takes_an_agents_messages_and_reports_its_connection(tmp_path):
    async def scenario():
        hub = Hub(tmp_path / "runs.db", "job-token")
        await hub.create_run({}, run_key="k", profile="t", spec_toml="", command=None, host="h", workdir=None,
                             runner_pid=os.getpid(), socket=None, world_size=4, status="running")
        port = await hub.serve_tcp("127.0.0.1", 0)
        hub.start()
        agent_events, lost = [], []

        class Recorder(HubObserver):
            def on_agent_connected(self, hello):
                agent_events.append(("connected", hello.node_rank))

            def on_agent_closed(self, node_rank):
                agent_events.append(("closed", node_rank))

            def on_worker_lost(self, rank, t):
                lost.append(rank)

        hub.add_observer(Recorder())
        _reader, writer = await asyncio.open_connection("127.0.0.1", port)
        for message_type, fields in [
            ("agent_hello", {"token": "job-token", "run_key": "k", "node_rank": 1, "host": "node-b"}),
            ("hello", {"rank": 3, "local_rank": 1, "node_rank": 1, "world_size": 4, "host": "node-b", "pid": 42}),
            ("process_samples", {"node_rank": 1, "rows": [[time.time(), 3, 42, 150.0, 2 ** 30, 9], ["bad"]]}),
            ("worker_lost", {"rank": 3, "t": time.time()}),
            ("node_exit", {"node_rank": 1, "t": time.time(), "code": 0, "reason": None}),
        ]:
            writer.write(protocol.encode(message_type, **fields))
        await writer.drain()
        writer.close()
        await asyncio.sleep(0.3)
        row = hub.model.row(3)
        await hub.close()
        return agent_events, lost, row, hub.stats

    agent_events, lost, row, stats = asyncio.run(scenario())
    assert agent_events == [("connected", 1), ("closed", 1)]
    assert lost == [3]
    assert (row.node_rank, row.host, row.cpu_percent, row.rss_bytes) == (1, "node-b", 150.0, 2 ** 30)
    assert stats["bad_process_samples"] == 1
