"""Many ranks at once: a connection whose hello is already waiting is never evicted as unauthenticated."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time

import pytest

from rankwatch import protocol
from runner.hub import server
from tests.hubs import TOKEN, hello, open_hub

RANKS = 1024


RANKS_PROCESS = """
import socket, sys, time
hellos = sys.stdin.buffer.read().splitlines(keepends=True)
clients = []
for line in hellos:  # every rank connects and says hello at once, without waiting for an answer
    client = socket.socket(socket.AF_UNIX)
    client.connect(sys.argv[1])
    client.sendall(line)
    clients.append(client)
print("connected", flush=True)
sys.stdin.close()
time.sleep(60)
"""


def test_a_thousand_ranks_connecting_at_once_are_all_accepted(tmp_path, monkeypatch):
    read_line = server.read_bounded_line

    async def read_slowly(reader):  # as on a loaded 2-core machine: 1,024 hellos take seconds to read
        time.sleep(0.004)
        return await read_line(reader)

    monkeypatch.setattr(server, "read_bounded_line", read_slowly)

    async def scenario():
        hub, socket_path = await open_hub(tmp_path)
        ranks_process = await asyncio.create_subprocess_exec(
            sys.executable, "-c", RANKS_PROCESS, str(socket_path), stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        assert ranks_process.stdin is not None and ranks_process.stdout is not None
        ranks_process.stdin.write(b"".join(hello(rank) for rank in range(RANKS)))
        ranks_process.stdin.close()
        assert await asyncio.wait_for(ranks_process.stdout.readline(), 60) == b"connected\n"
        for _ in range(600):  # up to 30 s: a loaded 2-core machine reads 1,024 hellos slowly
            if len(hub.model.ranks) == RANKS:
                break
            await asyncio.sleep(0.05)
        ranks = set(hub.model.ranks)
        connected = hub.server.worker_connections
        ranks_process.kill()
        await ranks_process.wait()
        await hub.close()
        return hub, ranks, connected
    hub, ranks, connected = asyncio.run(scenario())
    assert hub.stats["preauth_evicted"] == 0
    assert ranks == set(range(RANKS)) and connected == RANKS


@pytest.mark.parametrize("said", [b"", b'{"type": "hel'], ids=["nothing", "half_a_line"])
def test_connections_that_say_nothing_are_still_evicted_beyond_the_limit(tmp_path, monkeypatch, said):
    """Holding connections open without a whole line still costs the holder its oldest ones."""
    monkeypatch.setattr(server, "SILENT_GRACE_SECONDS", 0.05)
    async def scenario():
        hub, socket_path = await open_hub(tmp_path)
        writers = []
        for _ in range(server.MAX_PREAUTH_CONNECTIONS + 20):
            _, writer = await asyncio.open_unix_connection(str(socket_path))
            writer.write(said)
            writers.append(writer)
            await asyncio.sleep(0.005 if len(writers) < server.MAX_PREAUTH_CONNECTIONS else 0.06)
        await asyncio.sleep(0.3)
        waiting = len(hub.server._waiting[False])
        for writer in writers:
            writer.close()
        await hub.close()
        return hub, waiting
    hub, waiting = asyncio.run(scenario())
    assert hub.stats["preauth_evicted"] == 20 and waiting == server.MAX_PREAUTH_CONNECTIONS


NODES = 128

AGENTS_PROCESS = """
import json, socket, sys, time
port, lines = int(sys.argv[1]), json.loads(sys.stdin.read())
agents = []
for node_lines in lines:  # every node's agent connects at once, says who it is and forwards its 8 ranks' hellos
    agent = socket.create_connection(("127.0.0.1", port))
    agent.sendall("".join(node_lines).encode())
    agents.append(agent)
print("connected", flush=True)
time.sleep(60)
"""


def test_a_hundred_and_twenty_eight_node_agents_connecting_at_once_bring_all_1024_ranks(tmp_path, monkeypatch):
    """128 nodes x 8 ranks through their agents over TCP, on a hub reading slowly: every agent is
    let in (none evicted as an unauthenticated holder) and every rank it forwards is known."""
    read_line = server.read_bounded_line

    async def read_slowly(reader):
        time.sleep(0.002)
        return await read_line(reader)

    monkeypatch.setattr(server, "read_bounded_line", read_slowly)

    def node_lines(node: int) -> list[str]:
        agent = protocol.AgentHello(node, token=TOKEN, run_key="k", host=f"node{node}", pid=1000 + node,
                                    version="t").encode().decode()
        forwarded = [protocol.Hello(rank=node * 8 + local, token=None, run_key="k", local_rank=local,
                                    node_rank=node, world_size=NODES * 8, local_world_size=8, host=f"node{node}",
                                    pid=2000 + local, python="py", python_version="3", restart=0,
                                    argv=[]).encode().decode() for local in range(8)]
        return [agent, *forwarded]

    async def scenario():
        hub, _socket_path = await open_hub(tmp_path)
        port = await hub.serve_tcp("127.0.0.1", 0)
        agents_process = await asyncio.create_subprocess_exec(
            sys.executable, "-c", AGENTS_PROCESS, str(port), stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        assert agents_process.stdin is not None and agents_process.stdout is not None
        agents_process.stdin.write(json.dumps([node_lines(node) for node in range(NODES)]).encode())
        agents_process.stdin.close()
        assert await asyncio.wait_for(agents_process.stdout.readline(), 60) == b"connected\n"
        for _ in range(600):
            if len(hub.model.ranks) == NODES * 8:
                break
            await asyncio.sleep(0.05)
        agents = sum(1 for connection in hub.server.connections if connection.role == "agent")
        ranks = set(hub.model.ranks)
        agents_process.kill()
        await agents_process.wait()
        await hub.close()
        return hub, agents, ranks
    hub, agents, ranks = asyncio.run(scenario())
    assert hub.stats["preauth_evicted"] == 0
    assert agents == NODES and ranks == set(range(NODES * 8))
