"""What a subscriber sees no longer waits for the store (``runner.hub.commit_queue``): a batch is
published at once and committed behind, and a subscriber that comes while batches wait for the
store still gets every record exactly once (from the store's history, or live)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from rankwatch import protocol
from tests.hubs import fake_worker, open_hub, stored_count

WRITER_BUSY_SECONDS = 1.5


async def subscribe(socket_path: Path, history: bool, received: list[tuple[float, dict]]) -> None:
    """A subscriber over the real socket: every message with when it came, until ``bye``."""
    reader, writer = await asyncio.open_unix_connection(str(socket_path), limit=protocol.MAX_LINE_BYTES + 1)
    writer.write(protocol.encode("subscribe", history=history))
    await writer.drain()
    while True:
        line = await reader.readline()
        if not line:
            return
        message = protocol.decode(line)
        received.append((time.monotonic(), message))
        if message["type"] == "bye":
            writer.close()
            return


def metrics_of(received: list[tuple[float, dict]]) -> list[tuple]:
    return [tuple(item) for _, message in received if message["type"] == "update"
            for item in message.get("metrics") or []]


def test_records_reach_a_subscriber_while_the_store_is_busy(tmp_path):
    async def scenario():
        hub, socket_path = await open_hub(tmp_path)
        received: list[tuple[float, dict]] = []
        watcher = asyncio.create_task(subscribe(socket_path, False, received))
        await asyncio.sleep(0.2)
        busy = asyncio.ensure_future(hub.writer.call(lambda store: time.sleep(WRITER_BUSY_SECONDS)))
        started = time.monotonic()
        await fake_worker(socket_path, 0, 500, batch=500)  # one line: one flush
        while len(metrics_of(received)) < 500 and time.monotonic() - started < 10:
            await asyncio.sleep(0.01)
        seen_after = time.monotonic() - started
        stored_while_busy = stored_count(tmp_path, hub)
        await busy
        await hub.close()
        await watcher
        return seen_after, stored_while_busy, stored_count(tmp_path, hub), len(metrics_of(received))

    seen_after, stored_while_busy, stored, seen = asyncio.run(scenario())
    assert seen == 500 and seen_after < WRITER_BUSY_SECONDS / 2  # published while the writer was busy
    assert stored_while_busy == 0 and stored == 500  # committed behind, every one


def test_a_subscriber_coming_while_batches_wait_for_the_store_gets_each_record_once(tmp_path):
    async def scenario():
        hub, socket_path = await open_hub(tmp_path)
        early: list[tuple[float, dict]] = []
        late: list[tuple[float, dict]] = []
        early_task = asyncio.create_task(subscribe(socket_path, True, early))
        await asyncio.sleep(0.2)
        busy = asyncio.ensure_future(hub.writer.call(lambda store: time.sleep(WRITER_BUSY_SECONDS)))
        first = await fake_worker(socket_path, 0, 600, batch=600)  # one line: one flush
        while len(metrics_of(early)) < first:
            await asyncio.sleep(0.01)
        waiting = hub.commits.waiting_records
        late_task = asyncio.create_task(subscribe(socket_path, True, late))  # its replay reads behind the busy writer
        await asyncio.sleep(0.1)
        second = await fake_worker(socket_path, 1, 400)
        await busy
        await asyncio.sleep(0.3)
        await hub.close()
        await early_task
        await late_task
        return waiting, first + second, early, late

    waiting, sent, early, late = asyncio.run(scenario())
    assert waiting > 0  # the late subscriber came while published records waited for the store
    for received in (early, late):
        metrics = metrics_of(received)
        assert len(metrics) == sent == 1000
        assert len(set(metrics)) == len(metrics)  # replay and live never overlap
