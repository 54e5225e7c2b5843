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

from rankwatch import _instrument, protocol
from rankwatch._buffer import KIND_STEP, RecordBuffer
from rankwatch._values import Pending


class Measured:
    """What the instrumentation queued: one dict per clock step."""

    def __init__(self, buffer: RecordBuffer, clock: _instrument.StepClock):
        self.buffer = buffer
        self.clock = clock
        self._steps: list[dict] = []

    def steps(self) -> list[dict]:
        """Each step's values, read as the reporter reads them: ``phases`` is None (not timed) or
        ``{"clock": ..., "data": seconds or None, ...}`` (``protocol.PHASES``); ``comm_wait`` is the
        ``comm`` phase (None when not timed)."""
        for record in self.buffer.drain():
            if record[0] == KIND_STEP:
                self._steps.append(_read_step(record))
        return list(self._steps)

    def losses(self) -> list[float | None]:
        return [step["loss"] for step in self.steps()]


def _read_step(record: tuple) -> dict:
    """A queued step record as a dict, its pending values read (once: GPU events go back to a pool)."""
    _kind, _t, step, loss, step_time, data_wait, samples, cpu_wait, skipped, phases = record
    if isinstance(loss, Pending):
        assert loss.ready()
        loss = loss.value()
    if isinstance(phases, Pending):
        assert phases.ready()
        phases = phases.value()
    read = None if phases is None else {"clock": phases[0], **dict(zip(protocol.PHASES, phases[1:], strict=True))}
    return {"step": step, "loss": loss, "step_time": step_time, "data_wait": data_wait, "samples": samples,
            "skipped": skipped, "phases": read, "comm_wait": None if read is None else read["comm"],
            "cpu_wait": cpu_wait}


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
