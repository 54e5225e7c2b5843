"""In-process instrumentation for tests: the real hooks installed into the test process.

The ``measured`` fixture (``conftest.py``) installs ``rankwatch._instrument`` into this process (it patches torch's
backward, DataLoader iterator, GradScaler and the global optimizer hooks) and takes
every hook out again afterwards; ``Measured.steps()`` gives the step records the
instrumentation queued, as the reporter would read them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

from rankwatch import _instrument
from rankwatch._buffer import KIND_STEP, RecordBuffer
from rankwatch._values import Pending


class Measured:
    """What the instrumentation queued: one dict per clock step."""

    def __init__(self, buffer: RecordBuffer, clock: _instrument.StepClock):
        self.buffer = buffer
        self.clock = clock
        self._records: list[tuple] = []

    def steps(self) -> list[dict]:
        self._records.extend(self.buffer.drain())
        steps = []
        for kind, _t, step, loss, step_time, data_wait, samples, comm_wait, cpu_wait in self._records:
            assert kind == KIND_STEP
            if isinstance(loss, Pending):
                assert loss.ready()
                loss = loss.value()
            steps.append({"step": step, "loss": loss, "step_time": step_time,
                          "data_wait": data_wait, "samples": samples,
                          "comm_wait": comm_wait, "cpu_wait": cpu_wait})  # fmt: skip
        return steps

    def losses(self) -> list[float | None]:
        return [step["loss"] for step in self.steps()]


@contextlib.contextmanager
def instrumented() -> Iterator[Measured]:
    """The real instrumentation, installed into this process for the duration."""
    torch.manual_seed(0)
    buffer = RecordBuffer()
    clock = _instrument.install(torch, buffer, reporter=None)
    try:
        yield Measured(buffer, clock)
    finally:
        clock.uninstall()
