"""The phases of a step (``rankwatch._phases``), on torch's real autograd engine, DataLoader and a real
gloo group in this process.

A one-rank gloo group makes ``torch.distributed`` initialised; the wait DDP's reducer does at the end
of a backward is reproduced the way the reducer does it: a gradient-accumulator hook that queues a
final callback on the engine, here one that sleeps. Two-rank jobs under torchrun are in
``tests/diagnosis/test_bottleneck_jobs.py``. The GPU clock (CUDA events) cannot run here: its
arithmetic is checked with events that mirror ``torch.cuda.Event`` (``_FakeEvent``), and on a real
GPU by ``tests/bench/gpu_phases_inprocess.py``.
"""

from __future__ import annotations

import itertools
import time

import pytest
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset

from rankwatch import _phases as phases_module
from rankwatch import protocol
from rankwatch._phases import (
    BACKWARD,
    COMM,
    MAX_SPLIT_EVERY,
    REST,
    SPLIT_PERIOD_SECONDS,
    PhaseMarks,
    RunQueueWait,
    StepPhases,
    split_every,
)

WAIT_SECONDS = 0.05


@pytest.fixture
def process_group():
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


class _SlowData(Dataset):
    def __init__(self, seconds: float):
        self.seconds = seconds

    def __len__(self) -> int:
        return 64

    def __getitem__(self, index):
        time.sleep(self.seconds)
        return torch.randn(8), torch.randn(1)


def _step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, reducer_wait: float = 0.0) -> None:
    optimizer.zero_grad()
    loss = model(torch.randn(4, 8)).sum()
    handle = None
    if reducer_wait:
        engine = torch.autograd.Variable._execution_engine

        def bucket_ready(grad):  # like DDP's reducer: the last gradient queues the wait for the all-reduce
            engine.queue_callback(lambda: time.sleep(reducer_wait))

        handle = model.weight.register_hook(bucket_ready)
    loss.backward()
    if handle is not None:
        handle.remove()
    optimizer.step()


def _span(step: dict) -> float:
    return sum(value for name, value in step["phases"].items() if name != "clock" and value is not None)


def test_a_plain_loop_has_every_phase_and_they_add_up_to_the_step_time(measured):
    model = torch.nn.Sequential(torch.nn.Linear(8, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for x, y in DataLoader(_SlowData(0.004), batch_size=2):
        x = x.clone()  # the batch's way to the device
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        time.sleep(0.002)  # the loop's own work: the rest
    steps = measured.steps()
    assert len(steps) == 32
    assert steps[0]["phases"] is None  # the first step has no start
    for step in steps[1:]:
        phases = step["phases"]
        assert phases["clock"] == "cpu"
        assert _span(step) == pytest.approx(step["step_time"], rel=1e-9)  # exactly, never rescaled
        assert phases["comm"] is None  # no process group: nothing to wait for
        assert all(phases[name] is not None for name in ("data", "h2d", "forward", "backward", "optimizer", "rest"))
        assert phases["data"] >= 2 * 0.004 * 0.9  # two samples of 4 ms each
        assert phases["rest"] >= 0.002 * 0.9
    # the forward's hook fires once per timed step and goes; it is armed again only for the next one
    assert len(torch.nn.modules.module._global_forward_pre_hooks) <= 1


def test_the_wait_at_the_end_of_backward_is_comm_not_backward(measured, process_group):
    model = torch.nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(3):
        _step(model, optimizer, reducer_wait=WAIT_SECONDS)
    _step(model, optimizer)
    steps = measured.steps()
    assert steps[0]["phases"] is None and steps[0]["cpu_wait"] is None  # the first step has no start
    for step in steps[1:3]:
        assert WAIT_SECONDS * 0.9 <= step["phases"]["comm"] < WAIT_SECONDS + 0.5
        assert step["phases"]["backward"] < WAIT_SECONDS / 2
        row = [1.0, step["step"], None, step["step_time"], None, 0, step["cpu_wait"], False,
               ["cpu", *(step["phases"][name] for name in protocol.PHASES)]]
        compute = {record[3]: record[4] for record in protocol.step_row_records(0, row)}["compute_time"]
        assert compute < step["step_time"] - WAIT_SECONDS * 0.9  # the hub's compute time leaves the wait out
    assert steps[3]["phases"]["comm"] < WAIT_SECONDS / 2  # the count starts again every step


def test_without_a_process_group_comm_is_not_measured(measured):
    model = torch.nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(3):
        _step(model, optimizer, reducer_wait=0.01)
    assert [step["phases"]["comm"] for step in measured.steps()[1:]] == [None, None]


def test_python_collectives_are_comm_and_still_return_what_torch_returns(measured, process_group):
    model = torch.nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    _step(model, optimizer)
    tensor = torch.ones(3)
    assert dist.all_reduce(tensor) is None and tensor.tolist() == [1.0, 1.0, 1.0]
    work = dist.all_reduce(tensor, async_op=True)
    work.wait()
    dist.barrier()
    assert dist.all_reduce.__name__ == "all_reduce" and dist.all_reduce is not dist.distributed_c10d.all_reduce
    _step(model, optimizer)
    steps = measured.steps()
    assert steps[1]["phases"]["comm"] is not None and steps[1]["phases"]["comm"] >= 0.0
    assert _span(steps[1]) == pytest.approx(steps[1]["step_time"], rel=1e-9)
    measured.clock.uninstall()
    assert dist.all_reduce is dist.distributed_c10d.all_reduce  # torch's own function again


def test_a_closure_step_keeps_the_update_in_optimizer_and_its_forward_and_backward_apart(measured):
    """Lightning's automatic optimisation: ``optimizer.step(closure)`` runs the forward and backward."""
    model = torch.nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

    def closure():
        optimizer.zero_grad()
        loss = model(torch.randn(4, 8)).sum()
        loss.backward()
        time.sleep(0.01)  # after the backward, inside the step: the optimizer's (an update that takes long)
        return loss

    for _ in range(4):
        optimizer.step(closure)
    for step in measured.steps()[1:]:
        phases = step["phases"]
        assert phases["forward"] is not None and phases["backward"] is not None
        assert phases["optimizer"] >= 0.01 * 0.9
        assert phases["rest"] < 0.005


def test_a_step_gradscaler_skipped_is_counted_and_marked_skipped_its_loss_kept(measured):
    model = torch.nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu")
    losses = []
    for index in range(4):
        optimizer.zero_grad()
        loss = model(torch.randn(4, 8)).pow(2).mean()
        scaler.scale(loss).backward()
        if index == 2:
            model.weight.grad.fill_(float("inf"))
        scaler.step(optimizer)
        scaler.update()
        losses.append(loss.item())
    steps = measured.steps()
    assert [step["skipped"] for step in steps] == [False, False, True, False]
    assert [step["loss"] for step in steps] == pytest.approx(losses)


def test_the_run_queue_is_read_where_linux_has_it():
    run_queue = RunQueueWait()
    first = run_queue.read()
    if first is None:
        pytest.skip("no /proc/thread-self/schedstat here")
    deadline = time.perf_counter() + 0.02
    while time.perf_counter() < deadline:
        pass
    assert run_queue.readable and 0 <= run_queue.read() - first < 1e9


def test_steps_faster_than_the_split_period_are_timed_every_power_of_two_steps():
    assert [split_every(t) for t in (None, 0.0, 0.5, 0.010, 0.009, 0.005, 0.004, 0.002, 0.001, 1e-6)] == \
        [1, 1, 1, 1, 2, 2, 4, 8, 16, MAX_SPLIT_EVERY]
    for step_time in (0.0005, 0.003, 0.007):  # timing at most one step per period
        assert split_every(step_time) * step_time >= SPLIT_PERIOD_SECONDS or split_every(step_time) == MAX_SPLIT_EVERY


def test_fast_steps_have_phases_only_on_the_timed_steps_and_slow_ones_on_every_step(measured, process_group):
    """A 1-rank DDP model: fast steps are timed when their number is a multiple of ``split_every`` of the
    step before (every 16th for sub-millisecond steps; a busy machine makes some steps slower, so the
    rule is checked against the step times measured), 12 ms steps every step. The run queue (a system
    call) is read only in timed steps and at the end of the step before them."""
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    run_queue = measured.clock.phases.run_queue = _CountedRunQueue()
    reads_at_step = []
    for _ in range(64):
        optimizer.zero_grad()
        model(torch.randn(4, 8)).sum().backward()
        optimizer.step()
        reads_at_step.append(run_queue.reads)
    fast = measured.steps()
    timed = [step["step"] for step in fast if step["phases"] is not None]
    assert timed[:1] == [1]  # step 0 (no start to count from) is not measured; step 1 (no step time before it) is
    expected = [step["step"] for before, step in itertools.pairwise(fast)
                if step["step"] % split_every(before["step_time"]) == 0]
    assert timed == expected
    assert len(timed) < len(fast) // 2  # sub-10 ms steps: most are not timed
    assert all((step["cpu_wait"] is None) == (step["phases"] is None) for step in fast)
    for step in fast[2:]:
        number = step["step"]
        read_in_step = reads_at_step[number] > reads_at_step[number - 1]
        next_timed = (number + 1) % split_every(step["step_time"]) == 0
        assert read_in_step == (number in timed or next_timed), number
    for _ in range(6):
        optimizer.zero_grad()
        model(torch.randn(4, 8)).sum().backward()
        optimizer.step()
        time.sleep(0.012)
    slow = measured.steps()[-4:]  # after the first slow step, every step is timed
    assert all(step["phases"] is not None and step["phases"]["comm"] >= 0.0 for step in slow)


def test_cpu_wait_counts_the_run_queue_outside_the_waits_for_data_and_communication(monkeypatch):
    """The run queue's nanoseconds during ``data`` and ``comm`` are the waits' own (the thread waited
    anyway); ``cpu_wait`` is the rest, so the hub's compute time subtracts each moment once."""
    run_queue = _CountedRunQueue(ticks=1_000_000)  # every read: 1 ms more on the run queue
    phases = StepPhases(torch, lambda callback: None, lambda: False, None, run_queue)
    monkeypatch.setattr(phases_module, "split_every", lambda step_time: 1)
    assert phases.end_step(0.0, None, 1) == (None, None)  # step 0: its end starts step 1 (read 1)
    phases.on_batch_start()  # read 2: 1 ms outside the waits
    phases.on_batch_end()  # read 3: the wait's millisecond is not counted
    phases.enter(COMM)  # read 4: 1 ms more outside
    phases.leave()  # read 5
    marks, cpu_wait = phases.end_step(1.0, 0.5, 2)  # read 6: 1 ms more
    assert cpu_wait == pytest.approx(0.003)
    assert marks.ready() and marks.value()[0] == "cpu"


class _FakeEvent:
    """A CUDA event as ``torch.cuda.Event`` behaves (``record``, ``query``, ``elapsed_time`` in ms), its GPU
    time set by the test: a GPU cannot run here."""

    def __init__(self, enable_timing: bool = False):
        assert enable_timing
        self.at: float | None = None
        self.done = True

    def record(self, stream=None) -> None:
        self.at = _FakeCuda.gpu_now

    def query(self) -> bool:
        return self.done

    def elapsed_time(self, end: _FakeEvent) -> float:
        assert self.at is not None and end.at is not None
        return (end.at - self.at) * 1000.0


class _FakeCuda:
    gpu_now = 0.0
    Event = _FakeEvent

    @staticmethod
    def current_stream(device):
        return "stream"


class _FakeTorch:
    cuda = _FakeCuda


class _CudaLoss:
    is_cuda = True
    device = "cuda:0"
    grad_fn = None


def _gpu_phases(monkeypatch) -> StepPhases:
    phases = StepPhases(_FakeTorch, lambda callback: None, lambda: True, None, RunQueueWait())
    monkeypatch.setattr(phases_module, "split_every", lambda step_time: 1)
    phases.end_step(0.0, None, 1)
    phases.on_backward_start(_CudaLoss())  # learns the GPU clock: this step is not measured
    phases.on_backward_end()
    phases.end_step(0.0, 0.01, 2)
    return phases


def test_gpu_phases_are_the_events_elapsed_times_and_add_up_to_the_gpu_span(monkeypatch):
    phases = _gpu_phases(monkeypatch)
    _FakeCuda.gpu_now = 1.0
    phases.on_backward_start(_CudaLoss())
    _FakeCuda.gpu_now = 1.004
    phases.mark(COMM)  # what the engine's final callback does
    phases._local_done_at = None
    _FakeCuda.gpu_now = 1.005
    phases.on_backward_end()
    _FakeCuda.gpu_now = 1.006
    marks, _cpu_wait = phases.end_step(0.0, 0.006, 3)
    assert marks.ready()
    value = marks.value()
    assert value[0] == "gpu"
    assert value[1:] == pytest.approx([None, None, None, 0.004, 0.001, None, 0.001 + 1.0])
    assert len(phases._pool) >= 5  # the events went back to be recorded again


def test_gpu_comm_leaves_out_the_hosts_end_of_backward_once_the_gpu_caught_up(monkeypatch):
    """A GPU that reached the rank's own gradients before the host finished DDP's finalisation idled for
    the host: that time is the backward's. One that was still behind waited for the collectives."""
    for caught_up, expected_comm in ((True, 0.0005), (False, 0.003)):
        phases = _gpu_phases(monkeypatch)
        _FakeCuda.gpu_now = 1.0
        phases.on_backward_start(_CudaLoss())
        _FakeCuda.gpu_now = 1.004
        phases._on_graph_done()  # marks comm, notes the host's time
        phases._marks[-1][0].done = caught_up
        phases._local_done_at -= 0.0025  # the host took 2.5 ms to finish the backward
        _FakeCuda.gpu_now = 1.007
        phases.on_backward_end()
        marks, _cpu_wait = phases.end_step(0.0, 0.007, 3)
        value = dict(zip(protocol.PHASES, marks.value()[1:], strict=True))
        assert value["comm"] == pytest.approx(expected_comm, abs=2e-4), caught_up
        assert value["comm"] + value["backward"] == pytest.approx(0.007)


def test_events_still_in_flight_wait_and_a_stopped_device_stops_the_timing(monkeypatch):
    phases = _gpu_phases(monkeypatch)
    phases.on_backward_start(_CudaLoss())
    phases.on_backward_end()
    marks, _cpu_wait = phases.end_step(0.0, 0.01, 3)
    marks._marks[-1][0].done = False
    assert not marks.ready()  # the reporter reads it later
    monkeypatch.setattr(phases_module, "MAX_EVENTS_IN_FLIGHT", 0)
    phases.on_backward_start(_CudaLoss())
    phases.on_backward_end()
    phases.end_step(0.0, 0.01, 4)
    assert not phases.timing  # events never read: no more are recorded


def test_a_step_during_which_the_clock_changes_is_not_measured(monkeypatch):
    phases = StepPhases(_FakeTorch, lambda callback: None, lambda: False, None, RunQueueWait())
    monkeypatch.setattr(phases_module, "split_every", lambda step_time: 1)
    phases.end_step(0.0, None, 1)
    phases.on_backward_start(_CudaLoss())
    phases.on_backward_end()
    assert phases.end_step(0.5, 0.5, 2)[0] is None
    assert phases.device == "cuda:0" and phases.current == REST and phases.current != BACKWARD


def test_phase_marks_on_the_cpu_clock_are_ready_at_once():
    marks = PhaseMarks("cpu", [(1.0, None), (1.5, 2), (2.0, 6)], 1 << 2 | 1 << 6, None)
    assert marks.ready()
    assert marks.value() == ["cpu", None, None, 0.5, None, None, None, 0.5]


class _CountedRunQueue(RunQueueWait):
    """The real run-queue reader, counting its reads of /proc; with ``ticks``, a clock instead of /proc
    that adds ``ticks`` nanoseconds at every read (the count's arithmetic without a busy machine)."""

    __slots__ = ("reads", "_ticks")

    def __init__(self, ticks: int | None = None) -> None:
        super().__init__()
        self.reads = 0
        self._ticks = ticks

    def read(self) -> int | None:
        self.reads += 1
        if self._ticks is not None:
            return self.reads * self._ticks
        return super().read()
