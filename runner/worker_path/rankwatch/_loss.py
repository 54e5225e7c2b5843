"""The loss of an optimizer step: the sum of what was backpropagated for it.

The rule (the README's "What is measured" section says it in two sentences):

    The loss of a step is the sum of the scalar values passed to ``backward`` on
    this rank since the previous optimizer step, because that sum is the objective
    whose gradient the step applies.

Why the sum, shape by shape:

* one backward per step: the sum is that value.
* gradient accumulation (K micro-batches, each ``backward(loss_i / K)``, one
  step), as Lightning's ``accumulate_grad_batches``, accelerate's
  ``gradient_accumulation_steps``, the Hugging Face ``Trainer`` and nanoGPT do
  it: the sum is the mean of the unscaled micro-batch losses. (A mean of the
  values would divide by K a second time.) What each framework prints is in the
  README (nanoGPT prints the last micro-batch's loss times K, not the mean). The
  ``Trainer``'s token-count normalisation (``num_items_in_batch``) is a sum too.
  A script that calls ``backward(loss_i)`` without dividing by K applies the
  gradient of the sum, and the sum is stored.
* a partial accumulation group: an epoch whose length K does not divide ends
  with a step of n < K micro-batches that accelerate and Lightning still
  backpropagate as ``loss_i / K``; their sum is n/K of the mean, so when every
  backward of the step was ``x / K`` or ``x * (1 / K)`` with the same integer K,
  and an earlier step of the clock optimizer was a full group of K (K backward
  calls, each divided by K), the step stores sum x K / n: the mean of its
  unscaled losses. K is read before each backward (``before_backward``: autograd
  frees the saved divisor during the backward) and only when it is a CPU scalar
  that no saved-tensor hook holds: Python's ``loss / 3`` makes a CPU "wrapped
  number" that hooks never see, on a GPU job too, so reading it never
  synchronises a device nor runs a hook (checkpointing, offloading). Everything
  else keeps the sum: no full group seen yet, one backward of the step with
  another or no divisor (a list, an explicit gradient), a divisor on a device, a
  script that does not divide, the ``Trainer`` (it divides a partial group by its
  own size n, and under ``num_items_in_batch`` by the group's token count), and
  ``backward(loss / 2)`` once per step (no step ever had 2 such backward calls).
  The cost: about 0.9 us per backward whose loss is a division, 0.15 us otherwise.
* several losses backpropagated separately for one optimizer
  (``loss_a.backward(); loss_b.backward(); step()``): their sum, the same
  objective as ``(loss_a + loss_b).backward()``.
* several optimizers (a GAN's discriminator and generator): every optimizer step
  closes the account; the step clock's (the first optimizer to step, see
  ``_instrument``) keeps what was backpropagated before it, another optimizer's
  step drops what was backpropagated for it, so the two models' losses never mix.
* ``GradScaler`` (and subclasses such as FSDP's ``ShardedGradScaler``): the
  tensor given to ``scale()`` is read, not the scaled one, so the value does not
  depend on the scale; a step the scaler skips still closes
  the account and still counts.
* DDP and ``no_sync``: per rank, never averaged over ranks (DDP averages
  gradients, not losses); ``no_sync`` only defers the gradient all-reduce.
* closures (``optimizer.step(closure)``, as Lightning and LBFGS use them): of the
  backward calls made *inside* that step, only the first counts: LBFGS evaluates
  its closure many times per step at trial points, and ``step`` returns the first
  evaluation's loss. Backward calls made before the step (Lightning's
  accumulated micro-batches) count as usual.
* ``torch.autograd.backward([l1, l2])``: the sum, the objective whose gradient is
  taken. A tensor with an explicit ``gradient=`` / ``grad_tensors`` is not a loss
  whose value the gradient is taken of: several elements (an activation, as in a
  pipeline stage) are ignored; one element makes the step's loss "not measured".
* a value that cannot be read without risk (a tensor subclass such as DTensor,
  whose ``item()`` may communicate; a device other than CPU or CUDA) makes the
  step's loss "not measured" rather than a partial sum.
* CUDA losses: a non-blocking copy per backward, added on the reporter thread
  (``_values.PendingSum``, times K / n for a partial group: ``ScaledPending``);
  the training thread never synchronises the device.
* bf16/fp16 autocast: the values are added in Python floats (float64).

Every method runs on the training thread: a few attribute updates each, and
``before_backward`` one read of a CPU scalar when the loss is a division.
"""

from __future__ import annotations

import sys

from rankwatch._values import Pending, PendingCopy, PendingSum, copy_to_host

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

RELATIVE_TOLERANCE = 1e-5
"""How far from an integer ``1 / factor`` of ``loss * factor`` may be (a float32 ``1 / K``)."""


class StepLoss:
    """What was backpropagated since the previous optimizer step, and its rules (module docstring)."""

    __slots__ = (
        "_tensor_type", "_host_sum", "_host_count", "_copies", "_unreadable",
        "_scaled", "_unscaled", "_closure_step", "_closure_counted",
        "_divide_node", "_multiply_node", "_next_divisor", "_backwards", "_step_divisor", "_group",
    )  # fmt: skip

    def __init__(self, tensor_type: type):
        self._tensor_type = tensor_type
        self._host_sum = 0.0
        self._host_count = 0
        self._copies: list[PendingCopy] = []
        self._unreadable = False
        self._scaled: Any = None
        self._unscaled: Any = None
        self._closure_step = False
        self._closure_counted = False
        # autograd's nodes of ``x / c`` and ``x * c``; None in a torch without them (never a divisor)
        nodes = getattr(getattr(sys.modules.get("torch"), "_C", None), "_functions", None)
        self._divide_node = getattr(nodes, "DivBackward0", None)
        self._multiply_node = getattr(nodes, "MulBackward0", None)
        self._next_divisor = 0
        """The constant the value of the backward about to run was divided by (0: none)."""
        self._backwards = 0
        """Backward calls counted in this step."""
        self._step_divisor = 0
        """The constant every counted backward of this step was divided by (0: none, or not the same)."""
        self._group = 0
        """K of the last full accumulation group: a step of K backward calls, each divided by K."""

    def remember_scaled(self, scaled: Any, unscaled: Any) -> None:
        """``GradScaler.scale(unscaled)`` returned ``scaled``: count ``unscaled`` at its backward."""
        self._scaled = scaled
        self._unscaled = unscaled

    def on_step_start(self, has_closure: bool) -> None:
        """An optimizer's ``step`` begins; with a closure, only its first backward will count."""
        self._closure_step = has_closure
        self._closure_counted = False

    def before_backward(self, tensors: Any) -> None:
        """Before ``torch.autograd.backward(tensors)``: note the constant its value was divided by.

        Read now because autograd frees what the division saved once the backward ran.
        Only an unhooked CPU scalar divisor is read: Python's ``loss / 3`` makes a
        "wrapped number", always a CPU tensor that saved-tensor hooks never see; a
        hooked one (activation checkpointing, offloading) is left alone, since
        unpacking it would run the hook, and a CUDA one, since reading it would
        synchronise. Never raises.
        """
        divisor = 0
        try:
            if type(tensors) is self._tensor_type:
                if tensors is self._scaled:
                    tensors = self._unscaled  # GradScaler.scale(loss / K): the division is below the scale
                node = tensors.grad_fn
                kind = type(node)
                if kind is self._divide_node or kind is self._multiply_node:
                    saved = node._raw_saved_other
                    if saved.unpack_hook is None:
                        other = saved.data
                        if type(other) is self._tensor_type and other.is_cpu and not other.dim():
                            value = other.item()
                            if kind is self._multiply_node:
                                value = 1.0 / value if 0.0 < value < 1.0 else 0.0
                            divisor = round(value)
                            if divisor < 2 or abs(value - divisor) > RELATIVE_TOLERANCE * divisor:
                                divisor = 0
        except Exception:  # a torch whose autograd nodes look otherwise: no divisor
            divisor = 0
        self._next_divisor = divisor

    def on_backward(self, tensors: Any, gradients: Any) -> None:
        """After a successful ``torch.autograd.backward(tensors, gradients)``: count its value."""
        divisor = self._next_divisor
        self._next_divisor = 0
        if self._closure_step:
            if self._closure_counted:
                return  # a later evaluation of the closure (LBFGS's line search)
            self._closure_counted = True
        tensor_type = self._tensor_type
        backwards = self._backwards
        self._backwards = backwards + 1
        if type(tensors) is tensor_type and gradients is None:
            if backwards == 0:
                self._step_divisor = divisor
            elif divisor != self._step_divisor:
                self._step_divisor = 0
            self._add(tensors)
            return
        self._step_divisor = 0  # several values or an explicit gradient: not one micro-batch's scaled loss
        if type(tensors) is tensor_type:
            tensors = (tensors,)
        elif not isinstance(tensors, (list, tuple)):
            return  # e.g. autograd GradientEdges: no value to read
        if gradients is not None and type(gradients) is tensor_type:
            gradients = (gradients,)
        for index, tensor in enumerate(tensors):
            gradient = None
            if gradients is not None:
                try:
                    gradient = gradients[index]
                except (IndexError, TypeError):
                    gradient = None
            if gradient is None:
                self._add(tensor)
            else:
                try:
                    if tensor.numel() == 1:
                        self._unreadable = True  # a weighted objective, not this value
                except Exception:
                    self._unreadable = True

    def take(self) -> Any:
        """The loss of the step that just ended (a number, a ``Pending`` or None), and reset.

        A partial accumulation group (fewer backward calls than the last full group's K,
        each divided by that K) is scaled by K / n: the mean of its unscaled values.
        """
        divisor = self._step_divisor
        factor = 1.0
        if divisor:
            backwards = self._backwards
            if backwards == divisor:
                self._group = divisor
            elif backwards < divisor and divisor == self._group:
                factor = divisor / backwards
        if self._unreadable:
            value: Any = None
        elif self._copies:
            value = PendingSum(self._copies, self._host_sum)
            if factor != 1.0:
                value = ScaledPending(value, factor)
        elif self._host_count:
            value = self._host_sum * factor
        else:
            value = None
        self.discard()
        return value

    def discard(self) -> None:
        """Forget what was backpropagated (another optimizer stepped: it was that model's loss)."""
        if self._host_count or self._copies or self._unreadable:
            self._host_sum = 0.0
            self._host_count = 0
            self._copies = []
            self._unreadable = False
        self._backwards = self._step_divisor = 0
        self._closure_step = False
        self._scaled = self._unscaled = None

    def _add(self, tensor: Any) -> None:
        if tensor is self._scaled:
            tensor = self._unscaled
            self._scaled = self._unscaled = None
        if type(tensor) is not self._tensor_type:
            self._unreadable = True  # a subclass (DTensor...) whose item() may communicate
            return
        try:
            if tensor.numel() != 1:
                return  # torch refuses a non-scalar without a gradient; nothing to count
            if tensor.is_cpu:
                self._host_sum += tensor.item()
                self._host_count += 1
            elif tensor.is_cuda:
                self._copies.append(copy_to_host(tensor))
            else:
                self._unreadable = True  # no event to wait on without a synchronisation
        except Exception:
            self._unreadable = True


class ScaledPending(Pending):
    """A pending value times a factor (a partial accumulation group's CUDA losses)."""

    __slots__ = ("_pending", "_factor")

    def __init__(self, pending: Pending, factor: float):
        self._pending = pending
        self._factor = factor

    def ready(self) -> bool:
        return self._pending.ready()

    def value(self) -> float:
        return self._pending.value() * self._factor
