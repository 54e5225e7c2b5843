"""Many ranks at once: a connection whose hello is already waiting is never evicted as unauthenticated."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time

import pytest

from runner.hub import server
from tests.hubs import hello, open_hub

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
