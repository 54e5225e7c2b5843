"""When the reporter thread wakes (issue 17): only when something is worth sending.

The real ``Reporter`` on a real socket (``FakeHub``); wake-ups are read from the
kernel's own count of the thread's sleeps (``/proc/self/task/<tid>/status``).
"""

from __future__ import annotations

import os
import time

from worker_harness import FakeHub

from rankwatch import protocol
from rankwatch._buffer import KIND_LOG, WAKE_THRESHOLD, RecordBuffer
from rankwatch._reporter import (
    FLUSH_LATENCY,
    HEARTBEAT_EVERY,
    MAX_FLUSH_LATENCY,
    MAX_RECEIVED,
    Reporter,
)


def _sleeps(thread_id: int) -> int:
    """How many times the thread went to sleep and was woken (voluntary context switches)."""
    with open(f"/proc/self/task/{thread_id}/status") as status:
        for line in status:
            if line.startswith("voluntary_ctxt_switches"):
                return int(line.split()[1])
    raise AssertionError("no voluntary_ctxt_switches in /proc")


def _cpu_seconds(thread_id: int) -> float:
    """CPU time the thread has run (``schedstat``: nanoseconds on a CPU)."""
    with open(f"/proc/self/task/{thread_id}/schedstat") as schedstat:
        return int(schedstat.read().split()[0]) / 1e9


def _connected_reporter(hub: FakeHub, buffer: RecordBuffer) -> tuple[Reporter, int]:
    reporter = Reporter(hub.address, protocol.Hello(rank=0), buffer, rank=0)
    reporter.start()
    hub.wait_message("heartbeat")
    thread_id = reporter._thread.native_id
    assert thread_id is not None
    return reporter, thread_id


def _stream(hub: FakeHub, buffer: RecordBuffer, count: int, period: float) -> tuple[float, int]:
    """Put ``count`` records ``period`` apart; returns the seconds it took and the batches sent."""
    started = time.monotonic()
    for step in range(count):
        buffer.put((KIND_LOG, time.time(), step, {"value": float(step)}))
        time.sleep(period)
    seconds = time.monotonic() - started
    hub.wait_for(lambda: len(hub.metric_items()) == count)
    return seconds, len([message for message in hub.messages("metrics") if message["items"]])


def test_an_idle_reporter_wakes_only_for_its_heartbeat_and_stays_out_of_the_training_threads_way():
    with FakeHub() as hub:
        reporter, thread_id = _connected_reporter(hub, RecordBuffer(100))
        try:
            before = _sleeps(thread_id)
            time.sleep(2 * HEARTBEAT_EVERY)
            woken = _sleeps(thread_id) - before
            with open(f"/proc/self/task/{thread_id}/comm") as comm:
                name = comm.read().strip()
            policy = os.sched_getscheduler(thread_id)
        finally:
            assert reporter.close(2.0)

    assert woken <= 6  # two heartbeats (a fixed 20 ms tick woke it 100 times)
    assert name == "rankwatch-reporter"[:15]
    assert policy == os.SCHED_BATCH
    assert os.sched_getscheduler(0) == os.SCHED_OTHER  # the calling (training) thread is untouched


def test_a_record_after_a_quiet_spell_wakes_the_reporter_instead_of_waiting_for_the_heartbeat():
    buffer = RecordBuffer(100)
    with FakeHub() as hub:
        reporter, _ = _connected_reporter(hub, buffer)
        try:
            beats = len(hub.messages("heartbeat"))
            hub.wait_for(lambda: len(hub.messages("heartbeat")) > beats)  # just after a heartbeat
            time.sleep(0.1)
            put_at = time.monotonic()
            buffer.put((KIND_LOG, time.time(), 0, {"value": 1.0}))
            hub.wait_for(lambda: hub.metric_items())
            waited = time.monotonic() - put_at
        finally:
            assert reporter.close(2.0)

    assert waited < HEARTBEAT_EVERY / 2  # FLUSH_LATENCY (0.04 s) on a quiet machine


def test_a_steady_stream_is_sent_in_batches_of_up_to_the_flush_latency_in_order():
    buffer = RecordBuffer(10000)
    count, period = 400, 0.0025
    with FakeHub() as hub:
        reporter, _ = _connected_reporter(hub, buffer)
        try:
            seconds, batches = _stream(hub, buffer, count, period)
        finally:
            assert reporter.close(2.0)

    assert [item[1] for item in hub.metric_items()] == list(range(count))
    assert batches <= seconds / FLUSH_LATENCY + 3  # one send per latency window at most


def test_without_a_hub_the_reporter_waits_for_its_backoff_even_with_messages_queued(tmp_path):
    buffer = RecordBuffer(100)
    reporter = Reporter(str(tmp_path / "nobody-listens.sock"), protocol.Hello(rank=0), buffer, rank=0)
    reporter.start()
    try:
        reporter.send(protocol.Heartbeat(0, time.time(), None, 0, 0))  # a control message it cannot send
        buffer.put((KIND_LOG, time.time(), 0, {"value": 1.0}))
        thread_id = reporter._thread.native_id
        assert thread_id is not None
        before, cpu_before = _sleeps(thread_id), _cpu_seconds(thread_id)
        time.sleep(1.0)
        woken, cpu = _sleeps(thread_id) - before, _cpu_seconds(thread_id) - cpu_before
    finally:
        assert reporter.close(1.0) is not None

    assert woken <= 8  # connection attempts 0.2, 0.4, 0.8 s apart
    assert cpu < 0.1  # and no spinning between them (a busy loop would take most of the second)


def test_the_buffer_wakes_its_reader_on_the_first_record_and_at_the_threshold_only():
    buffer = RecordBuffer(WAKE_THRESHOLD + 10)
    wakes = []
    buffer.waker = lambda: wakes.append(len(buffer))
    buffer.put((KIND_LOG, 0.0, 0, {}))
    assert wakes == []  # nobody sleeps on an empty buffer: only the threshold wakes
    buffer.drain()
    buffer.wake_at = 1  # the reader sleeps on an empty buffer
    for step in range(3):
        buffer.put((KIND_LOG, 0.0, step, {}))
    assert wakes == [1]
    buffer.wake_at = WAKE_THRESHOLD
    while len(buffer) < WAKE_THRESHOLD + 5:
        buffer.put((KIND_LOG, 0.0, 0, {}))
    assert wakes == [1, WAKE_THRESHOLD]


def test_the_reporter_sends_at_the_pace_the_hub_asks_for_and_ignores_what_it_cannot_read():
    buffer = RecordBuffer(10000)
    count, period = 600, 0.0025
    with FakeHub() as hub:
        reporter, _ = _connected_reporter(hub, buffer)
        try:
            assert reporter.flush_latency == FLUSH_LATENCY  # fresh until the hub says otherwise
            hub.say(b'{"type": "pace", "v": 1, "flush_latency": "soon"}\nnot json\n'
                    + protocol.Pace(0.25).encode())
            hub.wait_for(lambda: reporter.flush_latency == 0.25, timeout=3 * HEARTBEAT_EVERY)
            seconds, batches = _stream(hub, buffer, count, period)

            hub.say(protocol.Pace(3600.0).encode())  # a pace that would starve the stall monitor
            hub.wait_for(lambda: reporter.flush_latency == MAX_FLUSH_LATENCY, timeout=3 * HEARTBEAT_EVERY)
            hub.kick()  # a new connection (a restarted hub) starts fresh again
            hub.wait_for(lambda: reporter.connections == 2)
            assert reporter.flush_latency == FLUSH_LATENCY
        finally:
            assert reporter.close(2.0)

    assert [item[1] for item in hub.metric_items()] == list(range(count))  # nothing lost, in order
    assert batches <= seconds / 0.25 + 3  # at 40 ms it would be ~40 batches
    assert reporter.connections == 2  # the unreadable lines did not break the connection


def test_a_line_from_the_hub_that_never_ends_is_not_held_and_the_next_pace_is_still_read():
    with FakeHub() as hub:
        reporter, _ = _connected_reporter(hub, RecordBuffer(100))
        try:
            for _ in range(4):  # 4 x 48 KiB without a newline, one piece per heartbeat's read
                hub.say(b"x" * 49152)
                heartbeats = len(hub.messages("heartbeat"))
                hub.wait_for(lambda seen=heartbeats: len(hub.messages("heartbeat")) > seen,
                             timeout=3 * HEARTBEAT_EVERY)
            assert len(reporter._received) <= MAX_RECEIVED
            hub.say(b"\n" + protocol.Pace(0.5).encode())
            hub.wait_for(lambda: reporter.flush_latency == 0.5, timeout=3 * HEARTBEAT_EVERY)
            assert reporter.connections == 1  # the long line did not cost the connection
        finally:
            assert reporter.close(2.0)
