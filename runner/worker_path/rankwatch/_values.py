"""Reading scalar values without slowing the training thread.

``capture`` runs on the training thread and must never synchronise a device:

* Python numbers are kept as they are;
* a one-element CPU tensor is read with ``item()`` right away (about 0.2 us, and
  reading later could see an in-place update such as a running sum);
* a one-element CUDA tensor starts a non-blocking copy to (pinned) host memory
  and records a CUDA event behind it; the reporter thread reads the host copy
  once ``event.query()`` says the copy is done (``Pending``);
* anything else that ``float()`` accepts (numpy scalars, ...) is converted;
  other values (strings, tensors with several elements, tensors on devices
  without events) are skipped, never an error in the user's script.

Tensors are recognised by duck typing and ``torch`` is taken from
``sys.modules``: holding a tensor means torch is already imported, and this
module stays stdlib-only.
"""

from __future__ import annotations

import abc
import sys

TYPE_CHECKING = False  # `typing` costs ~2 ms to import; annotations are strings anyway
if TYPE_CHECKING:
    from typing import Any


class Pending(abc.ABC):
    """A value the reporter can read once ``ready()``; reading never waits for a device."""

    __slots__ = ()

    @abc.abstractmethod
    def ready(self) -> bool:
        """Whether ``value()`` can be read now without waiting."""

    @abc.abstractmethod
    def value(self) -> float:
        """The value (only after ``ready()`` said so)."""


class PendingCopy(Pending):
    """A device scalar being copied to host memory, with the event that marks the copy done."""

    __slots__ = ("_host", "_event")

    def __init__(self, host: Any, event: Any):
        self._host = host
        self._event = event

    def ready(self) -> bool:
        return bool(self._event.query())

    def value(self) -> float:
        return self._host.item()


class PendingSum(Pending):
    """The sum of values already read on the host and values still being copied.

    The loss of a step on a GPU (``_loss``): one copy per backward call of the
    step, added up on the reporter thread once every copy is done.
    """

    __slots__ = ("_copies", "_host_sum")

    def __init__(self, copies: list[PendingCopy], host_sum: float = 0.0):
        self._copies = copies
        self._host_sum = host_sum

    def ready(self) -> bool:
        return all(copy.ready() for copy in self._copies)

    def value(self) -> float:
        return self._host_sum + sum(copy.value() for copy in self._copies)


def capture(value: Any) -> Any:
    """A number, a ``Pending`` or None (skip) for ``value``; cheap and never blocking."""
    kind = type(value)
    if kind is float or kind is int:
        return value
    if kind is bool:
        return int(value)
    if hasattr(value, "is_cuda") and hasattr(value, "numel"):
        return capture_tensor(value)
    try:
        return float(value)
    except (TypeError, ValueError, OverflowError):
        return None


def capture_tensor(tensor: Any) -> Any:
    """Read a one-element tensor without a device sync (see the module docstring)."""
    try:
        if tensor.numel() != 1:
            return None
        if tensor.is_cpu:
            return tensor.item()
        if tensor.is_cuda:
            return copy_to_host(tensor)
    except Exception:  # an exotic tensor subclass must not break the user's script
        return None
    return None


def copy_to_host(tensor: Any) -> PendingCopy:
    """Queue a non-blocking device-to-host copy and an event behind it.

    ``to("cpu", non_blocking=True)`` from CUDA allocates the destination in pinned
    memory (torch's caching host allocator), so the copy is truly asynchronous.
    The event is recorded on the tensor's device's current stream, the one the
    copy was queued on.
    """
    torch = sys.modules["torch"]
    host = tensor.detach().to("cpu", non_blocking=True)
    event = torch.cuda.Event()
    event.record(torch.cuda.current_stream(tensor.device))
    return PendingCopy(host, event)


NOT_A_NUMBER = "not a number"
"""Sent in place of a value ``capture`` cannot read (a string, a list): the hub rejects the one
record, counts it and says which and why, rather than it vanishing unseen."""


def capture_all(scalars: dict[str, object]) -> dict[str, object]:
    """``capture`` each value; one that cannot be read becomes ``NOT_A_NUMBER``."""
    captured: dict[str, object] = {}
    for name, value in scalars.items():
        read = capture(value)
        captured[name] = NOT_A_NUMBER if read is None else read
    return captured
