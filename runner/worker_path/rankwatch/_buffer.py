"""The bounded hand-off between the training thread and the reporter thread.

The training thread must never wait on telemetry, so it only ever appends one
tuple to a ``collections.deque`` after a length check (both atomic under the
GIL, no lock). When the queue is full the record is dropped and counted; the
reporter reports the count in its heartbeats. Unlike tensorboardX's writer,
``put`` never blocks.

A record is a plain tuple whose first element is its kind:

``(KIND_LOG, t, step, scalars)``
    one ``rankwatch.log`` call; ``scalars`` maps a name to a number or a
    ``_values.Pending`` device read.
``(KIND_STEP, t, step, loss, step_time, data_wait, samples, cpu_wait, skipped, phases)``
    one optimizer step measured by the zero-code instrumentation; ``loss`` is a
    number, a ``Pending`` or None, ``step_time`` None for the first step,
    ``data_wait`` None when no training DataLoader batch came in the step,
    ``cpu_wait`` None when not measured (a step not timed, the first step, no run
    queue to read), ``skipped`` True for a step ``GradScaler`` skipped, ``phases`` a
    ``_phases.PhaseMarks`` (a ``Pending``) or None when not timed. The reporter sends
    it as a step row: the record less its kind, values read (``protocol.STEP_ROW_LENGTH``).
``(KIND_GPU_MEMORY, t, step, allocated, reserved, peak)``
    the allocator's counters at a step's end (bytes, each None when unknown); sent as
    the records ``protocol.GPU_MEMORY_METRICS``.

The drop count is in records (one ``log`` call, or one step's auto metrics).

Waking the reporter: the reporter sleeps while nothing is worth sending (no fixed
tick). ``put`` wakes it through ``waker`` at exactly two moments, found by one
length comparison: the first record after the reporter went to sleep with an empty
buffer (``wake_at`` is 1 then), and the record that makes the buffer reach
``WAKE_THRESHOLD`` (a burst: send before the bound is near). So the hot path costs
one ``len`` and one compare more than a bare append, and ``waker`` (an
``Event.set``, ~1 us) runs at most once per batch.
"""

from __future__ import annotations

from collections import deque

KIND_LOG = 0
KIND_STEP = 1
KIND_GPU_MEMORY = 2

DEFAULT_LIMIT = 65536
"""Records held while the hub is slow or away: minutes of a typical job, a few MiB."""
WAKE_THRESHOLD = 2048
"""A buffer this long wakes the reporter at once, whatever its latency deadline: a
script logging 50k records/s fills it in 40 ms, far from ``DEFAULT_LIMIT``."""


def _no_waker() -> None:
    pass


class RecordBuffer:
    """A bounded, never-blocking FIFO of telemetry records with a drop counter.

    ``dropped`` may miss an increment when several threads overflow the queue at
    the very same moment: an exact count is not worth a lock on the hot path.
    """

    __slots__ = ("_queue", "_limit", "dropped", "wake_at", "waker")

    def __init__(self, limit: int = DEFAULT_LIMIT):
        self._queue: deque[tuple] = deque()
        self._limit = max(0, int(limit))
        self.dropped = 0
        self.wake_at = WAKE_THRESHOLD
        """The queue length at which ``put`` calls ``waker``: 1 while the reporter sleeps
        on an empty buffer (set by the reporter), ``WAKE_THRESHOLD`` otherwise."""
        self.waker = _no_waker

    def put(self, record: tuple) -> None:
        """Append ``record``, or count it as dropped when the queue is full."""
        queue = self._queue
        if len(queue) < self._limit:
            queue.append(record)
            if len(queue) == self.wake_at:
                self.waker()
        else:
            self.dropped += 1

    def drain(self) -> list[tuple]:
        """Take every record present now (records added meanwhile wait for the next call)."""
        queue = self._queue
        taken = []
        for _ in range(len(queue)):
            try:
                taken.append(queue.popleft())
            except IndexError:
                break
        return taken

    def disable(self) -> None:
        """Forget queued records and accept no more: used in forked children nobody drains."""
        self._limit = 0
        self._queue.clear()

    def __len__(self) -> int:
        return len(self._queue)
