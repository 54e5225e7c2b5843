"""The worker tests' ``FakeHub`` refuses what the real hub refuses.

A fake that kept every line that parsed let a worker test pass on messages the runner's hub
drops (a hello whose rank is not a number, a flight record that is not an object, anything
before the hello). The same lines go to the real hub (``tests/hubs.py``) and to the fake;
both must keep the same messages and refuse the others.
"""

from __future__ import annotations

import asyncio
import json
import socket
import time
from pathlib import Path

from worker_harness import FakeHub

from rankwatch import protocol
from tests.hubs import hello, open_hub


def line(**fields: object) -> bytes:
    return (json.dumps({"v": protocol.VERSION, **fields}) + "\n").encode()


BEFORE_HELLO = [line(type="heartbeat", rank=0, t=1.0)]
"""A worker's message on a connection that never said hello."""
BAD_HELLO = [line(type="hello", rank="zero", token="secret-token")]
"""A hello whose rank is not a number: the hub hangs up."""
AFTER_HELLO = [hello(0), line(type="flight_record", rank=0, t=1.0, record="not an object"),
               line(type="notice", rank=0, t=1.0, key=5), line(type="heartbeat", rank=0, t=2.0)]
"""A hello, two messages their ``from_wire`` rejects, and a good heartbeat."""
CONNECTIONS = [BEFORE_HELLO, BAD_HELLO, AFTER_HELLO]


def _real_hub_refusals(tmp_path: Path) -> dict[str, int]:
    async def scenario() -> dict[str, int]:
        hub, socket_path = await open_hub(tmp_path)
        for lines in CONNECTIONS:
            _, writer = await asyncio.open_unix_connection(str(socket_path))
            writer.write(b"".join(lines))
            await writer.drain()
            await asyncio.sleep(0.2)
            writer.close()
        await hub.close()
        return {key: count for key, count in hub.stats.items() if key.startswith("bad_")}

    return asyncio.run(scenario())


def _fake_hub_kept(hub: FakeHub) -> tuple[list[str], list[str]]:
    for lines in CONNECTIONS:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
            client.connect(hub.address)
            client.sendall(b"".join(lines))
    hub.wait_for(lambda: len(hub.messages()) + len(hub.bad_lines) >= 6, timeout=5)
    time.sleep(0.1)  # nothing more arrives
    return [message["type"] for message in hub.messages()], sorted(hub.bad_lines)


def test_the_fake_hub_refuses_the_lines_the_real_hub_refuses(tmp_path):
    refused = _real_hub_refusals(tmp_path)
    assert refused == {"bad_first_message": 2, "bad_flight_record": 1, "bad_notice": 1}
    with FakeHub() as hub:
        kept, bad_lines = _fake_hub_kept(hub)
    assert kept == ["hello", "heartbeat"]
    assert bad_lines == ["invalid", "invalid", "invalid", "not_allowed_first"]
