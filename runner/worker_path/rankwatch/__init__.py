"""Rankwatch on the worker side: ``rankwatch.log(step=..., **scalars)`` and friends.

User scripts import this module, so it is standard library only and importing
it costs next to nothing. It only *sends* anything when the script was started
by ``python -m rankwatch._bootstrap`` under a Rankwatch runner (which activates
it); otherwise every function here is a cheap no-op, so a script that calls
``rankwatch.log`` runs unchanged without Rankwatch.

Example::

    import rankwatch
    for step, batch in enumerate(loader):
        loss = train_step(batch)
        rankwatch.log(step=step, loss=loss, lr=scheduler.get_last_lr()[0])
"""

from __future__ import annotations

import os
import time

from rankwatch._buffer import KIND_LOG, RecordBuffer
from rankwatch._values import capture, capture_all

TYPE_CHECKING = False  # `typing` costs ~2 ms to import; annotations are strings anyway
if TYPE_CHECKING:
    from typing import Any

__all__ = ["is_active", "log", "rank", "world_size"]

_buffer: RecordBuffer | None = None
"""Set by the bootstrap when telemetry is on; None makes ``log`` a no-op."""
_clock: Any = None
"""The instrumentation's step clock (``steps`` = optimizer steps completed), when on."""
_implicit_step = 0
"""Default step for ``log`` calls without one when there is no step clock."""
_now = time.time


def log(step: int | None = None, **scalars: Any) -> None:
    """Record named scalars for this rank, at ``step``.

    Values may be Python numbers, numpy scalars or one-element torch tensors. A
    CUDA tensor is never synchronised here: a non-blocking copy is queued and
    read later by the reporter thread. Other values are skipped.

    ``step=None`` means the number of optimizer steps completed so far when the
    zero-code instrumentation is on (so it lines up with the automatic ``loss``),
    otherwise the number of earlier ``log`` calls.

    Never blocks and never raises: when the in-memory queue is full (hub slow or
    unreachable) the call is dropped and counted, and the count is reported.
    """
    buffer = _buffer
    if buffer is None:
        return
    if step is None:
        clock = _clock
        if clock is not None:
            step = clock.steps
        else:
            global _implicit_step
            step = _implicit_step
            _implicit_step += 1
    elif type(step) is not int:
        step = capture(step)
    for value in scalars.values():
        kind = type(value)
        if kind is not float and kind is not int:
            scalars = capture_all(scalars)
            break
    buffer.put((KIND_LOG, _now(), step, scalars))


def is_active() -> bool:
    """True when this process reports to a Rankwatch runner."""
    return _buffer is not None


def rank() -> int | None:
    """This worker's global rank (torchrun's ``RANK``), or None outside a distributed launch."""
    return _int_from_environment("RANK")


def world_size() -> int | None:
    """The number of workers (torchrun's ``WORLD_SIZE``), or None outside a distributed launch."""
    return _int_from_environment("WORLD_SIZE")


def _int_from_environment(name: str) -> int | None:
    try:
        return int(os.environ[name])
    except (KeyError, ValueError):
        return None


def _activate(buffer: RecordBuffer | None) -> None:
    """Point ``log`` at ``buffer`` (the bootstrap's), or back to a no-op with None."""
    global _buffer
    _buffer = buffer


def _set_clock(clock: Any) -> None:
    """Let ``log(step=None)`` use the instrumentation's optimizer step count."""
    global _clock
    _clock = clock
