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
  it: the sum is the mean of the unscaled micro-batch losses, which is what they
  report. (A mean of the values would divide by K a second time.) The
  ``Trainer``'s token-count normalisation (``num_items_in_batch``) is a sum too.
  A script that calls ``backward(loss_i)`` without dividing by K applies the
  gradient of the sum, and the sum is stored.
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
  (``_values.PendingSum``); the training thread never synchronises the device.
* bf16/fp16 autocast: the values are added in Python floats (float64).

Every method runs on the training thread: a few attribute updates each.
"""

from __future__ import annotations

from rankwatch._values import PendingCopy, PendingSum, copy_to_host

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


class StepLoss:
    """What was backpropagated since the previous optimizer step, and its rules (module docstring)."""

    __slots__ = (
        "_tensor_type", "_host_sum", "_host_count", "_copies", "_unreadable",
        "_scaled", "_unscaled", "_closure_step", "_closure_counted",
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

    def remember_scaled(self, scaled: Any, unscaled: Any) -> None:
        """``GradScaler.scale(unscaled)`` returned ``scaled``: count ``unscaled`` at its backward."""
        self._scaled = scaled
        self._unscaled = unscaled

    def on_step_start(self, has_closure: bool) -> None:
        """An optimizer's ``step`` begins; with a closure, only its first backward will count."""
        self._closure_step = has_closure
        self._closure_counted = False

    def on_backward(self, tensors: Any, gradients: Any) -> None:
        """After a successful ``torch.autograd.backward(tensors, gradients)``: count its value."""
        if self._closure_step:
            if self._closure_counted:
                return  # a later evaluation of the closure (LBFGS's line search)
            self._closure_counted = True
        tensor_type = self._tensor_type
        if type(tensors) is tensor_type:
            if gradients is None:
                self._add(tensors)
                return
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
        """The loss of the step that just ended (a number, a ``PendingSum`` or None), and reset."""
        if self._unreadable:
            value: Any = None
        elif self._copies:
            value = PendingSum(self._copies, self._host_sum)
        elif self._host_count:
            value = self._host_sum
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
