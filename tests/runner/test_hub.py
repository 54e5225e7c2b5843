"""The hub on a real Unix socket: ingestion, the store, subscribers, bad clients."""

from __future__ import annotations

import asyncio
import random
import socket
import stat
import sys
import threading
import time
from pathlib import Path

from rankwatch import protocol
from runner.hub.hub import Hub
from runner.hub.observer import HubObserver
from runner.hub.writer import SWITCH_INTERVAL_SECONDS
from runner.store.store import RunStore
from tests.hubs import fake_worker, hello, open_hub, stored_count


def stored_metrics(tmp_path: Path, hub: Hub) -> int:
    return stored_count(tmp_path, hub)


def test_socket_folder_is_private_and_socket_is_0600(tmp_path):
    async def scenario():
        hub, socket_path = await open_hub(tmp_path)
        try:
            assert stat.S_IMODE(socket_path.parent.stat().st_mode) == 0o700
            assert stat.S_IMODE(socket_path.stat().st_mode) == 0o600
        finally:
            await hub.close()
    asyncio.run(scenario())


def test_eight_workers_all_records_stored(tmp_path):
    async def scenario():
        hub, socket_path = await open_hub(tmp_path)
        sent = sum(await asyncio.gather(*(fake_worker(socket_path, rank, 5000) for rank in range(8))))
        await hub.close()
        return hub, sent
    hub, sent = asyncio.run(scenario())
    assert sent == 40_000
    assert stored_metrics(tmp_path, hub) == sent, dict(hub.stats)
    with RunStore(tmp_path / "runs.db", readonly=True) as store:
        ranks = store.ranks(hub.run_id)
    assert [r.rank for r in ranks] == list(range(8))
    assert all(r.state == "exited" and r.exit_code == 0 for r in ranks)


def test_wrong_or_missing_token_is_refused_and_others_go_on(tmp_path):
    async def scenario():
        hub, socket_path = await open_hub(tmp_path)
        reader, writer = await asyncio.open_unix_connection(str(socket_path))
        writer.write(protocol.encode("hello", token="wrong", rank=9))
        writer.write(protocol.encode("metrics", rank=9, items=[[time.time(), 0, "loss", 1.0, "auto"]]))
        await writer.drain()
        reply = await asyncio.wait_for(reader.readline(), 5)
        closed = await asyncio.wait_for(reader.read(), 5)
        sent = await fake_worker(socket_path, 0, 1000)
        await hub.close()
        return hub, reply, closed, sent
    hub, reply, closed, sent = asyncio.run(scenario())
    assert protocol.decode(reply)["type"] == "error"
    assert closed == b""  # the hub hung up on it
    assert hub.stats["refused_bad_token"] == 1
    assert stored_metrics(tmp_path, hub) == sent == 1000
    with RunStore(tmp_path / "runs.db", readonly=True) as store:
        assert [r.rank for r in store.ranks(hub.run_id)] == [0]


def garbage_lines(count: int, seed: int = 7) -> list[bytes]:
    rng = random.Random(seed)
    makers = [
        lambda: bytes(rng.randrange(256) for _ in range(rng.randrange(1, 200))).replace(b"\n", b"") + b"\n",
        lambda: b'{"type": "metrics", "v": 1, "rank": 0, "items": [[1, 2, "loss"' + b"\n",
        lambda: b'{"type": "nonsense", "v": 1}\n',
        lambda: b'{"type": "metrics", "v": 99, "items": []}\n',
        lambda: b"[1, 2, 3]\n",
        lambda: b'"just a string"\n',
        lambda: b'{"type": "hello", "v": 1, "token": "guess", "rank": 0}\n',
        lambda: b"\xff\xfe not utf8 \n",
    ]
    return [rng.choice(makers)() for _ in range(count)]


def test_fuzzing_the_hub_never_stops_ingestion(tmp_path):
    async def garbage_client(socket_path: Path, lines: list[bytes]) -> int:
        """Send the lines in chunks of ten, a connection each; returns how many lines the
        hub must have read: a chunk ends at its first hello with a guessed token, because
        the hub hangs up on a client presenting a wrong token."""
        delivered = 0
        for start in range(0, len(lines), 10):
            chunk = lines[start:start + 10]
            refused = next((i for i, line in enumerate(chunk) if b'"hello"' in line), None)
            delivered += len(chunk) if refused is None else refused + 1
            reader, writer = await asyncio.open_unix_connection(str(socket_path))
            try:
                writer.write(b"".join(chunk))
                await writer.drain()
                writer.write_eof()
                await reader.read()  # the hub reads to the end (or hangs up early)
            except ConnectionError:
                pass
            writer.close()
        return delivered

    async def oversized_client(socket_path: Path) -> None:
        _, writer = await asyncio.open_unix_connection(str(socket_path))
        writer.write(b"x" * (protocol.MAX_LINE_BYTES + 10) + b"\n")
        writer.write(protocol.encode("ping"))
        await writer.drain()
        writer.close()

    async def scenario():
        hub, socket_path = await open_hub(tmp_path)
        results = await asyncio.gather(
            fake_worker(socket_path, 0, 20_000), fake_worker(socket_path, 1, 20_000),
            garbage_client(socket_path, garbage_lines(10_000)), oversized_client(socket_path))
        await hub.close()
        return hub, results[0] + results[1], results[2]
    hub, sent, garbage_delivered = asyncio.run(scenario())
    assert stored_metrics(tmp_path, hub) == sent == 40_000
    bad = sum(v for k, v in hub.stats.items() if k.startswith("bad_"))
    assert garbage_delivered > 5000
    assert bad == garbage_delivered + 1  # every garbage line counted once, plus the oversized one
    assert hub.stats["bad_line_oversized"] == 1
    assert hub.stats["refused_bad_token"] > 100


def test_subscribers_see_only_stored_records_and_a_late_one_gets_the_history(tmp_path):
    seen_before_stored: list[int] = []

    async def subscriber(socket_path: Path, hub: Hub, history: bool) -> list[dict]:
        reader, writer = await asyncio.open_unix_connection(str(socket_path), limit=protocol.MAX_LINE_BYTES + 1)
        writer.write(protocol.encode("subscribe", history=history))
        await writer.drain()
        messages = []
        while True:
            line = await reader.readline()
            if not line:
                return messages
            message = protocol.decode(line)
            messages.append(message)
            if message["type"] == "update" and message.get("metrics"):
                with RunStore(tmp_path / "runs.db", readonly=True) as store:
                    stored = store.count("metrics", hub.run_id)
                received = sum(len(m.get("metrics") or []) for m in messages if m["type"] == "update")
                if received > stored:
                    seen_before_stored.append(received - stored)
            if message["type"] == "bye":
                return messages

    async def quits_early(socket_path: Path) -> None:
        reader, writer = await asyncio.open_unix_connection(str(socket_path))
        writer.write(protocol.encode("subscribe", history=True))
        await writer.drain()
        await reader.readline()
        writer.close()  # disconnects mid-stream

    async def scenario():
        hub, socket_path = await open_hub(tmp_path)
        early = asyncio.create_task(subscriber(socket_path, hub, history=True))
        await asyncio.sleep(0.1)
        first = await fake_worker(socket_path, 0, 3000)
        await quits_early(socket_path)
        late = asyncio.create_task(subscriber(socket_path, hub, history=True))
        await asyncio.sleep(0.2)
        second = await fake_worker(socket_path, 1, 3000)
        await asyncio.sleep(0.2)
        await hub.close()
        return await early, await late, first + second, hub

    early, late, sent, _hub = asyncio.run(scenario())
    assert not seen_before_stored
    for messages in (early, late):
        assert messages[0]["type"] == "snapshot"
        assert messages[-1]["type"] == "bye"
        metrics = [tuple(m) for msg in messages if msg["type"] == "update" for m in msg.get("metrics") or []]
        assert len(metrics) == sent == 6000
        assert len(set(metrics)) == len(metrics)  # replay and live never overlap
    assert any(m["type"] == "history_end" for m in late)
    # Rank 1 said hello after the late subscriber came: its row reaches it in an update, or in
    # its snapshot when the hub was slow to answer (a busy machine: the hello came first)
    ranks_seen = {r["rank"] for msg in late if msg["type"] in ("snapshot", "update") for r in msg.get("ranks") or []}
    assert ranks_seen >= {1}


def test_a_client_that_keeps_sending_garbage_is_disconnected(tmp_path):
    async def scenario():
        hub, socket_path = await open_hub(tmp_path)
        reader, writer = await asyncio.open_unix_connection(str(socket_path))
        noise = [line for line in garbage_lines(2000, seed=3) if b'"hello"' not in line][:500]
        writer.write(b"".join(noise))
        await writer.drain()
        hung_up = await asyncio.wait_for(reader.read(), 5) == b""
        sent = await fake_worker(socket_path, 0, 500)
        await hub.close()
        return hub, hung_up, sent
    hub, hung_up, sent = asyncio.run(scenario())
    assert hung_up and hub.stats["clients_disconnected"] == 1
    assert stored_metrics(tmp_path, hub) == sent


def test_a_slow_commit_is_told_once_as_a_warning_that_nothing_is_lost(tmp_path):
    async def scenario():
        hub, socket_path = await open_hub(tmp_path)
        hub.store_behind_seconds = 0.0  # every commit counts as slow: the first one is told
        sent = sum(await asyncio.gather(*(fake_worker(socket_path, rank, 3000, batch=100) for rank in range(2))))
        await hub.close()
        return hub, sent
    hub, sent = asyncio.run(scenario())
    assert stored_metrics(tmp_path, hub) == sent
    assert hub.stats["slow_commits"] >= 2
    with RunStore(tmp_path / "runs.db", readonly=True) as store:
        told = [event for event in store.stored_events(hub.run_id, "warning") if "falling behind" in event.message]
    assert len(told) == 1
    assert "Nothing is lost" in told[0].message and told[0].fields["ranks"] == 2
    assert told[0].fields["records"] >= 1 and told[0].fields["seconds"] >= 0.0


def test_commits_in_time_say_nothing_of_falling_behind(tmp_path):
    async def scenario():
        hub, socket_path = await open_hub(tmp_path)
        hub.store_behind_seconds = 60.0
        await fake_worker(socket_path, 0, 3000, batch=100)
        await hub.close()
        return hub
    hub = asyncio.run(scenario())
    with RunStore(tmp_path / "runs.db", readonly=True) as store:
        assert not [event for event in store.stored_events(hub.run_id, "warning") if "falling behind" in event.message]
    assert hub.stats["slow_commits"] == 0


def test_a_running_hub_hands_the_gil_to_its_writer_thread_within_half_a_millisecond(tmp_path):
    """At Python's 5 ms the writer waited for the busy event loop after each SQLite statement, and
    stored a quarter of what it stores alone (``SWITCH_INTERVAL_SECONDS``)."""
    default = sys.getswitchinterval()

    async def scenario():
        hub, _socket_path = await open_hub(tmp_path)
        running = sys.getswitchinterval()
        await hub.close()
        return running
    try:
        sys.setswitchinterval(0.005)
        assert asyncio.run(scenario()) == SWITCH_INTERVAL_SECONDS <= 0.0005
    finally:
        sys.setswitchinterval(default)


def test_a_worker_that_closed_before_the_hubs_answer_has_its_last_messages_read(tmp_path):
    """A script that ends at once sends hello, its notice and its exit, and closes before the
    hub answers the hello with ``pace``. That answer fails (EPIPE); the messages the kernel still
    holds for the hub must be read all the same: its exit, not "disconnected without an exit"."""
    worker_closed = threading.Event()

    def quick_worker(socket_path: Path, hello_taken: threading.Event) -> None:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
            connection.connect(str(socket_path))
            connection.sendall(hello(1))
            assert hello_taken.wait(10)
            connection.sendall(protocol.Notice(1, time.time(), "local_rank_unpassed", {"value": 0}).encode()
                               + protocol.Exit(1, time.time(), 0).encode())
        worker_closed.set()

    class HoldTheLoopAtHello(HubObserver):
        """Keeps the hub between taking the hello and answering it until the worker has gone."""

        def __init__(self, hello_taken: threading.Event) -> None:
            self.hello_taken = hello_taken

        def on_hello(self, message: protocol.Hello) -> None:
            self.hello_taken.set()
            assert worker_closed.wait(10)

    async def scenario():
        hub, socket_path = await open_hub(tmp_path)
        hello_taken = threading.Event()
        hub.observers.add(HoldTheLoopAtHello(hello_taken))
        worker = threading.Thread(target=quick_worker, args=(socket_path, hello_taken))
        worker.start()
        while worker.is_alive():
            await asyncio.sleep(0.01)
        await hub.close()
        return hub

    hub = asyncio.run(scenario())
    with RunStore(tmp_path / "runs.db", readonly=True) as store:
        [rank] = store.ranks(hub.run_id)
        kinds = [event.kind for event in store.stored_events(hub.run_id)]
    assert (rank.state, rank.exit_code) == ("exited", 0)
    assert "rank_exited" in kinds and "connection_lost" not in kinds
