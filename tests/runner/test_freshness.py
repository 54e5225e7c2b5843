"""The run's freshness follows who watches it live (issue 17): the real hub on a real socket.

While nobody watches (a plain terminal, a detached run) workers are asked to send less
often and the hub commits routine records less often; log lines and events never wait.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from rankwatch import protocol
from runner.hub.freshness import UNWATCHED, WATCHED
from runner.hub.hub import wait_until_set
from tests.hubs import hello, open_hub


async def _next_pace(reader: asyncio.StreamReader) -> float:
    line = await asyncio.wait_for(reader.readline(), 10)
    message = protocol.decode_message(line)
    assert isinstance(message, protocol.Pace), line
    return message.flush_latency


async def _worker(socket_path: Path) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_unix_connection(str(socket_path))
    writer.write(hello(0))
    await writer.drain()
    return reader, writer


def test_workers_are_asked_for_fewer_batches_while_nobody_watches_and_for_fresh_ones_while_someone_does(tmp_path):
    async def scenario() -> tuple[list[float], list[bool]]:
        hub, socket_path = await open_hub(tmp_path)
        reader, writer = await _worker(socket_path)
        paces = [await _next_pace(reader)]  # its hello is answered: nobody watches yet
        watched = [hub.freshness.watched]
        plain = hub.add_local_subscriber(lambda message: None, watches_live=False)  # `run --plain`
        watched.append(hub.freshness.watched)
        _gui_reader, gui_writer = await asyncio.open_unix_connection(str(socket_path),
                                                                    limit=protocol.MAX_LINE_BYTES + 1)
        gui_writer.write(protocol.encode("subscribe", history=False))  # the GUI, `rankwatch attach`
        paces.append(await _next_pace(reader))
        watched.append(hub.freshness.watched)
        gui_writer.close()  # it went away
        paces.append(await _next_pace(reader))
        watched.append(hub.freshness.watched)
        hub.publisher.remove(plain)
        hub.add_local_subscriber(lambda message: None)  # the live terminal table
        paces.append(await _next_pace(reader))
        watched.append(hub.freshness.watched)
        writer.close()
        await hub.close()
        return paces, watched

    paces, watched = asyncio.run(scenario())
    assert paces == [UNWATCHED.worker_latency, WATCHED.worker_latency, UNWATCHED.worker_latency,
                     WATCHED.worker_latency]
    assert watched == [False, False, True, False, True]
    assert UNWATCHED.worker_latency > WATCHED.worker_latency
    assert UNWATCHED.routine_flush_seconds > WATCHED.routine_flush_seconds


def test_unwatched_metrics_wait_for_the_routine_pace_but_a_log_line_goes_out_at_once_and_takes_them_along(
        tmp_path):
    wait = 0.2
    assert wait < UNWATCHED.routine_flush_seconds  # a timer never fires early: nothing may flush the metric

    async def scenario() -> tuple[list[dict], int, int]:
        hub, socket_path = await open_hub(tmp_path)
        updates: list[dict] = []
        hub.add_local_subscriber(updates.append, watches_live=False)
        reader, writer = await _worker(socket_path)
        await _next_pace(reader)
        await asyncio.sleep(wait)  # the hello's own flush is over
        writer.write(protocol.encode_metric_items(0, [[time.time(), 1, "loss", 0.5, "auto"]]))
        await writer.drain()
        await asyncio.sleep(wait)
        published_before_log = len([u for u in updates if u.get("metrics")])
        hub.add_log(0, "stdout", "epoch 1 done", time.time())
        deadline = time.monotonic() + 10
        while not any(u.get("logs") for u in updates) and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        writer.close()
        await hub.close()
        return updates, published_before_log, len(updates)

    updates, published_before_log, _ = asyncio.run(scenario())
    assert published_before_log == 0
    metric_update = next(i for i, u in enumerate(updates) if u.get("metrics"))
    log_update = next(i for i, u in enumerate(updates) if u.get("logs"))
    assert metric_update <= log_update  # the waiting metric went out with the log line, if not before
    assert [m[4] for m in updates[metric_update]["metrics"]] == [0.5]



def test_the_routine_wait_is_cancelled_even_when_the_urgent_event_is_set_in_the_same_tick():
    """``Hub.close()`` cancels the flush loop while it waits for the routine pace, and events
    set the urgent flag at close time. A lost cancellation leaves the loop running and
    ``close()`` waiting for it forever: the run never says bye (``asyncio.wait_for`` on
    Python 3.11 loses it in exactly this race, every time)."""
    tries = 200

    async def one_race() -> bool:
        urgent = asyncio.Event()

        async def flush_loop() -> None:
            while True:
                await wait_until_set(urgent, 0.5)
                urgent.clear()
                await asyncio.sleep(0.001)

        loop = asyncio.get_running_loop().create_task(flush_loop())
        await asyncio.sleep(0.002)  # it waits for the routine pace
        urgent.set()
        await asyncio.sleep(0)  # the wait is ending...
        loop.cancel()  # ...as close() cancels it
        try:
            await asyncio.wait_for(loop, 2)
        except asyncio.CancelledError:
            return True
        except asyncio.TimeoutError:
            loop.cancel()
        return False

    async def scenario() -> int:
        for race in range(tries):
            if not await one_race():
                return race  # the first lost cancellation ends the test
        return tries

    assert asyncio.run(scenario()) == tries
