"""Time a rank spends in collectives per optimizer step, apart from its own compute.

Under DDP every rank's step time is the slowest rank's: the fast ranks wait for
it inside the gradient all-reduce. What differs is how long each rank waited, so
a rank that computes slowly is the one that waits least. Two places hold that
wait, and both are timed without code changes:

* **the end of a backward** (DDP's gradient all-reduce): the reducer launches
  each bucket's all-reduce as its gradients are ready and, once the autograd
  graph has run, waits for all of them in a final callback of the autograd
  engine. We queue our own final callback when the backward starts (a pre-hook
  on the loss's ``grad_fn``, the first node to run), so it runs before DDP's:
  it marks the moment the rank's own gradients were computed. The rest of the
  backward, until it returns, is the wait for the all-reduce to complete. A
  backward without DDP has ~0 there (only the engine's bookkeeping).
* **synchronous collectives called from Python** (``dist.all_reduce(t)``,
  ``dist.barrier()``...: manual gradient averaging, ZeRO's broadcasts, metric
  reductions): the call's duration. Calls with ``async_op=True`` return at
  once and their ``Work.wait()`` is C++: not counted. Calls made during a
  backward are inside the backward's timing and are not counted twice.

A step's ``comm_wait`` is the sum of both since the previous optimizer step;
None (not measured) when no process group is initialised (nothing to wait for).

A rank can also be slow because it does not get a CPU: other processes on the
node (a neighbour's job, data loader workers) keep its training thread waiting
in the kernel's run queue. That is not the rank computing more, and on a busy
machine it moves from rank to rank. ``RunQueueWait`` reads it per step from
Linux's ``/proc/thread-self/schedstat`` (``cpu_wait``; None elsewhere).

The compute time the hub derives from these is ``step_time - comm_wait -
data_wait - cpu_wait`` (``_protocol.compute_time``).

**Fast steps are sampled.** The end-of-backward timing costs the training thread
about 30 µs per backward (measured with DDP over gloo: registering the pre-hook and
having the engine call it take most of it; ``tests/bench/PERFORMANCE.md``), 1 % of
a 3 ms step, the largest part of the instrumentation's cost. So a step is timed only
when its number is a multiple of ``split_every(previous step time)``: every step when
steps take ``SPLIT_PERIOD_SECONDS`` (10 ms) or more, every 2nd, 4th ... 16th step
when they are faster, so the timing costs at most ~0.3 % of the time. Other steps
report ``comm_wait`` None (not measured; their compute time too), never a partial
count. The factors are powers of two, so ranks whose step times straddle a boundary
still time the same steps (those divisible by the larger factor).

``cpu_wait`` is sampled with the split, on the same steps: it is what makes a timed
step's compute time right, and reading the run queue is a system call (a ``pread`` of
a /proc file) that untimed steps do not pay. So a step reports both waits, or neither
(``end_step``; where the run queue cannot be read at all, comm wait alone).

Hot path of a timed step, with a process group: one hook registration, one queued
callback, two clock reads, two ``pread``s of a small /proc file per backward, the
same per Python collective, one ``pread`` at the step's end (and one at the end of
the step before it, to start the count). Of an untimed step: one attribute check
per backward and per Python collective, and ``end_step``'s ``split_every`` and
comparison: no clock, no /proc read, no ``is_initialized``. Nothing here raises into
the user's backward or collective.
"""

from __future__ import annotations

import functools
import os
import time
from bisect import bisect_right

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

_perf_counter = time.perf_counter
_NOT_MEASURED: tuple[None, None] = (None, None)

COLLECTIVES = (
    "all_reduce", "all_gather", "all_gather_into_tensor", "all_gather_object", "all_to_all",
    "all_to_all_single", "barrier", "broadcast", "broadcast_object_list", "gather", "gather_object",
    "reduce", "reduce_scatter", "reduce_scatter_tensor", "scatter", "scatter_object_list",
    "monitored_barrier",
)  # fmt: skip
"""``torch.distributed`` functions that block until every rank of the group took part."""


SPLIT_PERIOD_SECONDS = 0.010
"""Time at least one step in this much time: ~30 µs of timing per 10 ms is 0.3 %."""
MAX_SPLIT_EVERY = 16
_FACTORS = (16, 8, 4, 2, 1)
_BOUNDS = tuple(SPLIT_PERIOD_SECONDS / factor for factor in _FACTORS[1:])
"""``split_every`` as a table: below ``_BOUNDS[i]`` (and at or above the bound before it),
``_FACTORS[i]``; at or above the period, every step. One C call per step instead of a loop
on the training thread."""


def split_every(step_time: float | None) -> int:
    """Time every how many steps, after a step of ``step_time`` seconds: the smallest power of
    two whose steps fill ``SPLIT_PERIOD_SECONDS``, at most ``MAX_SPLIT_EVERY``."""
    if step_time is None or step_time <= 0.0:
        return 1
    return _FACTORS[bisect_right(_BOUNDS, step_time)]


class RunQueueWait:
    """Seconds the training thread was ready to run but waited for a CPU.

    Field 2 of ``/proc/thread-self/schedstat`` (nanoseconds on a run queue, since the
    thread started). The file is opened by the first ``read``, which must run on
    the training thread: an open descriptor keeps reading the thread that opened
    it, whichever thread reads it later (the autograd engine may run final
    callbacks on its own threads).
    """

    __slots__ = ("_descriptor", "_last", "_unavailable")

    PATH = "/proc/thread-self/schedstat"

    def __init__(self) -> None:
        self._descriptor: int | None = None
        self._last: int | None = None
        self._unavailable = False

    def read(self) -> int | None:
        """Nanoseconds on the run queue so far; None where unavailable (not Linux, no schedstat)."""
        if self._unavailable:
            return None
        try:
            if self._descriptor is None:
                self._descriptor = os.open(self.PATH, os.O_RDONLY)
            return int(os.pread(self._descriptor, 128, 0).split()[1])
        except (OSError, ValueError, IndexError):
            self._unavailable = True
            return None

    @property
    def readable(self) -> bool:
        """False once a read failed (not Linux, no schedstat): ``take`` is always None then."""
        return not self._unavailable

    def open(self) -> None:
        """Open the file now, on the calling (training) thread, if not open yet."""
        if self._descriptor is None and not self._unavailable:
            self.read()

    def start(self) -> None:
        """Start the count now: the next ``take`` is the wait since this call."""
        self._last = self.read()

    def forget(self) -> None:
        """Stop counting: the next ``take`` only starts the count, unless ``start`` comes first."""
        self._last = None

    def take(self) -> float | None:
        """Seconds on the run queue since the previous call; None the first time or where unavailable."""
        waited = self.read()
        last = self._last
        self._last = waited
        if waited is None or last is None:
            return None
        return max(0, waited - last) / 1e9


class CollectiveWait:
    """Per-step seconds in collectives and in the run queue (module docstring). Methods run on the
    training thread."""

    __slots__ = ("wait", "run_queue", "timing", "_queue_callback", "_is_initialized", "_local_done",
                 "_queued_at_done", "_prehook", "_mark")

    def __init__(self, queue_callback: Callable[[Callable[[], None]], None], is_initialized: Callable[[], bool],
                 run_queue: RunQueueWait | None = None):
        self.wait = 0.0
        """Seconds in collectives since the timed step began, less the time the thread then waited for a CPU."""
        self.run_queue = run_queue if run_queue is not None else RunQueueWait()
        """Counted once: a thread woken from the wait that then waits for a CPU waits for a CPU."""
        self.timing = True
        """The running step is timed (``split_every``): set by ``end_step`` for the next step."""
        self._queue_callback = queue_callback
        self._is_initialized = is_initialized
        self._local_done: float | None = None
        self._queued_at_done: int | None = None
        # bound once: a bound method made per backward would cost an allocation each time
        self._prehook = self._on_first_node
        self._mark = self._on_graph_done

    def on_backward_start(self, tensors: Any) -> None:
        """Before the outermost backward of a timed step: have the engine tell us when the graph is done.

        Without a process group there is nothing to wait for: nothing is timed.
        """
        self._local_done = None
        if not self._is_initialized():
            return
        self.run_queue.open()  # on this, the training, thread
        grad_fn = getattr(tensors, "grad_fn", None)
        if grad_fn is None and isinstance(tensors, (list, tuple)):
            for tensor in tensors:
                grad_fn = getattr(tensor, "grad_fn", None)
                if grad_fn is not None:
                    break
        if grad_fn is not None:
            grad_fn.register_prehook(self._prehook)

    def on_backward_end(self, ended: float) -> None:
        """After the outermost backward of a timed step returned at ``ended``: its tail was the collectives' wait."""
        done = self._local_done
        if done is not None:
            self._local_done = None
            self.add_wait(ended - done, self._queued_at_done)

    def end_step(self, step_time: float | None, next_step: int) -> tuple[float | None, float | None]:
        """The step that just ended took ``step_time``: its ``(comm_wait, cpu_wait)``; then whether step
        number ``next_step`` is timed.

        Both are None when the step was not timed, when no process group exists, and when the step
        has no start to count from: the first step (no step time), or a step whose run-queue count
        did not start at the end of the step before it (its process group was made during it). Where
        the run queue cannot be read at all (not Linux), ``cpu_wait`` alone is None.
        The run queue's count of a timed step starts here, at the end of the step before it.
        """
        measured = _NOT_MEASURED
        if self.timing:
            wait, self.wait = self.wait, 0.0
            if self._grouped():
                run_queue = self.run_queue
                cpu_wait = run_queue.take()  # the take starts the next step's count too
                # a step with no start (the first) or whose count did not start before it is not measured
                if step_time is not None and (cpu_wait is not None or not run_queue.readable):
                    measured = (wait, cpu_wait)
            else:
                self.run_queue.forget()  # no group, nothing counted: the next group's first step starts afresh
        timing = next_step % split_every(step_time) == 0
        if timing:
            if measured is _NOT_MEASURED and self._grouped():
                self.run_queue.start()  # (``wait`` is 0 here: only a timed step adds to it, and its end resets it)
        elif self.timing:  # a count left running would span the untimed steps
            self.run_queue.forget()
        self.timing = timing
        return measured

    def _grouped(self) -> bool:
        """A process group exists: there is something to wait for."""
        try:
            return bool(self._is_initialized())
        except Exception:
            return False

    def _on_first_node(self, grad_outputs: Any) -> None:
        try:
            self._queue_callback(self._mark)
        except Exception:  # never break the user's backward
            pass

    def _on_graph_done(self) -> None:
        self._queued_at_done = self.run_queue.read()
        self._local_done = _perf_counter()

    def add_wait(self, seconds: float, queued_before: int | None) -> None:
        """Add a wait of ``seconds`` that began when the run-queue counter read ``queued_before``."""
        queued_after = self.run_queue.read() if queued_before is not None else None
        if queued_before is not None and queued_after is not None:
            seconds -= (queued_after - queued_before) / 1e9
        if seconds > 0:
            self.wait += seconds


def patch_collectives(distributed: Any, timing: CollectiveWait, in_backward: Callable[[], bool]) -> Callable[[], None]:
    """Time the synchronous collectives of the ``torch.distributed`` module; returns the undo.

    Raises:
        AttributeError: this torch has none of the collectives (a build without distributed).
    """
    replaced: list[tuple[str, Any]] = []
    for name in COLLECTIVES:
        original = getattr(distributed, name, None)
        if original is None or not callable(original):
            continue
        replaced.append((name, original))
        setattr(distributed, name, _timed(original, timing, in_backward))
    if not replaced:
        raise AttributeError("torch.distributed has no collectives")

    def undo() -> None:
        for name, original in replaced:
            setattr(distributed, name, original)

    return undo


def _timed(original: Callable[..., Any], timing: CollectiveWait, in_backward: Callable[[], bool]) -> Callable[..., Any]:
    @functools.wraps(original)
    def collective(*args: Any, **kwargs: Any) -> Any:
        if not timing.timing or kwargs.get("async_op") or in_backward():
            return original(*args, **kwargs)
        queued = timing.run_queue.read()
        started = _perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            timing.add_wait(_perf_counter() - started, queued)

    return collective
