"""The hub under bad values, bad clients and a full store: nothing good lost, memory and rows bounded."""

from __future__ import annotations

import asyncio
import contextlib
import json
import multiprocessing
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

from rankwatch import protocol
from rankwatch.protocol import Event, MetricRecord
from runner.diagnosis.stack_capture import StackCapture
from runner.hub import server
from runner.hub.publisher import TOTAL_BACKLOG_BYTES
from runner.launch.process_tree import carries_marker
from runner.store.store import RunStore
from tests.hubs import fake_worker, hello, open_hub, rss_bytes, stored_count


def events_of(tmp_path: Path, hub, kind: str) -> list[Event]:
    with RunStore(tmp_path / "runs.db", readonly=True) as store:
        return store.stored_events(hub.run_id, kind=kind)


def test_a_record_the_store_refuses_costs_only_itself_and_no_traceback(tmp_path, capfd):
    async def scenario():
        hub, socket_path = await open_hub(tmp_path)
        worker = asyncio.create_task(fake_worker(socket_path, 0, 20_000))
        await asyncio.sleep(0.05)
        # past ingest's checks (the runner's own records are not checked): the writer's backstop
        hub.add_metric(MetricRecord(1, time.time(), 2**64, "loss", 1.0, "parsed"))
        hub.add_log(1, "stdout", "a line in the same batch", time.time())
        sent = await worker
        await hub.close()
        return hub, sent
    hub, sent = asyncio.run(scenario())
    assert stored_count(tmp_path, hub) == sent == 20_000
    assert stored_count(tmp_path, hub, "logs") == 1
    assert hub.stats["rows_refused_by_store"] == 1
    assert "Traceback" not in capfd.readouterr().err


def test_a_workers_bad_values_are_dropped_counted_per_rank_and_told(tmp_path):
    async def scenario():
        hub, socket_path = await open_hub(tmp_path)
        _reader, writer = await asyncio.open_unix_connection(str(socket_path))
        writer.write(hello(3))
        now = time.time()
        for step in range(100):
            items = [[now, step, "loss", 0.5, "auto"], [now, step, "x", 2**64 - 1, "log"],
                     [float("nan"), step, "y", 1.0, "log"]]
            writer.write(protocol.encode_metric_items(3, items))
        writer.write(protocol.Heartbeat(3, now, 99, 7, 300).encode())
        writer.write(protocol.Exit(3, now, 0).encode())
        await writer.drain()
        writer.close()
        await asyncio.sleep(0.3)
        await hub.close()
        return hub
    hub = asyncio.run(scenario())
    assert stored_count(tmp_path, hub) == 100
    with RunStore(tmp_path / "runs.db", readonly=True) as store:
        [row] = store.ranks(hub.run_id)
    assert (row.rejected, row.dropped, row.sent) == (200, 7, 300)
    assert row.first_seen is not None and row.last_seen is not None and row.first_seen <= row.last_seen
    told = events_of(tmp_path, hub, "records_rejected")
    assert told[0].rank == 3 and told[0].message.startswith("rank 3: 2 records dropped")
    assert told[-1].fields["count"] == 200
    assert told[-1].fields["reasons"] == {"value out of range": 100, "time not a plausible timestamp": 100}
    assert hub.losses()["losses"] == [{"rank": 3, "dropped": 7, "rejected": 200, "not_received": 0}]


def test_deeply_nested_json_before_authentication_is_a_counted_bad_line(tmp_path):
    async def scenario():
        hub, socket_path = await open_hub(tmp_path)
        port = await hub.serve_tcp("127.0.0.1", 0)
        answers = []
        for send in (lambda w: w.write(b"[" * 5000 + b"\n"),):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            send(writer)
            await writer.drain()
            answers.append(await asyncio.wait_for(reader.read(), 5))
            writer.close()
        reader, writer = await asyncio.open_unix_connection(str(socket_path))
        writer.write(b"[" * 5000 + b"\n" + protocol.Ping().encode())
        await writer.drain()
        pong = await asyncio.wait_for(reader.readline(), 5)
        writer.close()
        sent = await fake_worker(socket_path, 0, 1000)
        await hub.close()
        return hub, answers, pong, sent
    hub, answers, pong, sent = asyncio.run(scenario())
    assert [json.loads(line)["type"] for line in answers[0].splitlines()] == ["error"]
    assert json.loads(pong)["type"] == "pong"
    assert hub.stats["bad_line_too_deep"] == 2
    assert stored_count(tmp_path, hub) == sent


def _hold_connections(port: int, count: int, ready, release) -> None:
    """Open ``count`` TCP connections that each send a little garbage and then say nothing."""
    held = []
    for _ in range(count):
        try:
            client = socket.create_connection(("127.0.0.1", port), timeout=5)
            client.sendall(b"x" * 4096)  # no newline: a line that never ends
            held.append(client)
        except OSError:
            pass
    ready.set()
    release.wait(60)
    for client in held:
        client.close()


def test_a_thousand_unauthenticated_tcp_connections_cost_little_memory_and_few_rows(tmp_path):
    async def scenario():
        hub, socket_path = await open_hub(tmp_path)
        port = await hub.serve_tcp("127.0.0.1", 0)
        await fake_worker(socket_path, 0, 100)
        await asyncio.sleep(0.2)
        with RunStore(tmp_path / "runs.db", readonly=True) as store:
            rows_before = sum(store.count(table, hub.run_id) for table in ("events", "logs", "metrics"))
        before = rss_bytes()
        ready, release = multiprocessing.Event(), multiprocessing.Event()
        holder = multiprocessing.Process(target=_hold_connections, args=(port, 1000, ready, release))
        holder.start()
        while not ready.is_set():
            await asyncio.sleep(0.1)
        await asyncio.sleep(1.0)
        for _ in range(100):  # a connection whose bytes the loaded hub has not read yet is spared until it has
            if len(hub.server._waiting[True]) <= server.MAX_PREAUTH_CONNECTIONS:
                break
            await asyncio.sleep(0.1)
        grown = rss_bytes() - before
        waiting = len(hub.server._waiting[True])
        release.set()
        holder.join(30)
        await hub.close()
        with RunStore(tmp_path / "runs.db", readonly=True) as store:
            rows_after = sum(store.count(table, hub.run_id) for table in ("events", "logs", "metrics"))
        return hub, grown, waiting, rows_after - rows_before
    hub, grown, waiting, new_rows = asyncio.run(scenario())
    assert waiting <= server.MAX_PREAUTH_CONNECTIONS
    assert hub.stats["preauth_evicted"] >= 1000 - server.MAX_PREAUTH_CONNECTIONS
    assert grown < 20 << 20, f"hub grew {grown >> 20} MB"
    assert new_rows < 10, new_rows
    refused = events_of(tmp_path, hub, "refused")
    assert sum(event.fields["count"] for event in refused) == hub.refusals.total >= 1000 - 64


def test_subscribers_that_never_read_cannot_grow_the_hub(tmp_path):
    async def never_reads(socket_path: Path) -> socket.socket:
        client = socket.socket(socket.AF_UNIX)
        client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        client.connect(str(socket_path))
        client.sendall(protocol.Subscribe(history=False).encode())
        return client

    async def scenario():
        hub, socket_path = await open_hub(tmp_path)
        clients = [await never_reads(socket_path) for _ in range(6)]
        await asyncio.sleep(0.3)
        before = rss_bytes()
        peak_backlog, peak = 0, 0
        line = "x" * 400
        for burst in range(400):  # 400 x 1000 lines of 400 bytes: 160 MB per subscriber if nothing bounded it
            for _ in range(1000):
                hub.add_log(0, "stdout", line, time.time())
            await hub.flush()
            await asyncio.sleep(0)
            peak_backlog = max(peak_backlog, sum(s.backlog_bytes() for s in hub.publisher.subscribers))
            if burst % 20 == 0:
                peak = max(peak, rss_bytes() - before)
        connected = len(hub.publisher.subscribers)
        for client in clients:
            client.close()
        await hub.close()
        return hub, peak_backlog, peak, connected
    hub, peak_backlog, peak, connected = asyncio.run(scenario())
    assert peak_backlog <= TOTAL_BACKLOG_BYTES + (4 << 20)
    assert connected == 0 and hub.stats["subscribers_dropped"] == 6
    assert peak < TOTAL_BACKLOG_BYTES + (64 << 20), f"hub grew {peak >> 20} MB"
    assert stored_count(tmp_path, hub, "logs") == 400_000  # the store has every line


def test_a_client_that_never_reads_its_pongs_is_disconnected(tmp_path):
    async def scenario():
        hub, socket_path = await open_hub(tmp_path)
        client = socket.socket(socket.AF_UNIX)
        client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        client.connect(str(socket_path))
        client.setblocking(False)
        ping = protocol.Ping().encode() * 1000
        hung_up = False
        for _ in range(400):
            try:
                client.send(ping)
            except BlockingIOError:
                pass
            except OSError:
                hung_up = True
                break
            await asyncio.sleep(0.005)
        client.close()
        await hub.close()
        return hub, hung_up
    hub, hung_up = asyncio.run(scenario())
    assert hung_up and hub.stats["clients_not_reading"] == 1


def test_stacks_are_asked_only_of_processes_the_run_started(tmp_path):
    """A hello's pid is the worker's word: a process without the run's marker is never signalled."""
    run_key = "run-key-of-this-test"
    stranger = subprocess.Popen(["sleep", "30"])
    ours = subprocess.Popen(["sleep", "30"], env={**os.environ, "RANKWATCH_RUN_KEY": run_key})
    stacks = tmp_path / "stacks"
    stacks.mkdir()
    for rank in (0, 1):
        (stacks / f"rank-{rank}.txt").write_text("")

    async def scenario():
        hub, socket_path = await open_hub(tmp_path)
        writers = []
        for rank, pid in ((0, stranger.pid), (1, ours.pid)):
            _, writer = await asyncio.open_unix_connection(str(socket_path))
            writer.write(hello(rank, pid=pid))
            await writer.drain()
            writers.append(writer)
        await asyncio.sleep(0.3)
        capture = StackCapture(hub, stacks, is_local=lambda row: True, wait_seconds=0.5, ask_seconds=0.1,
                               is_ours=lambda pid: carries_marker(pid, run_key))
        capture.capture_stacks()
        await asyncio.sleep(1.0)
        for writer in writers:
            writer.close()
        await hub.close()
        return capture.latest
    try:
        result = asyncio.run(scenario())
        assert stranger.poll() is None, "the stranger was signalled"
        assert ours.wait(5) == -signal.SIGUSR2  # the run's own process was (sleep dies of it)
        [refused] = [m for m in result["missing"] if m["rank"] == 0]
        assert f"refused to signal pid {stranger.pid}" in refused["why"]
    finally:
        for process in (stranger, ours):
            process.kill()
            process.wait()


def test_a_full_store_never_stops_the_run_and_is_told_once(tmp_path, capfd):
    async def subscriber(socket_path: Path) -> list[dict]:
        reader, writer = await asyncio.open_unix_connection(str(socket_path), limit=protocol.MAX_LINE_BYTES + 1)
        writer.write(protocol.Subscribe(history=False).encode())
        await writer.drain()
        messages = []
        while line := await reader.readline():
            messages.append(protocol.decode(line))
        return messages

    async def scenario():
        hub, socket_path = await open_hub(tmp_path)

        def fill_up(store: RunStore) -> None:  # SQLite's own "database or disk is full" (SQLITE_FULL)
            pages = store.connection.execute("PRAGMA page_count").fetchone()[0]
            store.connection.execute(f"PRAGMA max_page_count = {pages + 8}")

        await hub.writer.call(fill_up)
        watching = asyncio.create_task(subscriber(socket_path))
        await asyncio.sleep(0.2)
        sent = sum(await asyncio.gather(*(fake_worker(socket_path, rank, 30_000) for rank in range(2))))
        ranks = {rank: row.state for rank, row in hub.model.ranks.items()}
        await hub.update_run(status="succeeded", ended=time.time())
        await hub.close()
        return hub, sent, ranks, await watching
    hub, sent, ranks, messages = asyncio.run(scenario())
    assert ranks == {0: "exited", 1: "exited"}  # every message was taken in to the end
    assert hub.store_incomplete == "disk full"
    told = [event for message in messages if message["type"] == "update" for event in message.get("events") or []
            if event["kind"] == "store_incomplete"]
    assert len(told) == 1 and "disk full" in told[0]["message"]
    assert sum(len(m.get("metrics") or []) for m in messages if m["type"] == "update") == sent  # shown live
    assert hub.stats["records_not_stored_store_incomplete"] > 0
    assert hub.losses()["store_incomplete"] == "disk full"
    assert "Traceback" not in capfd.readouterr().err



def fill(path: Path) -> int:
    """Append to ``path`` until the disk is full, as a checkpoint being written does; bytes written."""
    written = 0
    with contextlib.suppress(OSError), open(path, "ab") as filler:
        while True:
            filler.write(b"\0" * 4096)
            filler.flush()
            written += 4096
    return written


def test_a_disk_that_goes_on_filling_after_the_store_is_refused_leaves_room_for_the_runs_end(small_disk):
    """Another process fills the disk, the store is refused, and that process goes on writing
    while it finds room. The room kept for the run's end must still be there at the end: it
    was given back at the first refusal once, the checkpoint took it, and the run stayed
    "running" in the store after it ended (a CI failure of ``test_disk_trouble``)."""
    store_path = small_disk / "runs.db"

    async def scenario():
        hub, socket_path = await open_hub(small_disk, store_path=store_path)
        fill(small_disk / "checkpoint.bin")
        await asyncio.gather(*(fake_worker(socket_path, rank, 20_000) for rank in range(2)))
        for _ in range(100):  # ingest commits every 50 ms
            if hub.store_incomplete:
                break
            await asyncio.sleep(0.05)
        refused = hub.store_incomplete
        taken_after = fill(small_disk / "checkpoint.bin")  # the checkpoint goes on
        await hub.update_run(status="succeeded", ended=time.time())
        await hub.close()
        return hub.run_id, refused, taken_after

    run_id, refused, taken_after = asyncio.run(scenario())
    assert refused == "disk full"
    assert taken_after < 256 << 10, taken_after  # the reserve (1 MiB) was not there to take
    with RunStore(store_path, readonly=True) as store:
        run = store.stored_run(run_id)
        assert run.status == "succeeded" and run.ended is not None, run
        kinds = [row[0] for row in store.connection.execute("SELECT kind FROM events WHERE run_id = ?", (run_id,))]
        states = dict(store.connection.execute("SELECT rank, state FROM ranks WHERE run_id = ?", (run_id,)))
    assert "store_incomplete" in kinds  # the notice the full store refused went with the end
    assert states == {0: "exited", 1: "exited"}
