"""Where an optimizer step's time goes: its phases, on the device's own clock.

A step is cut into phases (``protocol.PHASES``) at moments the zero-code hooks already
see on the training thread, its **marks**:

==========================================  ==========================================
mark                                        the phase that begins
==========================================  ==========================================
the previous step's end                     ``rest``
a DataLoader's ``__next__`` (autograd on)   ``data``; when it returns, ``h2d``
the first module call after that, after a   ``forward`` (a global module pre-hook, armed
step's start or a backward                  only until it fires)
an outermost ``backward``                   ``backward``
the engine's final callback (the rank's     ``comm``: the rest of the backward is the
own gradients are computed; with a          wait for DDP's gradient all-reduce
process group only)
the backward's return                       ``rest`` (``optimizer`` inside a closure step)
a synchronous ``torch.distributed``         ``comm`` until it returns, then the phase
collective                                  before it
an optimizer's ``step``                     ``optimizer``
==========================================  ==========================================

Each moment between two marks belongs to exactly one phase, so a step's phases add up to
its span; a phase that was never entered is None (not measured), its time is in the phase
that was running. Nothing is rescaled.

**The clock.** On a CPU job a mark is ``time.perf_counter()``. On a GPU job (the step's
loss is a CUDA tensor) a mark is a CUDA event recorded on the training stream, and a phase
is ``elapsed_time`` between two events: what the GPU spent, idle gaps included (a GPU that
waits for a batch shows it in ``data``; one that waits for the all-reduce, in ``comm``:
under NCCL, ``Work.wait()`` returns at once and only the stream waits, which no CPU clock
sees). The events are read later by the reporter thread once ``query()`` says they are
done (``PhaseMarks``): the training thread never synchronises the device. The clock is
learnt from the loss of a backward; a step during which it changes is not measured.
A GPU that has caught up with the host idles for the host's own work too: at the end of
a backward that is DDP's finalisation, which is not communication, so ``comm`` keeps only
what the stream waited beyond it (``StepPhases.on_backward_end``). Elsewhere such idle
time stays in the phase it happened in: a launch-bound job's phases follow the host.

**Sampling.** Marks cost a few microseconds each (an event record on a GPU), so only
some steps are timed: every step when steps take ``SPLIT_PERIOD_SECONDS`` (10 ms) or
more, every 2nd, 4th ... 16th step when they are faster (``split_every``; powers of two,
so every rank times the same steps). An untimed step pays one attribute check per hook.

**CPU wait.** A rank can be slow because it does not get a CPU (a neighbour's job, data
loader workers): that is not computing more, and on a busy machine it moves from rank to
rank. ``RunQueueWait`` reads it from Linux's ``/proc/thread-self/schedstat`` at the
timed step's start and end and around its waits for data and communication: ``cpu_wait``
is the time the training thread waited for a CPU outside those waits (inside them, the
thread waited anyway), and the hub's ``compute_time`` on the CPU clock leaves it out.
"""

from __future__ import annotations

import functools
import os
import time
from bisect import bisect_right
from collections import deque

from rankwatch._values import Pending

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

_perf_counter = time.perf_counter

DATA, H2D, FORWARD, BACKWARD, COMM, OPTIMIZER, REST = range(7)
"""Indexes of ``protocol.PHASES``."""
_WAITING = (True, False, False, False, True, False, False)
"""The phases in which the training thread waits for others (data, communication)."""
_FORWARD_FROM = frozenset({REST, H2D, OPTIMIZER})
"""A module call starts the forward only from these: not while a batch is made (a transform
module), in a backward (checkpointing recomputes) or already in a forward."""

SPLIT_PERIOD_SECONDS = 0.010
"""Time at least one step in this much time."""
MAX_SPLIT_EVERY = 16
_FACTORS = (16, 8, 4, 2, 1)
_BOUNDS = tuple(SPLIT_PERIOD_SECONDS / factor for factor in _FACTORS[1:])
"""``split_every`` as a table: below ``_BOUNDS[i]`` (and at or above the bound before it),
``_FACTORS[i]``; at or above the period, every step."""

MAX_EVENTS_IN_FLIGHT = 4096
"""GPU marks waiting to be read: beyond this (a device that stopped), steps are not timed."""


def split_every(step_time: float | None) -> int:
    """Time every how many steps, after a step of ``step_time`` seconds: the smallest power of
    two whose steps fill ``SPLIT_PERIOD_SECONDS``, at most ``MAX_SPLIT_EVERY``."""
    if step_time is None or step_time <= 0.0:
        return 1
    return _FACTORS[bisect_right(_BOUNDS, step_time)]


class RunQueueWait:
    """Nanoseconds the training thread was ready to run but waited for a CPU.

    Field 2 of ``/proc/thread-self/schedstat``. The file is opened by the first ``read``,
    which must run on the training thread: an open descriptor keeps reading the thread that
    opened it, whichever thread reads it later (the autograd engine's callbacks run on its
    own threads).
    """

    __slots__ = ("_descriptor", "_unavailable")

    PATH = "/proc/thread-self/schedstat"

    def __init__(self) -> None:
        self._descriptor: int | None = None
        self._unavailable = False

    @property
    def readable(self) -> bool:
        """False once a read failed (not Linux, no schedstat): ``cpu_wait`` is not measured."""
        return not self._unavailable

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


class PhaseMarks(Pending):
    """A timed step's marks, read into ``[clock, *phases]`` (``protocol.STEP_ROW_LENGTH``'s last
    field) once they can be read without waiting: at once on the CPU clock, on the GPU once the
    last event is done (the stream completes them in order)."""

    __slots__ = ("_clock", "_marks", "_phases_entered", "_pool")

    def __init__(self, clock: str, marks: list, phases_entered: int, pool: deque | None):
        self._clock = clock
        self._marks = marks
        """``[(time or event, phase that ended at it)]``; the first's phase is None (the start). On the
        GPU a ``comm`` interval may carry a third item: seconds of it the GPU spent waiting for the
        host's own end of the backward (``StepPhases.on_backward_end``), which belong to ``backward``."""
        self._phases_entered = phases_entered
        self._pool = pool
        """Where GPU events go back once read (None on the CPU clock)."""

    def ready(self) -> bool:
        if self._pool is None:
            return True
        try:
            return bool(self._marks[-1][0].query())
        except Exception:  # a device error: read (and report) nothing rather than wait forever
            return True

    def value(self) -> list | None:
        marks = self._marks
        sums = [0.0] * 7
        try:
            if self._pool is None:
                previous = marks[0][0]
                for moment, phase in marks[1:]:
                    sums[phase] += moment - previous
                    previous = moment
            else:
                previous = marks[0][0]
                for mark in marks[1:]:
                    event, phase = mark[0], mark[1]
                    seconds = previous.elapsed_time(event) / 1000.0
                    if len(mark) == 3:  # the GPU waited for the host's end of backward, not for a collective
                        host = min(seconds, mark[2])
                        sums[BACKWARD] += host
                        seconds -= host
                    sums[phase] += seconds
                    previous = event
        except Exception:  # an event the device could not time
            return None
        finally:
            if self._pool is not None:
                self._pool.extend(mark[0] for mark in marks)
        entered = self._phases_entered
        return [self._clock, *(sums[phase] if entered >> phase & 1 else None for phase in range(7))]


class StepPhases:
    """Marks the phases of timed steps (module docstring). Every method runs on the training
    thread (``_on_graph_done`` on the autograd engine's, while the training thread waits in the
    backward); a timed step's marks cost one clock read or event record each."""

    __slots__ = ("timing", "current", "_marks", "_entered", "_stack", "_optimizer_depth", "_mixed", "_torch",
                 "_device", "_stream", "_pool", "_events_made", "run_queue", "_queued", "_queued_at",
                 "_queue_callback", "_is_initialized", "_prehook", "_graph_done", "_forward_handle",
                 "_arm_forward", "_on_forward", "_local_done_at")

    def __init__(self, torch: Any, queue_callback: Callable[[Callable[[], None]], None],
                 is_initialized: Callable[[], bool], arm_forward: Callable[[Callable[..., None]], Any] | None,
                 run_queue: RunQueueWait | None = None):
        self.timing = False
        """The running step is timed (``split_every``): set at the end of the step before."""
        self.current = REST
        self._marks: list = []
        self._entered = 0
        """Bit per phase entered during the step (``PhaseMarks``: the others are not measured)."""
        self._stack: list[int] = []
        """Phases interrupted by a collective or a batch, to return to."""
        self._optimizer_depth = 0
        self._mixed = False
        """The clock changed during the step: it is not measured."""
        self._torch = torch
        self._device: Any = None
        """The CUDA device of the training loss: marks are events on its stream; None: CPU clock."""
        self._stream: Any = None
        self._pool: deque = deque()
        """CUDA events read and free to record again (the reporter gives them back)."""
        self._events_made = 0
        self.run_queue = run_queue if run_queue is not None else RunQueueWait()
        self._queued = 0
        """Run-queue nanoseconds of the step outside its waits, so far."""
        self._queued_at: int | None = None
        """The run queue's reading when the current stretch outside waits began (None: not counting)."""
        self._queue_callback = queue_callback
        self._is_initialized = is_initialized
        self._prehook = self._on_first_node  # bound once: a bound method per backward costs an allocation
        self._graph_done = self._on_graph_done
        self._forward_handle: Any = None
        self._arm_forward = arm_forward
        self._on_forward = self._forward_started
        self._local_done_at: float | None = None
        """``perf_counter`` when the engine said the rank's own gradients were computed (GPU clock)."""

    @property
    def device(self) -> Any:
        """The CUDA device the training loss is on (the GPU clock's), or None: a CPU job, or not seen yet."""
        return self._device

    # -- the step's start and end -------------------------------------------------------

    def end_step(self, ended: float, step_time: float | None, next_step: int) -> tuple[PhaseMarks | None, float | None]:
        """The step that just ended at ``ended`` (``perf_counter``, after ``step_time``): its ``(phases,
        cpu_wait)``, each None when not measured (not timed, the first step, a clock that changed); then
        whether step ``next_step`` is timed, and if so its first mark. On the CPU clock ``ended`` is the
        last mark of this step and the first of the next, so the phases add up to the step time
        exactly. An untimed step costs the table lookup and a compare."""
        measured: PhaseMarks | None = None
        cpu_wait = None
        if self.timing:
            self._disarm_forward()
            marks = self._marks
            if not self._mixed and step_time is not None and marks:
                marks.append((ended if self._device is None else self._moment(), self.current))
                self._close_queue()
                measured = PhaseMarks(
                    "cpu" if self._device is None else "gpu", marks, self._entered | 1 << self.current,
                    None if self._device is None else self._pool)
                cpu_wait = self._queued / 1e9 if self.run_queue.readable else None
            else:
                self._pool.extend(mark[0] for mark in marks if type(mark[0]) is not float)
            self._marks = []
        timing = next_step % split_every(step_time) == 0
        if timing and self._events_made - len(self._pool) > MAX_EVENTS_IN_FLIGHT:
            timing = False  # a device that stopped completing work: its events are not read
        self.timing = timing
        if timing:
            self._start(ended)
        return measured, cpu_wait

    def _start(self, started: float) -> None:
        self.current = REST
        self._entered = 1 << REST
        self._stack.clear()
        self._mixed = False
        self._queued = 0
        self._optimizer_depth = 0
        if self._device is not None:
            try:
                self._stream = self._torch.cuda.current_stream(self._device)
            except Exception:
                self._device = None
        self._queued_at = self.run_queue.read()
        self._marks = [(started if self._device is None else self._moment(), None)]
        self._arm()

    # -- marks --------------------------------------------------------------------------

    def _moment(self) -> Any:
        if self._device is None:
            return _perf_counter()
        pool = self._pool
        if pool:
            event = pool.popleft()
        else:
            event = self._torch.cuda.Event(enable_timing=True)
            self._events_made += 1
        event.record(self._stream)
        return event

    def mark(self, phase: int, host_seconds: float | None = None) -> None:
        """The phase ``phase`` begins now (on a timed step); ``host_seconds``: see ``PhaseMarks._marks``."""
        current = self.current
        if phase == current:
            return
        if _WAITING[current] != _WAITING[phase]:
            if _WAITING[phase]:
                self._close_queue()
            else:
                self._queued_at = self.run_queue.read()
        if host_seconds is None:
            self._marks.append((self._moment(), current))
        else:
            self._marks.append((self._moment(), current, host_seconds))
        self._entered |= 1 << phase
        self.current = phase

    def _close_queue(self) -> None:
        """End a stretch outside the waits: add its run-queue time."""
        at = self._queued_at
        if at is not None:
            self._queued_at = None
            now = self.run_queue.read()
            if now is not None:
                self._queued += max(0, now - at)

    def enter(self, phase: int) -> None:
        """A wait (``DATA``, ``COMM``) interrupts the current phase; ``leave`` returns to it."""
        self._stack.append(self.current)
        self.mark(phase)

    def leave(self, then: int | None = None) -> None:
        """The wait ``enter`` began is over: back to the phase it interrupted, or to ``then``."""
        previous = self._stack.pop() if self._stack else REST
        self.mark(previous if then is None else then)

    # -- the hooks' moments (each called only on a timed step) ----------------------------

    def on_batch_start(self) -> None:
        self.enter(DATA)

    def on_batch_end(self) -> None:
        """The batch came: what follows until the forward is its way to the device."""
        self.leave(H2D)
        self._arm()

    def on_backward_start(self, tensors: Any) -> None:
        """Before an outermost backward: learn the clock from its loss, mark, and with a process group
        have the engine tell us when the rank's own gradients are computed."""
        device = _cuda_device(tensors)
        if device != self._device:
            self._device = device  # the next timed step uses this clock; this one is not measured
            self._mixed = True
        if self._mixed:
            return
        self._disarm_forward()
        self.mark(BACKWARD)
        try:
            grouped = self._is_initialized()
        except Exception:
            grouped = False
        if not grouped:
            return
        grad_fn = getattr(tensors, "grad_fn", None)
        if grad_fn is None and isinstance(tensors, (list, tuple)):
            for tensor in tensors:
                grad_fn = getattr(tensor, "grad_fn", None)
                if grad_fn is not None:
                    break
        if grad_fn is not None:
            grad_fn.register_prehook(self._prehook)

    def on_backward_end(self) -> None:
        """After an outermost backward. On the GPU, the ``comm`` interval that ends here is what the
        stream waited between the rank's own gradients and the backward's end: the collectives that
        did not overlap, *or the host*. DDP's finalisation runs on the host after the graph (a few
        microseconds per parameter); when the GPU has caught up with the host by then (its event
        already done: one ``query``, never a wait), the stream idles for that host work, which is
        the backward's, not communication: it is moved to ``backward``, up to the host's time."""
        if self._mixed:
            return
        self._stack.clear()
        host_seconds = None
        local_done_at = self._local_done_at
        if local_done_at is not None:
            self._local_done_at = None
            if self.current == COMM:
                try:
                    caught_up = self._marks[-1][0].query()
                except Exception:
                    caught_up = False
                if caught_up:
                    host_seconds = _perf_counter() - local_done_at
        self.mark(OPTIMIZER if self._optimizer_depth else REST, host_seconds)
        self._arm()

    def on_optimizer_start(self) -> None:
        """An optimizer's step begins (the forward hook stays armed: a closure runs the forward in it)."""
        self._optimizer_depth += 1
        self.mark(OPTIMIZER)

    def on_optimizer_end(self) -> None:
        """An optimizer that is not the step clock finished its step."""
        self._optimizer_depth = max(0, self._optimizer_depth - 1)
        self.mark(OPTIMIZER if self._optimizer_depth else REST)

    def _on_first_node(self, grad_outputs: Any) -> None:
        try:
            self._queue_callback(self._graph_done)
        except Exception:  # never break the user's backward
            pass

    def _on_graph_done(self) -> None:
        if self.timing and self.current == BACKWARD:
            self.mark(COMM)
            if self._device is not None:
                self._local_done_at = _perf_counter()

    # -- the forward's start: a global module pre-hook, armed until it fires ------------------

    def _arm(self) -> None:
        if self._forward_handle is None and self._arm_forward is not None:
            try:
                self._forward_handle = self._arm_forward(self._on_forward)
            except Exception:
                self._arm_forward = None  # this torch has no global module hooks: forward is not measured

    def _disarm_forward(self) -> None:
        handle = self._forward_handle
        if handle is not None:
            self._forward_handle = None
            handle.remove()

    def stop(self) -> None:
        """Time no more steps and take the forward's hook out (the instrumentation is uninstalled)."""
        self.timing = False
        self._disarm_forward()

    def _forward_started(self, module: Any, args: Any) -> None:
        if self.current in _FORWARD_FROM and self.timing:
            self._disarm_forward()
            self.mark(FORWARD)


def _cuda_device(tensors: Any) -> Any:
    """The CUDA device of a backward's first tensor, or None (a CPU loss)."""
    tensor = tensors
    if isinstance(tensors, (list, tuple)):
        tensor = tensors[0] if tensors else None
    try:
        return tensor.device if tensor.is_cuda else None
    except AttributeError:
        return None


COLLECTIVES = (
    "all_reduce", "all_gather", "all_gather_into_tensor", "all_gather_object", "all_to_all",
    "all_to_all_single", "barrier", "broadcast", "broadcast_object_list", "gather", "gather_object",
    "reduce", "reduce_scatter", "reduce_scatter_tensor", "scatter", "scatter_object_list",
    "monitored_barrier",
)  # fmt: skip
"""``torch.distributed`` functions that block until every rank of the group took part."""


def patch_collectives(distributed: Any, phases: StepPhases, in_backward: Callable[[], bool]) -> Callable[[], None]:
    """Mark the synchronous collectives of the ``torch.distributed`` module as ``COMM``; returns the undo.

    Calls with ``async_op=True`` return at once (their ``Work.wait()`` is C++): not marked. Calls
    made during a backward are inside its own phases.

    Raises:
        AttributeError: this torch has none of the collectives (a build without distributed).
    """
    replaced: list[tuple[str, Any]] = []
    for name in COLLECTIVES:
        original = getattr(distributed, name, None)
        if original is None or not callable(original):
            continue
        replaced.append((name, original))
        setattr(distributed, name, _marked(original, phases, in_backward))
    if not replaced:
        raise AttributeError("torch.distributed has no collectives")

    def undo() -> None:
        for name, original in replaced:
            setattr(distributed, name, original)

    return undo



def _marked(original: Callable[..., Any], phases: StepPhases, in_backward: Callable[[], bool]) -> Callable[..., Any]:
    @functools.wraps(original)
    def collective(*args: Any, **kwargs: Any) -> Any:
        if not phases.timing or kwargs.get("async_op") or in_backward():
            return original(*args, **kwargs)
        try:
            phases.enter(COMM)
        except Exception:
            return original(*args, **kwargs)
        try:
            return original(*args, **kwargs)
        finally:
            try:
                phases.leave()
            except Exception:
                pass

    return collective
