"""Zero-code instrumentation: loss, step time, data wait and throughput from torch's own hooks.

Installed right after the user's script imports torch (``_torch_hook``), only
when ``RANKWATCH_INSTRUMENT=1``. Nothing here is imported at module level from
torch: ``install`` receives the torch module.

What is measured, per rank, and where:

* step boundaries: torch's global optimizer step post-hook. The first optimizer
  that steps is the step clock; other optimizers (a GAN's second one) are
  ignored. ``steps`` counts the clock's steps, and a step's metrics carry the
  number of steps completed *before* it (0 for the first), like a script that
  prints ``step {step}`` and increments its counter after ``optimizer.step()``.
  A step that ``GradScaler.step`` skipped (inf/NaN gradients) still counts.
* ``loss``: the value of each one-element tensor passed to
  ``torch.autograd.backward`` (``Tensor.backward`` goes through it; patching both
  would count every loss twice), averaged over the backward calls of the step
  (gradient accumulation). With ``GradScaler`` the tensor given to
  ``scale()`` is reported, i.e. the unscaled loss. Backward calls nested in a
  backward (reentrant checkpointing) are ignored.
* ``data_wait``: time spent inside DataLoader iterators' ``__next__`` during the
  step (an evaluation loop between two steps counts towards the next step).
* ``step_time``, ``steps_per_s``, and ``samples_per_s`` when a batch shows its
  size (first dimension of the first tensor in the batch).

The hot path is a few microseconds per step and never synchronises a device:
CPU losses are read with ``item()`` (no sync on CPU), CUDA losses are copied
without blocking and read later by the reporter (``_values``). Losses on other
devices are not read at all.
"""

from __future__ import annotations

import functools
import sys
import time
import weakref
from collections.abc import Mapping
from typing import Any

import rankwatch
from rankwatch._buffer import KIND_STEP, RecordBuffer
from rankwatch._fingerprint import optimizer_parameters, parameter_digest
from rankwatch._protocol import ParamHash
from rankwatch._reporter import Reporter
from rankwatch._values import PendingCopy, PendingMean, copy_to_host

_perf_counter = time.perf_counter
_now = time.time


class StepClock:
    """Step boundaries from the clock optimizer, and what happened since the previous one.

    Every method runs on the training thread inside the user's step: keep them
    to a few attribute updates.
    """

    __slots__ = (
        "steps", "data_wait", "samples", "in_backward",
        "_buffer", "_reporter", "_hash_every", "_torch", "_tensor_type",
        "_optimizer", "_last_step_at", "_loss_sum", "_loss_count", "_loss_copies",
        "_scaled", "_unscaled",
    )  # fmt: skip

    def __init__(
        self, torch: Any, buffer: RecordBuffer, reporter: Reporter | None, hash_every: int
    ):
        self.steps = 0
        self.data_wait = 0.0
        self.samples = 0
        self.in_backward = False
        self._buffer = buffer
        self._reporter = reporter
        self._hash_every = hash_every if reporter is not None else 0
        self._torch = torch
        self._tensor_type = torch.Tensor
        self._optimizer: weakref.ref | None = None
        self._last_step_at: float | None = None
        self._loss_sum = 0.0
        self._loss_count = 0
        self._loss_copies: list[PendingCopy] = []
        self._scaled: Any = None
        self._unscaled: Any = None

    def remember_scaled(self, scaled: Any, unscaled: Any) -> None:
        """``GradScaler.scale(unscaled)`` returned ``scaled``: report ``unscaled`` at its backward."""
        self._scaled = scaled
        self._unscaled = unscaled

    def record_loss(self, tensors: Any) -> None:
        """After a successful backward of ``tensors``: keep its value if it is a scalar loss."""
        if tensors is self._scaled:
            tensors = self._unscaled
            self._scaled = self._unscaled = None
        if type(tensors) is not self._tensor_type:
            return  # a list of tensors, or a tensor subclass whose item() may communicate
        try:
            if tensors.numel() != 1:
                return
            if tensors.is_cpu:
                self._loss_sum += tensors.item()
                self._loss_count += 1
            elif tensors.is_cuda:
                self._loss_copies.append(copy_to_host(tensors))
        except Exception:
            return

    def on_optimizer_step(self, optimizer: Any, args: Any = (), kwargs: Any = None) -> None:
        """Global optimizer post-hook: a step boundary if ``optimizer`` is the clock."""
        reference = self._optimizer
        if reference is None or reference() is not optimizer:
            if reference is not None and reference() is not None:
                return
            self._optimizer = weakref.ref(optimizer)
        now = _perf_counter()
        last = self._last_step_at
        self._last_step_at = now
        step = self.steps
        self._buffer.put((
            KIND_STEP, _now(), step, self._take_loss(),
            None if last is None else now - last, self.data_wait, self.samples,
        ))  # fmt: skip
        self.data_wait = 0.0
        self.samples = 0
        self.steps = step + 1
        if self._hash_every and self.steps % self._hash_every == 0:
            self._send_digest(optimizer, step)

    def _take_loss(self) -> Any:
        count = self._loss_count
        copies = self._loss_copies
        if copies:
            self._loss_copies = []
            value: Any = PendingMean(copies, self._loss_sum, count)
        elif count:
            value = self._loss_sum / count
        else:
            value = None
        self._loss_sum = 0.0
        self._loss_count = 0
        return value

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
        ("backward", _patch_backward),
        ("DataLoader", _patch_data_loader),
        ("GradScaler", _patch_grad_scaler),
    ):
        try:
            patch(torch, clock)
        except Exception as exc:
            problems.append(f"{what} ({type(exc).__name__}: {exc})")
    if problems:
        _warn("instrumentation incomplete, not measured: " + "; ".join(problems))
    rankwatch._set_clock(clock)
    return clock


def _hook_optimizer_steps(torch: Any, clock: StepClock) -> None:
    optimizer_module = sys.modules["torch.optim.optimizer"]
    optimizer_module.register_optimizer_step_post_hook(clock.on_optimizer_step)


def _patch_backward(torch: Any, clock: StepClock) -> None:
    original = torch.autograd.backward

    @functools.wraps(original)
    def backward(tensors, *args, **kwargs):
        if clock.in_backward:
            return original(tensors, *args, **kwargs)
        clock.in_backward = True
        try:
            result = original(tensors, *args, **kwargs)
        finally:
            clock.in_backward = False
        clock.record_loss(tensors)
        return result

    torch.autograd.backward = backward


def _patch_data_loader(torch: Any, clock: StepClock) -> None:
    iterator_class = sys.modules["torch.utils.data.dataloader"]._BaseDataLoaderIter
    original = iterator_class.__next__
    tensor_type = torch.Tensor

    @functools.wraps(original)
    def __next__(self):
        started = _perf_counter()
        try:
            batch = original(self)
        finally:
            clock.data_wait += _perf_counter() - started
        size = batch_size(batch, tensor_type)
        if size:
            clock.samples += size
        return batch

    iterator_class.__next__ = __next__


def _patch_grad_scaler(torch: Any, clock: StepClock) -> None:
    scaler_class = sys.modules["torch.amp.grad_scaler"].GradScaler
    original_scale = scaler_class.scale
    original_step = scaler_class.step
    tensor_type = torch.Tensor

    @functools.wraps(original_scale)
    def scale(self, outputs):
        scaled = original_scale(self, outputs)
        if type(outputs) is tensor_type:
            clock.remember_scaled(scaled, outputs)
        return scaled

    @functools.wraps(original_step)
    def step(self, optimizer, *args, **kwargs):
        steps_before = clock.steps
        result = original_step(self, optimizer, *args, **kwargs)
        if clock.steps == steps_before:  # skipped for inf/NaN gradients: still a step
            clock.on_optimizer_step(optimizer, args, kwargs)
        return result

    scaler_class.scale = scale
    scaler_class.step = step


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
