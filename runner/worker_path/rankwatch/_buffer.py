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
``(KIND_STEP, t, step, loss, step_time, data_wait, samples, comm_wait, cpu_wait)``
    one optimizer step measured by the zero-code instrumentation; ``loss`` is a
    number, a ``Pending`` or None, ``step_time`` None for the first step,
    ``data_wait`` None when no training DataLoader batch came in the step,
    ``comm_wait`` None when no process group exists, ``cpu_wait`` None where
    the run queue cannot be read (``_comm_timing``).

The drop count is in records (one ``log`` call, or one step's auto metrics).
"""

from __future__ import annotations

from collections import deque

KIND_LOG = 0
KIND_STEP = 1

DEFAULT_LIMIT = 65536
"""Records held while the hub is slow or away: minutes of a typical job, a few MiB."""


class RecordBuffer:
    """A bounded, never-blocking FIFO of telemetry records with a drop counter.

    ``dropped`` may miss an increment when several threads overflow the queue at
    the very same moment: an exact count is not worth a lock on the hot path.
    """

    __slots__ = ("_queue", "_limit", "dropped")

    def __init__(self, limit: int = DEFAULT_LIMIT):
        self._queue: deque[tuple] = deque()
        self._limit = max(0, int(limit))
        self.dropped = 0

    def put(self, record: tuple) -> None:
        """Append ``record``, or count it as dropped when the queue is full."""
        if len(self._queue) < self._limit:
            self._queue.append(record)
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
