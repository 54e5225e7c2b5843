"""A subscriber that reads the history from the store itself gets where it ends, exactly.

The GUI reads a run's history from the store in its own process (``Subscribe.from_store``): at
1,024 ranks the hub's replay took 30-80 s. The hub then replays nothing; its ``history_end``
says the last row of each table before the live updates (``stored_through``). The stored rows
up to there and the live records after it must be the run's records once each, while a worker
streams: no gap, no duplicate at the seam. A real hub and store, a worker speaking the real
protocol, a real ``HubClient``.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from pathlib import Path

from rankwatch import protocol
from runner.hub.client import HubClient
from tests.hubs import hello, open_hub

STEPS_PER_TICK = 20


async def stream(socket_path: Path, stop: asyncio.Event) -> None:
    """Rank 0's loss, step after step, every 10 ms until ``stop``."""
    _reader, writer = await asyncio.open_unix_connection(str(socket_path))
    writer.write(hello(0))
    step = 0
    while not stop.is_set():
        writer.write(protocol.encode_metric_items(0, [[time.time(), step + offset, protocol.LOSS, float(step + offset),
                                                       "auto"] for offset in range(STEPS_PER_TICK)]))
        await writer.drain()
        step += STEPS_PER_TICK
        await asyncio.sleep(0.01)
    writer.close()


def test_the_stored_rows_through_history_end_and_the_live_records_are_each_step_once(tmp_path):
    async def scenario() -> tuple[dict, list, list[dict]]:
        hub, socket_path = await open_hub(tmp_path)
        stop = asyncio.Event()
        streaming = asyncio.ensure_future(stream(socket_path, stop))
        before_end: list[dict] = []
        live: list = []
        try:
            await asyncio.sleep(0.6)  # a history in the store
            client = await HubClient.subscribe(str(socket_path), history=True, from_store=True)
            end = None
            async for message in client.messages():
                if end is None:
                    before_end.append(message)
                    if message["type"] == "history_end":
                        end = message
                elif message["type"] == "update":
                    live += [item for item in message.get("metrics") or [] if item[3] == protocol.LOSS]
                    if len(live) > 10 * STEPS_PER_TICK:
                        break
            client.close()
            return end, live, before_end
        finally:
            stop.set()
            await streaming
            await hub.close(reason="succeeded")

    end, live, before_end = asyncio.run(scenario())
    assert [message["type"] for message in before_end] == ["snapshot", "history_end"]  # nothing replayed
    through = end["stored_through"]["metrics"]
    with sqlite3.connect(tmp_path / "runs.db") as db:
        stored = [int(step) for (step,) in db.execute(
            "SELECT step FROM metrics WHERE rank = 0 AND name = ? AND rowid <= ? ORDER BY rowid",
            (protocol.LOSS, through))]
    steps = stored + [int(item[2]) for item in live]
    assert len(stored) > 10 * STEPS_PER_TICK and live
    assert steps == list(range(len(steps)))


def test_an_older_hub_or_subscriber_reads_without_the_fields():
    assert protocol.Subscribe.from_wire({"type": "subscribe", "history": True}).from_store is False
    assert protocol.Subscribe.from_wire(protocol.Subscribe(from_store=True).to_wire()).from_store is True
    assert protocol.HistoryEnd.from_wire({"type": "history_end"}).stored_through is None
    end = protocol.HistoryEnd(stored_through={"metrics": 12, "logs": 3})
    assert protocol.HistoryEnd.from_wire(end.to_wire()).stored_through == {"metrics": 12, "logs": 3}
