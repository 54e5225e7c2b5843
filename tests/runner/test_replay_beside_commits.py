"""A history replay reads its rows beside the writer thread, not behind its commits.

At 1,024 ranks the writer thread always has commits queued: a replay read on it waited ~0.3 s
each, ~25 of them took longer than the live updates queued behind the replay could wait, and
the replay never reached ``history_end``. Here a real hub with its real store and a real
``HubClient``: once the replay has begun, the writer thread is held busy (as by a long run of
commits) and the replay must still end.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

from runner.hub.client import HubClient
from runner.store.store import RunStore
from tests.hubs import fake_worker, open_hub, stored_count
from tests.runner.test_bounded_replay import fill

HELD_SECONDS = 30.0
"""How long the writer thread is held at most (released as soon as the test is done)."""


async def replay_while_writer_is_held(tmp_path: Path) -> tuple[bool, int]:
    """Whether ``history_end`` came while the writer thread was held, and the metric records before it."""
    hub, socket_path = await open_hub(tmp_path)
    release = threading.Event()
    try:
        await hub.writer.call(fill, hub.run_id, 40_000, 10_000)
        await fake_worker(socket_path, 0, 100)
        while stored_count(tmp_path, hub) < 40_100:
            await asyncio.sleep(0.05)
        client = await HubClient.subscribe(str(socket_path), history=True)
        held: asyncio.Future[None] | None = None
        records = 0
        try:
            async for message in client.messages():
                if message["type"] == "update" and held is None:
                    held = asyncio.ensure_future(hub.writer.call(hold, release))  # the plan has run
                records += len(message.get("metrics") or [])
                if message["type"] == "history_end":
                    return not release.is_set(), records
        finally:
            client.close()
        raise AssertionError("the hub hung up before history_end")
    finally:
        release.set()
        await hub.close(reason="succeeded")


def hold(_store: RunStore, release: threading.Event) -> None:
    release.wait(HELD_SECONDS)


def test_a_replay_reaches_history_end_while_the_writer_thread_is_busy_committing(tmp_path):
    ended_while_held, records = asyncio.run(asyncio.wait_for(replay_while_writer_is_held(tmp_path),
                                                             HELD_SECONDS - 5))
    assert ended_while_held
    assert records == 40_100
