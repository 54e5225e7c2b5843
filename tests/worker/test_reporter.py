"""The reporter thread: hello, rankwatch.log records, drops, reconnection and stack dumps.

Real worker processes talk to a real socket server (``FakeHub``); none of these
scripts imports torch.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Iterator
from importlib.metadata import version

import pytest
from worker_harness import PYTHON, FakeHub, start_worker, worker_environment

from rankwatch import protocol
from rankwatch._buffer import KIND_GPU_MEMORY, KIND_LOG, KIND_STEP, RecordBuffer
from rankwatch._reporter import Reporter
from rankwatch._stacks import (
    ASK_SECONDS,
    STACK_SIGNAL,
    ask_file_path,
    ask_for_dump,
    signal_unless_answered,
    stacks_file_path,
)
from rankwatch._values import Pending


def _finish(process, timeout: float = 20.0) -> tuple[str, str]:
    stdout, stderr = process.communicate(timeout=timeout)
    assert process.returncode == 0, stderr
    return stdout, stderr


def test_hello_describes_the_worker_and_log_records_arrive():
    with FakeHub() as hub:
        environment = worker_environment(
            hub.address, RANK="2", LOCAL_RANK="0", WORLD_SIZE="4", LOCAL_WORLD_SIZE="2",
            GROUP_RANK="1", TORCHELASTIC_RESTART_COUNT="3",
        )  # fmt: skip
        process = start_worker(["probe.py", "a"], environment)
        _finish(process)
        hub.wait_message("exit", rank=2)

        hello = hub.messages("hello")[0]
        assert {key: value for key, value in hello.items() if key not in ("_connection",)} == {
            "type": "hello",
            "v": protocol.VERSION,
            "token": "secret-token",
            "run_key": "run-under-test",
            "rank": 2,
            "local_rank": 0,
            "node_rank": 1,
            "world_size": 4,
            "local_world_size": 2,
            "host": "testhost",
            "pid": process.pid,
            "python": PYTHON,
            "python_version": "{}.{}.{}".format(*sys.version_info[:3]),
            "torch": version("torch"),
            "restart": 3,
            "argv": ["probe.py", "a"],
        }
        [item] = hub.metric_items(rank=2)
        assert item[1:] == [0, "probe", 1.0, protocol.SOURCE_LOG]
        assert abs(item[0] - time.time()) < 60
        assert hub.messages()[-1]["type"] == "exit"
        assert hub.bad_lines == []


def test_queue_overflow_is_dropped_counted_and_reported_over_tcp():
    count = 20000
    with FakeHub(tcp=True) as hub:
        environment = worker_environment(hub.address, RANKWATCH_QUEUE_LIMIT="100")
        stdout, _ = _finish(start_worker(["flood.py", str(count)], environment))
        hub.wait_message("exit")

        assert stdout == f"logged {count}\n"
        received = [item[3] for item in hub.metric_items() if item[2] == "value"]
        dropped = hub.messages("heartbeat")[-1]["dropped"]
        assert dropped > 0
        assert len(received) + dropped == count
        assert received == sorted(received)  # arrival keeps the logging order


def test_reconnects_after_the_hub_appears_and_after_it_drops_the_connection(tmp_path):
    # A short private folder from tests/conftest.py (Unix socket paths must stay short).
    socket_path = os.path.join(os.environ["RANKWATCH_SOCKET_DIR"], "late-hub.sock")
    go_file = tmp_path / "go"
    process = start_worker(["bursts.py", str(go_file)], worker_environment(socket_path))
    time.sleep(0.7)  # nobody listens yet: the worker backs off and retries
    with FakeHub(path=socket_path) as hub:
        hub.wait_for(lambda: len(hub.metric_items()) == 10)
        hub.kick()
        go_file.touch()
        _finish(process)
        hub.wait_message("exit")

        assert len(hub.messages("hello")) == 2
        values = [(item[1], item[3]) for item in hub.metric_items()]
        assert values == [(step, 1.0) for step in range(10)] + [
            (step, 2.0) for step in range(10, 20)
        ]
        assert hub.messages("heartbeat")[-1]["dropped"] == 0


def test_an_asked_rank_dumps_every_thread_from_its_reporter_with_the_gil_held(tmp_path):
    """The runner's ask is taken by the reporter thread at its heartbeat: the dump is written from
    Python (the reporter is its current thread), the ask is gone, no signal was needed."""
    stop_file = tmp_path / "stop"
    stacks = tmp_path / "stacks"
    with FakeHub() as hub:
        environment = worker_environment(hub.address, RANK="3", RANKWATCH_STACKS_DIR=str(stacks))
        process = start_worker(["hang.py", str(stop_file)], environment)
        assert process.stdout.readline() == "waiting\n"  # the script is in wait_here
        hub.wait_message("hello", rank=3)
        dump_file = stacks_file_path(str(stacks), 3)
        ask_for_dump(dump_file)
        notice = hub.wait_message("stacks", rank=3, timeout=ASK_SECONDS + 5)
        stop_file.touch()
        _finish(process)

        dump = _read(dump_file)
        [current] = [block for block in dump.split("\n\n") if block.startswith("Current thread")]
        assert "_reporter.py" in current and "answer_ask" in current  # dumped by the reporter thread
        assert 'hang.py", line 10 in wait_here' in dump  # and every other thread: the main one too
        assert not os.path.exists(ask_file_path(dump_file))
        assert notice["path"] == dump_file


def test_a_rank_holding_the_gil_in_c_leaves_the_ask_and_dumps_on_the_signal(tmp_path):
    """A main thread inside C code that keeps the GIL (here ``sum`` over a huge range) stops the
    reporter from taking the ask; the runner then takes it back and signals, and faulthandler's
    handler dumps. Safe: no thread can run Python while the GIL is held."""
    stacks = tmp_path / "stacks"
    with FakeHub() as hub:
        environment = worker_environment(hub.address, RANK="3", RANKWATCH_STACKS_DIR=str(stacks))
        process = start_worker(["hold_gil.py", str(tmp_path / "go")], environment)
        try:
            hub.wait_message("hello", rank=3)  # said while the GIL was free
            (tmp_path / "go").touch()
            assert process.stdout.readline() == "holding\n"
            dump_file = stacks_file_path(str(stacks), 3)
            ask_for_dump(dump_file)
            time.sleep(ASK_SECONDS + 1.0)  # a heartbeat and more: the reporter could not take it
            assert signal_unless_answered(process.pid, dump_file)
            deadline = time.monotonic() + 10
            while "hold_the_gil" not in _read(dump_file):
                assert time.monotonic() < deadline and process.poll() is None, _read(dump_file)
                time.sleep(0.02)
        finally:
            process.kill()
            process.communicate()
        assert 'hold_gil.py", line 11 in hold_the_gil' in _read(dump_file)
        assert not os.path.exists(ask_file_path(dump_file))
        assert STACK_SIGNAL == signal.SIGUSR2


def _read(path: str) -> str:
    try:
        with open(path) as dump:
            return dump.read()
    except FileNotFoundError:
        return ""


class _SlowCopy(Pending):
    """A device copy that completes when the test says so."""

    def __init__(self, value: float):
        self.done = threading.Event()
        self._value = value

    def ready(self) -> bool:
        return self.done.is_set()

    def value(self) -> float:
        return self._value


@contextlib.contextmanager
def _reporting(buffer: RecordBuffer) -> Iterator[FakeHub]:
    """A fake hub and a rank 0 reporter sending ``buffer`` to it, closed (in time) afterwards."""
    with FakeHub() as hub:
        reporter = Reporter(hub.address, protocol.Hello(rank=0), buffer, rank=0)
        reporter.start()
        try:
            yield hub
        finally:
            assert reporter.close(2.0)


def test_device_values_are_held_back_until_their_copy_is_done():
    buffer = RecordBuffer(100)
    copy = _SlowCopy(2.5)
    with _reporting(buffer) as hub:
        buffer.put((KIND_LOG, 1.0, 0, {"gpu_value": copy}))
        buffer.put((KIND_LOG, 2.0, 1, {"cpu_value": 1.0}))
        hub.wait_for(lambda: hub.metric_items())
        time.sleep(0.2)
        assert [item[2] for item in hub.metric_items()] == ["cpu_value"]
        copy.done.set()
        hub.wait_for(lambda: len(hub.metric_items()) == 2)
        assert hub.metric_items()[1] == [1.0, 0, "gpu_value", 2.5, "log"]


def test_a_step_whose_loss_is_still_being_copied_is_progress_and_arrives_whole_later():
    """The heartbeat's step (what the stall monitor reads) moves on while a CUDA loss copy is in flight."""
    buffer = RecordBuffer(100)
    copy = _SlowCopy(0.75)
    with _reporting(buffer) as hub:
        buffer.put((KIND_STEP, time.time(), 7, copy, 0.02, None, 0, None, False, None))
        hub.wait_for(lambda: hub.messages("heartbeat", step=7), timeout=5)
        assert hub.metric_items() == []
        copy.done.set()
        hub.wait_for(lambda: hub.metric_items())
        assert [(item[1], item[2], item[3]) for item in hub.metric_items()] == [(7, "loss", 0.75),
                                                                              (7, "step_time", 0.02)]


def test_a_step_whose_gpu_phases_are_in_flight_waits_for_them_and_arrives_whole():
    """The phases of a GPU step are CUDA events the reporter reads once done: never a partial row."""
    buffer = RecordBuffer(100)
    phases = _SlowCopy(["gpu", None, None, 0.004, 0.006, 0.001, 0.0005, 0.0005])
    with _reporting(buffer) as hub:
        buffer.put((KIND_STEP, time.time(), 3, 0.5, 0.012, None, 0, None, False, phases))
        hub.wait_for(lambda: hub.messages("heartbeat", step=3), timeout=5)
        assert hub.metric_items() == []
        phases.done.set()
        hub.wait_for(lambda: hub.metric_items())
        names = [item[2] for item in hub.metric_items()]
        assert names == ["loss", "step_time", "phase_clock", "phase_forward", "phase_backward", "phase_comm",
                         "phase_optimizer", "phase_rest", "compute_time"]
        values = {item[2]: item[3] for item in hub.metric_items()}
        assert values["phase_clock"] == 1  # the GPU's clock
        assert values["compute_time"] == pytest.approx(0.004 + 0.006 + 0.0005 + 0.0005)  # the span less comm


def test_gpu_memory_goes_as_three_measured_records():
    buffer = RecordBuffer(100)
    with _reporting(buffer) as hub:
        buffer.put((KIND_GPU_MEMORY, 5.0, 9, 1024, 4096, None))
        hub.wait_for(lambda: hub.metric_items())
        assert hub.metric_items() == [[5.0, 9, "gpu_mem_allocated", 1024, "auto"],
                                      [5.0, 9, "gpu_mem_reserved", 4096, "auto"]]  # the peak was not read


@pytest.mark.parametrize("address", ["tcp://localhost", "tcp://host:port"])
def test_malformed_tcp_address_only_disables_sending(address):
    buffer = RecordBuffer(10)
    reporter = Reporter(address, protocol.Hello(rank=0), buffer, rank=0)
    reporter.start()
    buffer.put((KIND_LOG, 1.0, 0, {"value": 1.0}))
    started = time.monotonic()
    assert reporter.close(2.0)
    assert time.monotonic() - started < 2.5


def test_exit_is_bounded_when_the_hub_stops_reading(tmp_path):
    """A hub that accepts nothing and reads nothing must not delay the worker's exit past ~2 s."""
    socket_path = str(tmp_path / "stalled.sock")
    stalled = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stalled.bind(socket_path)
    stalled.listen(1)  # connections queue up, nothing is ever read
    try:
        started = time.monotonic()
        stdout, _ = _finish(start_worker(["flood.py", "200000"], worker_environment(socket_path)))
        elapsed = time.monotonic() - started
    finally:
        stalled.close()

    assert stdout == "logged 200000\n"
    assert elapsed < 4.5
