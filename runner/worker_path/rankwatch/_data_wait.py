"""Data wait and samples of an optimizer step, from the DataLoader iterators that feed training.

A step's data wait is the time spent inside DataLoader iterators' ``__next__``
during the step, and its samples the sizes of those batches; both count only
batches of a *training* iterator, one whose batches feed a backward:

* a batch fetched with autograd off (``torch.no_grad()``, ``inference_mode``:
  Lightning's validation loop, most hand-written evaluation loops) is not a
  training batch and is never counted;
* an iterator is recognised as a training iterator by the first backward that
  follows one of its batches: its batches fetched until then are counted at
  that backward (so the wait of a step's first batch counts in that step);
* an iterator that runs out (``StopIteration``) before any backward followed
  one of its batches was an evaluation pass with autograd on (the Hugging Face
  ``Trainer.evaluate`` iterates outside ``no_grad``): its batches are dropped.
  An iterator dropped before any backward followed its batches (an evaluation
  loop that stopped early) is forgotten with them. What remains unrecognised:
  an evaluation loop with autograd on that stops before its end while its
  iterator is kept alive into the next training batch; its wait counts.

A step in which no training iterator gave a batch has data wait ``None``: a
script without a DataLoader (or whose batches come from elsewhere) shows "not
measured", never a false 0 %. An iterator that gave a batch in ~0 s shows 0.

Hot path: one count and one grad-mode check per batch, and for a known training iterator
two additions; one truthiness check per backward.
"""

from __future__ import annotations

import weakref

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any


class DataWait:
    """Per-step data wait and samples of the training iterators (module docstring)."""

    __slots__ = ("wait", "samples", "batches", "_grad_enabled", "_training", "_unconfirmed")

    def __init__(self, grad_enabled: Callable[[], bool]):
        self.wait: float | None = None
        """Seconds this step in training iterators; None: no training batch yet this step."""
        self.samples = 0
        self.batches = 0
        """Batches any DataLoader gave so far, evaluation's too: a rank fetching batches is working."""
        self._grad_enabled = grad_enabled
        self._training: weakref.WeakSet = weakref.WeakSet()
        self._unconfirmed: dict[int, list] = {}
        """id(iterator) -> [weak reference, seconds, samples] of batches no backward has followed yet."""

    def on_batch(self, iterator: Any, seconds: float, size: int | None) -> None:
        """``iterator`` gave a batch of ``size`` samples after ``seconds``."""
        self.batches += 1
        if not self._grad_enabled():
            return  # evaluation under no_grad / inference_mode
        if iterator in self._training:
            wait = self.wait
            self.wait = seconds if wait is None else wait + seconds
            if size:
                self.samples += size
            return
        entry = self._unconfirmed.get(id(iterator))
        if entry is None or entry[0]() is not iterator:
            try:
                reference = weakref.ref(iterator)
            except TypeError:
                return
            entry = self._unconfirmed[id(iterator)] = [reference, 0.0, 0]
        entry[1] += seconds
        if size:
            entry[2] += size

    def on_exhausted(self, iterator: Any) -> None:
        """``iterator`` raised StopIteration: unconfirmed batches were an evaluation pass."""
        if self._unconfirmed:
            entry = self._unconfirmed.pop(id(iterator), None)
            if entry is not None and entry[0]() is not iterator:
                self._unconfirmed[id(iterator)] = entry  # another object that reused the id

    def on_backward(self) -> None:
        """A backward ran: the iterators that gave batches since are training iterators."""
        if self._unconfirmed:
            self._confirm()

    def take(self) -> tuple[float | None, int]:
        """(data wait or None, samples) of the step that just ended, and reset."""
        taken = (self.wait, self.samples)
        self.wait = None
        self.samples = 0
        return taken

    def _confirm(self) -> None:
        unconfirmed, self._unconfirmed = self._unconfirmed, {}
        for reference, seconds, samples in list(unconfirmed.values()):  # a loader thread may add
            iterator = reference()
            if iterator is None:
                continue
            self._training.add(iterator)
            wait = self.wait
            self.wait = seconds if wait is None else wait + seconds
            self.samples += samples
