"""Zero-code instrumentation: loss, step time, data wait and throughput from torch's own hooks.

Installed right after the user's script imports torch (``_torch_hook``), only
when ``RANKWATCH_INSTRUMENT=1``. Nothing here is imported at module level from
torch: ``install`` receives the torch module.

What is measured, per rank, and where:

* step boundaries: torch's global optimizer step hooks. The first optimizer
  that steps is the step clock; other optimizers (a GAN's second one) are not
  step boundaries. ``steps`` counts the clock's steps, and a step's metrics carry
  the number of steps completed *before* it (0 for the first), like a script that
  prints ``step {step}`` and increments its counter after ``optimizer.step()``.
  A step that ``GradScaler.step`` skipped (inf/NaN gradients) still counts.
  In a process that has made no optimizer at all, each outermost backward ends a
  step instead: tutorial loops that update the weights themselves
  (``p.data.add_(p.grad, alpha=-lr)``, PyTorch's word language model and
  regression examples) would otherwise show no step. Only "no optimizer was ever
  made" is a sure sign: a script with an optimizer that has not stepped yet may be
  accumulating gradients. An optimizer made later takes over as the clock.
* ``loss``: the sum of the scalar values passed to ``torch.autograd.backward``
  since the previous optimizer step (``Tensor.backward`` goes through it;
  patching both would count every loss twice); ``_loss`` has the rule for every
  shape (gradient accumulation, GradScaler, closures, several optimizers...).
  Backward calls nested in a backward (reentrant checkpointing) are ignored.
* ``data_wait`` and samples: time in DataLoader iterators' ``__next__`` during
  the step and the batches' sizes, counting only iterators whose batches feed a
  backward (``_data_wait``); None ("not measured") when no such batch came.
* ``step_time``, and ``samples_per_s`` when a batch shows its size (first
  dimension of the first tensor in the batch). Steps per second is
  ``1 / step_time``: the hub derives it, nothing sends it.
* the step's **phases** (data, host-to-device, forward, backward, exposed
  communication, optimizer, the rest) on the device's own clock: CUDA events on
  the training stream for a GPU job, read later by the reporter, the thread's
  clock for a CPU job (``_phases``); the hub derives ``compute_time`` from them
  (``protocol.step_row_records``). None on the first step and on the steps not
  timed when steps are faster than 10 ms (``_phases.split_every``).
* ``cpu_wait``: time the training thread waited for a CPU (Linux run queue)
  outside its waits for data and communication, on the timed steps.
* a step ``GradScaler`` skipped (inf/NaN gradients) is marked as skipped.
* GPU memory: the allocator's allocated, reserved and peak bytes at a step's end,
  about once a second (``torch.cuda.memory_stats``: counters, no synchronisation).

The hot path is a few microseconds per step and never synchronises a device:
CPU losses are read with ``item()`` (no sync on CPU), CUDA losses are copied
without blocking and read later by the reporter (``_values``), and so are the
phases' CUDA events.
"""

from __future__ import annotations

import functools
import sys
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from typing import Any

import rankwatch
from rankwatch._buffer import KIND_GPU_MEMORY, KIND_STEP, RecordBuffer
from rankwatch._data_wait import DataWait
from rankwatch._fingerprint import optimizer_parameters, parameter_digest
from rankwatch._loss import StepLoss
from rankwatch._phases import StepPhases, patch_collectives
from rankwatch._reporter import Reporter
from rankwatch.protocol import ParamHash

_perf_counter = time.perf_counter
_now = time.time
_get_ident = threading.get_ident

GPU_MEMORY_EVERY = 1.0
"""Seconds between two reads of the allocator's counters (at a step's end)."""


class StepClock:
    """Step boundaries from the clock optimizer, and what happened since the previous one.

    Every method runs on the training thread inside the user's step: keep them
    to a few attribute updates.
    """

    __slots__ = (
        "steps", "optimizer_steps", "optimizer_made", "thread", "_thread_ident", "in_backward", "loss", "data", "phases",
        "_buffer", "_reporter", "_hash_every", "_torch", "_optimizer", "_last_step_at", "_undo", "_memory_due",
    )  # fmt: skip

    def __init__(
        self, torch: Any, buffer: RecordBuffer, reporter: Reporter | None, hash_every: int
    ):
        self.steps = 0
        """Steps of the clock optimizer completed so far."""
        self.optimizer_steps = 0
        """Steps of any optimizer completed so far (GradScaler's skip detection)."""
        self.optimizer_made = False
        """An optimizer was made in this process: until then each outermost backward ends a step."""
        self.thread: int | None = None
        """Kernel id of the thread that ran the last step: the one whose work counts (``_activity``)."""
        self._thread_ident: int | None = None
        self.in_backward = False
        self.loss = StepLoss(torch.Tensor)
        self.data = DataWait(torch.is_grad_enabled)
        self.phases = StepPhases(torch, _queue_callback(torch), _is_initialized(torch), _forward_pre_hook(torch))
        self._memory_due = 0.0
        self._buffer = buffer
        self._reporter = reporter
        self._hash_every = hash_every if reporter is not None else 0
        self._torch = torch
        self._optimizer: weakref.ref | None = None
        self._last_step_at: float | None = None
        self._undo: list[Callable[[], None]] = []

    def uninstall(self) -> None:
        """Take every hook and patch out again (in-process tests; a worker never needs it)."""
        self.phases.stop()
        while self._undo:
            self._undo.pop()()
        if rankwatch._clock is self:
            rankwatch._set_clock(None)

    def on_optimizer_step_start(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        """Global optimizer pre-hook: note whether this step evaluates a closure.

        torch passes ``args`` with the optimizer itself first: ``step(closure)``
        arrives as ``(optimizer, closure)``.
        """
        self.loss.on_step_start(
            (len(args) > 1 and callable(args[1]))
            or (kwargs is not None and kwargs.get("closure") is not None)
        )
        if self.phases.timing:
            self.phases.on_optimizer_start()

    def on_optimizer_step(self, optimizer: Any, args: Any = (), kwargs: Any = None) -> None:
        """Global optimizer post-hook: a step boundary if ``optimizer`` is the clock."""
        self.optimizer_steps += 1
        self._optimizer_stepped(optimizer, skipped=False)

    def on_skipped_step(self, optimizer: Any) -> None:
        """``GradScaler.step`` skipped ``optimizer``'s step (inf/NaN gradients): still a step, marked skipped."""
        self._optimizer_stepped(optimizer, skipped=True)

    def _optimizer_stepped(self, optimizer: Any, skipped: bool) -> None:
        reference = self._optimizer
        if reference is None or reference() is not optimizer:
            if reference is not None and reference() is not None:
                self.loss.discard()  # another model's loss (a GAN's second optimizer)
                if self.phases.timing and not skipped:
                    self.phases.on_optimizer_end()
                return
            self._optimizer = weakref.ref(optimizer)
        step = self._end_step(skipped)
        if self._hash_every and self.steps % self._hash_every == 0:
            self._send_digest(optimizer, step)

    def on_backward_end(self) -> None:
        """After an outermost backward while no optimizer exists: a step boundary (module docstring)."""
        self._end_step()

    def _end_step(self, skipped: bool = False) -> int:
        """Queue the record of the step that just ended; returns its number."""
        now = _perf_counter()
        last = self._last_step_at
        self._last_step_at = now
        step = self.steps
        self.steps = step + 1
        step_time = None if last is None else now - last
        phases, cpu_wait = self.phases.end_step(now, step_time, step + 1)
        data_wait, samples = self.data.take()
        self._buffer.put((
            KIND_STEP, _now(), step, self.loss.take(), step_time, data_wait, samples, cpu_wait, skipped, phases,
        ))  # fmt: skip
        if now >= self._memory_due:
            self._read_gpu_memory(now, step)
        ident = _get_ident()
        if ident != self._thread_ident:  # get_native_id is a system call: only when the thread changes
            self._thread_ident = ident
            self.thread = threading.get_native_id()
        return step

    def _read_gpu_memory(self, now: float, step: int) -> None:
        """The allocator's counters for the training device, at this step's end (about once a second)."""
        self._memory_due = now + GPU_MEMORY_EVERY
        device = self.phases.device
        if device is None:
            return
        try:
            stats = self._torch.cuda.memory_stats(device)
            record = (KIND_GPU_MEMORY, _now(), step, stats.get("allocated_bytes.all.current"),
                      stats.get("reserved_bytes.all.current"), stats.get("allocated_bytes.all.peak"))
        except Exception:  # an allocator without these counters: not measured
            self._memory_due = float("inf")
            return
        self._buffer.put(record)

    def _send_digest(self, optimizer: Any, step: int) -> None:
        try:
            digest = parameter_digest(self._torch, optimizer_parameters(optimizer))
        except Exception as exc:
            self._hash_every = 0
            _warn(f"parameter fingerprints disabled ({type(exc).__name__}: {exc})")
            return
        self._reporter.send(ParamHash(self._reporter.rank, _now(), step, digest))


def install(
    torch: Any, buffer: RecordBuffer, reporter: Reporter | None, hash_every: int = 0
) -> StepClock:
    """Hook torch for loss, step time, data wait and throughput; returns the step clock.

    Each hook is installed on its own: if one of torch's internals moved in
    this torch version, the others still work and a one-line warning says
    which is missing. Never raises.
    """
    clock = StepClock(torch, buffer, reporter, hash_every)
    problems = []
    for what, patch in (
        ("optimizer step hook", _hook_optimizer_steps),
        ("optimizer construction", _watch_optimizer_construction),
        ("backward", _patch_backward),
        ("DataLoader", _patch_data_loader),
        ("GradScaler", _patch_grad_scaler),
        ("collectives", _patch_collectives),
    ):
        try:
            clock._undo.append(patch(torch, clock))
        except Exception as exc:
            problems.append(f"{what} ({type(exc).__name__}: {exc})")
    if problems:
        _warn("instrumentation incomplete, not measured: " + "; ".join(problems))
    rankwatch._set_clock(clock)
    return clock


# Each patch installs one hook and returns what undoes it.


def _hook_optimizer_steps(torch: Any, clock: StepClock) -> Callable[[], None]:
    optimizer_module = sys.modules["torch.optim.optimizer"]
    before = optimizer_module.register_optimizer_step_pre_hook(clock.on_optimizer_step_start)
    try:
        after = optimizer_module.register_optimizer_step_post_hook(clock.on_optimizer_step)
    except Exception:
        before.remove()
        raise

    def undo() -> None:
        before.remove()
        after.remove()

    return undo


def _watch_optimizer_construction(torch: Any, clock: StepClock) -> Callable[[], None]:
    """Note the first optimizer made: from then on only optimizer steps end steps.

    Every ``torch.optim.Optimizer`` subclass runs the base ``__init__`` (it sets up
    ``param_groups`` and the very step hooks the clock relies on), so wrapping the
    base's is enough.
    """
    optimizer_class = sys.modules["torch.optim.optimizer"].Optimizer
    original = optimizer_class.__dict__["__init__"]

    @functools.wraps(original)
    def __init__(self, *args, **kwargs):
        clock.optimizer_made = True
        return original(self, *args, **kwargs)

    optimizer_class.__init__ = __init__
    return functools.partial(setattr, optimizer_class, "__init__", original)


def _patch_backward(torch: Any, clock: StepClock) -> Callable[[], None]:
    original = torch.autograd.backward
    loss = clock.loss
    data = clock.data
    phases = clock.phases

    @functools.wraps(original)
    def backward(tensors, *args, **kwargs):
        if clock.in_backward:
            return original(tensors, *args, **kwargs)
        loss.before_backward(tensors)  # what the value was divided by: freed by the backward; never raises
        timed = phases.timing  # untimed steps (``split_every``) do not call into the phases at all
        if timed:
            try:
                phases.on_backward_start(tensors)
            except Exception:  # telemetry must never break the user's backward
                pass
        clock.in_backward = True
        try:
            result = original(tensors, *args, **kwargs)
        finally:
            clock.in_backward = False
        try:
            if timed:
                phases.on_backward_end()
            loss.on_backward(tensors, args[0] if args else kwargs.get("grad_tensors"))
            data.on_backward()
            if not clock.optimizer_made:
                clock.on_backward_end()
        except Exception:  # telemetry must never break the user's backward
            pass
        return result

    torch.autograd.backward = backward
    return functools.partial(setattr, torch.autograd, "backward", original)


def _patch_collectives(torch: Any, clock: StepClock) -> Callable[[], None]:
    return patch_collectives(torch.distributed, clock.phases, lambda: clock.in_backward)


def _forward_pre_hook(torch: Any) -> Callable[[Callable[..., None]], Any] | None:
    """torch's global module forward pre-hook registration (the forward's start), or None."""
    register = getattr(getattr(getattr(torch, "nn", None), "modules", None), "module", None)
    register = getattr(register, "register_module_forward_pre_hook", None)
    if not callable(register):
        _warn("instrumentation incomplete, not measured: the forward's start (no global module hooks)")
        return None
    return register


def _is_initialized(torch: Any) -> Callable[[], bool]:
    """``torch.distributed.is_initialized``, or always False on a build without distributed."""
    distributed = getattr(torch, "distributed", None)
    check = getattr(distributed, "is_initialized", None)
    return check if callable(check) else _never


def _queue_callback(torch: Any) -> Callable[[Callable[[], None]], None]:
    """The autograd engine's ``queue_callback`` (a final callback of the running backward).

    Missing in a torch that moved it: the callback is never queued, the backward's
    tail is not timed, and the ``comm`` phase holds only the Python collectives.
    """
    try:
        return torch.autograd.Variable._execution_engine.queue_callback
    except AttributeError:
        _warn("instrumentation incomplete, not measured: the all-reduce wait at the end of backward")
        return _ignore


def _never() -> bool:
    return False


def _ignore(callback: Callable[[], None]) -> None:
    return None


def _patch_data_loader(torch: Any, clock: StepClock) -> Callable[[], None]:
    iterator_class = sys.modules["torch.utils.data.dataloader"]._BaseDataLoaderIter
    original = iterator_class.__next__
    tensor_type = torch.Tensor
    data = clock.data
    phases = clock.phases
    grad_enabled = torch.is_grad_enabled

    @functools.wraps(original)
    def __next__(self):
        timed = phases.timing and grad_enabled()  # batches under no_grad are an evaluation's
        if timed:
            try:
                phases.on_batch_start()
            except Exception:
                timed = False
        started = _perf_counter()
        try:
            batch = original(self)
        except StopIteration:
            try:
                data.on_exhausted(self)
                if timed:
                    phases.leave()
            except Exception:
                pass
            raise
        except BaseException:
            if timed:
                try:
                    phases.leave()
                except Exception:
                    pass
            raise
        ended = _perf_counter()
        try:
            if timed:
                phases.on_batch_end()
            data.on_batch(self, ended - started, batch_size(batch, tensor_type))
        except Exception:  # telemetry must never break the user's data loading
            pass
        return batch

    iterator_class.__next__ = __next__
    return functools.partial(setattr, iterator_class, "__next__", original)


def _patch_grad_scaler(torch: Any, clock: StepClock) -> Callable[[], None]:
    """Wrap ``scale`` and ``step`` of ``GradScaler`` and of every subclass that overrides them.

    Subclasses such as FSDP's ``ShardedGradScaler`` override ``scale`` without calling
    the base's: each override is wrapped too, those defined now and those defined
    later (``__init_subclass__``), or their scaled loss would be read as the loss.
    """
    scaler_class = sys.modules["torch.amp.grad_scaler"].GradScaler
    tensor_type = torch.Tensor
    wrapped: list[tuple[type, str, Any]] = []
    """(class, name, original) of every method replaced, for ``undo``."""
    outermost_step = [True]

    def wrap_scale(original):
        @functools.wraps(original)
        def scale(self, outputs):
            scaled = original(self, outputs)
            if type(outputs) is tensor_type:
                clock.loss.remember_scaled(scaled, outputs)
            return scaled

        return scale

    def wrap_step(original):
        @functools.wraps(original)
        def step(self, optimizer, *args, **kwargs):
            if not outermost_step[0]:  # a subclass's step calling the base's
                return original(self, optimizer, *args, **kwargs)
            outermost_step[0] = False
            try:
                steps_before = clock.optimizer_steps
                result = original(self, optimizer, *args, **kwargs)
            finally:
                outermost_step[0] = True
            if clock.optimizer_steps == steps_before:  # skipped for inf/NaN gradients: still a step
                clock.on_skipped_step(optimizer)
            return result

        return step

    def wrap_class(cls: type) -> None:
        for name, wrap in (("scale", wrap_scale), ("step", wrap_step)):
            original = cls.__dict__.get(name)
            if original is not None and callable(original):
                wrapped.append((cls, name, original))
                setattr(cls, name, wrap(original))

    def every_subclass(cls: type) -> list[type]:
        found = []
        for subclass in cls.__subclasses__():
            found.append(subclass)
            found.extend(every_subclass(subclass))
        return found

    for cls in [scaler_class, *every_subclass(scaler_class)]:
        wrap_class(cls)
    had_hook = "__init_subclass__" in scaler_class.__dict__
    original_hook = scaler_class.__dict__.get("__init_subclass__")

    def __init_subclass__(cls, **kwargs):
        super(scaler_class, cls).__init_subclass__(**kwargs)
        try:
            wrap_class(cls)
        except Exception:
            pass

    if not had_hook:
        scaler_class.__init_subclass__ = classmethod(__init_subclass__)

    def undo() -> None:
        for cls, name, original in reversed(wrapped):
            setattr(cls, name, original)
        if not had_hook:
            del scaler_class.__init_subclass__
        elif original_hook is not None:
            scaler_class.__init_subclass__ = original_hook

    return undo


def batch_size(batch: Any, tensor_type: type) -> int | None:
    """First dimension of the first tensor in ``batch`` (tensor, sequence or mapping), if any."""
    for _ in range(4):
        if isinstance(batch, tensor_type):
            shape = batch.shape
            return shape[0] if len(shape) else None
        if isinstance(batch, (list, tuple)):
            if not batch:
                return None
            batch = batch[0]
        elif isinstance(batch, (dict, Mapping)):
            batch = next(iter(batch.values()), None)
        else:
            return None
    return None


def _warn(message: str) -> None:
    try:
        sys.stderr.write(f"rankwatch: {message}\n")
    except Exception:
        pass
