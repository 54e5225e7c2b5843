"""A subscriber that stops reading while it loads the history (``rankwatch attach`` stopped
with Ctrl-Z, a GUI that hangs) is disconnected, counted and told in the run's events, and
what the runner holds for it never passes its budget; one that reads slowly but keeps up
gets every record, once.

Real hub on a real Unix socket with its SQLite store; the ranks are fake workers speaking
the real protocol. What the runner holds for a subscriber is measured where it is held:
the live updates queued for it during its replay, its transport's buffer and the replay
chunk in flight (``Subscriber.held_bytes``).
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import sys
import time
from pathlib import Path

from rankwatch import protocol
from rankwatch.protocol import Event, MetricRecord
from runner.hub import publisher
from runner.hub.hub import Hub
from runner.hub.publisher import DISCONNECT_ABOVE_BYTES, LINE_BYTES, Subscriber
from runner.store.store import RecordBatch, RunStore
from tests.hubs import hello, open_hub, rss_bytes

HISTORY_RECORDS = 40_000
"""Stored before anyone subscribes: ~2 MB of update lines, far more than a socket's buffers."""
RANKS = 4
LIVE_RECORDS_PER_RANK = 30_000
SERIES_NAME = "live/" + "n" * 110
"""Long (the contract allows 128): each live record is ~170 bytes of update, so the ranks send
~20 MiB, more than a subscriber's budget, in ~6 s (~3 MB/s: a reader that keeps up takes it)."""


def store_history(store: RunStore, run_id: int, records: int = HISTORY_RECORDS) -> None:
    store.write_batch(run_id, RecordBatch(metrics=[
        MetricRecord(index % RANKS, 1_700_000_000.0 + index, index, "history", float(index), "auto")
        for index in range(records)]))


async def fake_rank(socket_path: Path, rank: int, records: int, batch: int = 500, every: float = 0.1) -> None:
    """A rank that logs one long-named series, ``batch`` records every ``every`` seconds, then exits."""
    _reader, writer = await asyncio.open_unix_connection(str(socket_path))
    writer.write(hello(rank))
    for start in range(0, records, batch):
        items = [[time.time(), step, SERIES_NAME, float(step), "auto"] for step in range(start, start + batch)]
        writer.write(protocol.encode_metric_items(rank, items))
        await writer.drain()
        await asyncio.sleep(every)
    writer.write(protocol.Exit(rank, time.time(), 0).encode())
    await writer.drain()
    writer.close()


def subscribe_and_never_read(socket_path: Path) -> socket.socket:
    client = socket.socket(socket.AF_UNIX)
    client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    client.connect(str(socket_path))
    client.sendall(protocol.Subscribe(history=True).encode())
    return client


READER = r"""
import json, socket, sys, time
path, subscribe, piece, pause, until_live, live_name = sys.argv[1:7]
piece, pause, until_live = int(piece), float(pause), int(until_live)
client = socket.socket(socket.AF_UNIX)
client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
client.connect(path)
client.sendall(subscribe.encode())
records, distinct = {}, {}
live, history_ended, decimated, hung_up, pending = 0, False, 0, False, b""
while not (history_ended and live >= until_live):
    data = client.recv(piece)
    if not data:
        hung_up = True
        break
    *lines, pending = (pending + data).split(b"\n")
    for line in lines:
        message = json.loads(line)
        if message["type"] == "history_end":
            history_ended = True
        elif message["type"] == "update":
            decimated += bool(message.get("decimated"))
            for rank, _t, step, name, _value, _source in message.get("metrics") or []:
                records[name] = records.get(name, 0) + 1
                distinct.setdefault(name, set()).add((rank, step))
                live += name == live_name
    time.sleep(pause)
print(json.dumps({"records": records, "distinct": {name: len(keys) for name, keys in distinct.items()},
                  "history_ended": history_ended, "decimated": decimated, "hung_up": hung_up}))
"""
"""A subscriber in its own process (as ``rankwatch attach`` is) that takes ``piece`` bytes every
``pause`` seconds until the history and then ``until_live`` live records arrived, or the hub hangs
up; it prints what it got (records per series, distinct ones, ``history_end`` seen, ...)."""


async def start_slow_reader(socket_path: Path, piece: int, pause: float,
                            until_live: int) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable, "-c", READER, str(socket_path), protocol.Subscribe(history=True).encode().decode(),
        str(piece), str(pause), str(until_live), SERIES_NAME, stdout=asyncio.subprocess.PIPE)


async def what_it_got(reader: asyncio.subprocess.Process, seconds: float) -> dict:
    try:
        out, _ = await asyncio.wait_for(reader.communicate(), seconds)
    except asyncio.TimeoutError:
        reader.kill()
        out, _ = await reader.communicate()
    return json.loads(out) if out else {"timed_out": True}


async def watch_held_bytes(hub: Hub, subscriber: Subscriber, peak: list[int]) -> None:
    """The most the hub held for ``subscriber`` while it was subscribed (sampled every 5 ms)."""
    while subscriber in hub.publisher.subscribers:
        peak[0] = max(peak[0], subscriber.held_bytes())
        await asyncio.sleep(0.005)


async def the_subscriber_that_came(hub: Hub, count_before: int) -> Subscriber:
    for _ in range(2000):  # a reader process may take seconds to start on a loaded machine
        if len(hub.publisher.subscribers) > count_before:
            return hub.publisher.subscribers[count_before]
        await asyncio.sleep(0.005)
    raise AssertionError("the hub never took the subscription")


def warnings_of(tmp_path: Path, hub: Hub) -> list[Event]:
    with RunStore(tmp_path / "runs.db", readonly=True) as store:
        return store.stored_events(hub.run_id, kind="warning")


def test_a_subscriber_stalled_in_its_history_is_dropped_within_budget_and_a_slow_reader_gets_all(tmp_path):
    live_records = RANKS * LIVE_RECORDS_PER_RANK

    async def scenario():
        hub, socket_path = await open_hub(tmp_path)
        await hub.writer.call(store_history, hub.run_id)
        before = rss_bytes()
        stalled_client = subscribe_and_never_read(socket_path)
        stalled = await the_subscriber_that_came(hub, 0)
        peak = [0]
        watching = asyncio.create_task(watch_held_bytes(hub, stalled, peak))
        reader = await start_slow_reader(socket_path, piece=128 << 10, pause=0.01, until_live=live_records)
        slow = await the_subscriber_that_came(hub, 1)
        started = time.monotonic()
        await asyncio.gather(*(fake_rank(socket_path, rank, LIVE_RECORDS_PER_RANK) for rank in range(RANKS)))
        sent_in = time.monotonic() - started
        grown = rss_bytes() - before
        received = await what_it_got(reader, 10)
        still_subscribed = stalled in hub.publisher.subscribers
        watching.cancel()
        stalled_client.close()
        await hub.close()
        return hub, received, peak[0], still_subscribed, stalled, slow, sent_in, grown

    hub, received, peak, still_subscribed, stalled, slow, sent_in, grown = asyncio.run(scenario())
    print(f"ranks sent {live_records:,} records in {sent_in:.1f} s; held for the stalled subscriber at most "
          f"{peak / (1 << 20):.1f} MiB; the runner's process grew {grown >> 20} MiB; the slow reader got {received}",
          file=sys.stderr)
    assert not still_subscribed, f"the stalled subscriber is still connected; the runner grew {grown >> 20} MiB"
    assert peak <= DISCONNECT_ABOVE_BYTES + 2 * LINE_BYTES, f"{peak >> 20} MiB held for a stalled subscriber"
    assert grown < DISCONNECT_ABOVE_BYTES + (32 << 20), f"the runner grew {grown >> 20} MiB"
    assert stalled.dropped.reason.value == "behind" and stalled.dropped.loading_history
    assert hub.stats["subscribers_dropped"] == hub.stats["subscribers_dropped_behind"] == 1
    [told] = warnings_of(tmp_path, hub)
    assert told.fields["reason"] == "behind" and told.fields["loading_history"] is True
    assert told.fields["pid"] == os.getpid()  # the stalled client, not the slow reader's process
    assert told.message.startswith(f"disconnected a subscriber (pid {os.getpid()}), which ")
    assert "stopped reading while it loaded the run's history" in told.message
    # the slow reader: the whole history and every live record, each once, none thinned
    assert slow.dropped is None
    assert (received["history_ended"], received["hung_up"], received["decimated"]) == (True, False, 0), received
    assert received["records"] == received["distinct"] == {"history": HISTORY_RECORDS, SERIES_NAME: live_records}


def test_a_replay_nobody_reads_is_dropped_after_the_stall_time_but_a_slow_reader_is_not(tmp_path, monkeypatch):
    monkeypatch.setattr(publisher, "REPLAY_STALL_SECONDS", 1.0, raising=False)  # the event says it was used
    # ~0.4 MB at ~100 kB/s: the slow reader takes ~4 s, each wait for it (drain) longer than the 1 s
    # allowed to take nothing. The transport's buffer stands still ~1.6 s at a time (the kernel wakes
    # the writer only once 3/4 of its queue was read); the kernel's queue falls every ~36 KiB read
    # (~0.4 s): only that shows the reader is no stall
    history = 8_000

    async def scenario():
        hub, socket_path = await open_hub(tmp_path)
        await hub.writer.call(store_history, hub.run_id, history)
        stalled_client = subscribe_and_never_read(socket_path)
        stalled = await the_subscriber_that_came(hub, 0)
        started = time.monotonic()
        reader = await start_slow_reader(socket_path, piece=4 << 10, pause=0.04, until_live=0)
        slow = await the_subscriber_that_came(hub, 1)
        while stalled in hub.publisher.subscribers and time.monotonic() - started < 5:
            await asyncio.sleep(0.05)
        still_subscribed, dropped_after = stalled in hub.publisher.subscribers, time.monotonic() - started
        received = await what_it_got(reader, 10)
        stalled_client.close()
        await hub.close()
        return hub, received, still_subscribed, stalled, dropped_after, slow

    hub, received, still_subscribed, stalled, dropped_after, slow = asyncio.run(scenario())
    assert not still_subscribed, f"a subscriber that read nothing for {dropped_after:.1f} s is still connected"
    assert 0.9 <= dropped_after < 3.0, dropped_after
    assert stalled.dropped.reason.value == "stalled_replay"
    assert hub.stats["subscribers_dropped"] == hub.stats["subscribers_dropped_stalled_replay"] == 1
    [told] = warnings_of(tmp_path, hub)
    assert told.fields["reason"] == "stalled_replay" and "read nothing of the run's history for 1 s" in told.message
    assert slow.dropped is None
    assert (received["history_ended"], received["hung_up"]) == (True, False), received
    assert received["records"] == received["distinct"] == {"history": history}
