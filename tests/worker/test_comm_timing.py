"""Time in collectives apart from compute, on torch's real autograd engine and a real gloo group.

A one-rank gloo group (in this process) makes ``torch.distributed`` initialised; the
wait DDP's reducer does at the end of a backward is reproduced the way the reducer
does it: a gradient-accumulator hook that queues a final callback on the engine,
here one that sleeps. The 2-rank DDP case runs under torchrun in
``tests/diagnosis/test_diagnosis_jobs.py``.
"""

from __future__ import annotations

import itertools
import time

import pytest
import torch
import torch.distributed as dist

from rankwatch import _comm_timing as comm_timing
from rankwatch._comm_timing import (
    MAX_SPLIT_EVERY,
    SPLIT_PERIOD_SECONDS,
    CollectiveWait,
    RunQueueWait,
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


def test_without_a_process_group_nothing_is_waited_for(measured):
    model = torch.nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(3):
        _step(model, optimizer)
    assert [step["comm_wait"] for step in measured.steps()] == [None, None, None]


def test_the_wait_at_the_end_of_backward_is_comm_wait_not_compute(measured, process_group):
    model = torch.nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(3):
        _step(model, optimizer, reducer_wait=WAIT_SECONDS)
    _step(model, optimizer)
    steps = measured.steps()
    assert (steps[0]["comm_wait"], steps[0]["cpu_wait"]) == (None, None)  # the first step has no start to count from
    for step in steps[1:3]:
        assert WAIT_SECONDS * 0.9 <= step["comm_wait"] < WAIT_SECONDS + 0.5
    assert steps[3]["comm_wait"] < WAIT_SECONDS / 2  # the count starts again every step
    for step in steps[1:3]:  # the compute time the reporter derives leaves the wait out
        compute = step["step_time"] - step["comm_wait"] - (step["cpu_wait"] or 0.0)
        assert compute < step["step_time"] - WAIT_SECONDS * 0.9


def test_python_collectives_are_timed_and_still_return_what_torch_returns(measured, process_group):
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
    assert steps[1]["comm_wait"] is not None and steps[1]["comm_wait"] >= 0.0
    measured.clock.uninstall()
    assert dist.all_reduce is dist.distributed_c10d.all_reduce  # torch's own function again


def test_the_run_queue_is_read_where_linux_has_it():
    run_queue = RunQueueWait()
    assert run_queue.take() is None  # the first read only starts the count
    deadline = time.perf_counter() + 0.02
    while time.perf_counter() < deadline:
        pass
    waited = run_queue.take()
    if run_queue.read() is None:
        pytest.skip("no /proc/thread-self/schedstat here")
    assert waited is not None and 0.0 <= waited < 1.0


def test_steps_faster_than_the_split_period_are_timed_every_power_of_two_steps():
    assert [split_every(t) for t in (None, 0.0, 0.5, 0.010, 0.009, 0.005, 0.004, 0.002, 0.001, 1e-6)] == \
        [1, 1, 1, 1, 2, 2, 4, 8, 16, MAX_SPLIT_EVERY]
    for step_time in (0.0005, 0.003, 0.007):  # timing at most one step per period
        assert split_every(step_time) * step_time >= SPLIT_PERIOD_SECONDS or split_every(step_time) == MAX_SPLIT_EVERY


def test_fast_steps_report_comm_wait_only_on_the_timed_steps_and_slow_ones_on_every_step(measured, process_group):
    """A 1-rank DDP model: fast steps are timed when their number is a multiple of ``split_every`` of the
    step before (every 16th for sub-millisecond steps; a busy machine makes some steps slower, so the
    rule is checked against the step times measured), 12 ms steps every step."""
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    run_queue = measured.clock.comm.run_queue = _CountedRunQueue()
    reads_at_step = []
    for _ in range(64):
        optimizer.zero_grad()
        model(torch.randn(4, 8)).sum().backward()
        optimizer.step()
        reads_at_step.append(run_queue.reads)
    fast = measured.steps()
    timed = [step["step"] for step in fast if step["comm_wait"] is not None]
    assert timed[:1] == [1]  # step 0 (no start to count from) is not measured; step 1 (no step time before it) is
    expected = [step["step"] for before, step in itertools.pairwise(fast)
                if step["step"] % split_every(before["step_time"]) == 0]
    assert timed == expected
    assert len(timed) < len(fast) // 2  # sub-10 ms steps: most are not timed
    # cpu_wait is sampled with the split: a step reports both waits or neither (step 0 only starts the count)
    assert all((step["cpu_wait"] is None) == (step["comm_wait"] is None) for step in fast[1:])
    # the run queue (a system call) is read in a timed step and at the end of the step before it, never otherwise
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
    assert all(step["comm_wait"] is not None and step["comm_wait"] >= 0.0 for step in slow)




def test_a_timed_step_whose_count_did_not_start_before_it_reports_no_cpu_wait(monkeypatch):
    """A process group made during a timed step (or made again after being destroyed): the run queue's
    count did not start at the end of the step before, so the step's CPU wait is not measured,
    never the wait since some earlier step."""
    grouped = [True]
    run_queue = _CountedRunQueue(ticks=1_000_000)  # every read: 1 ms more on the run queue
    comm = CollectiveWait(lambda callback: None, lambda: grouped[0], run_queue)
    split = [1]
    monkeypatch.setattr(comm_timing, "split_every", lambda step_time: split[0])
    assert comm.end_step(None, 1) == (None, None)  # step 0: no start; its end starts the count
    assert comm.end_step(0.001, 2) == (0.0, 0.001)  # step 1: timed, counted since the end of step 0
    split[0] = 4  # steps 2 and 3 are not timed, step 4 is
    assert comm.end_step(0.001, 3) == (0.0, 0.001)
    grouped[0] = False  # the group is gone at the end of step 3: no count starts for step 4
    assert comm.end_step(0.001, 4) == (None, None) and comm.timing
    grouped[0] = True  # and made again during step 4: neither wait of step 4 is measured
    split[0] = 1  # from here on steps of 10 ms or more: every one timed
    assert comm.end_step(0.05, 5) == (None, None)
    assert comm.end_step(0.05, 6) == (0.0, 0.001)  # step 5 was counted from the end of step 4
    assert comm.end_step(0.05, 7) == (0.0, 0.001)
    grouped[0] = False
    assert comm.end_step(0.05, 8) == (None, None)
    assert comm.end_step(0.05, 9) == (None, None)
    grouped[0] = True
    assert comm.end_step(0.05, 10) == (None, None)  # not the wait since step 6
    assert comm.end_step(0.05, 11) == (0.0, 0.001)

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
