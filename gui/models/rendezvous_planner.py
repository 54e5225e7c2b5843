"""Rendezvous planning off the GUI thread: the latest request, once the form is quiet.

Planning a rendezvous can wait on the network: a c10d endpoint's host is looked up
(DNS) to learn whether this machine hosts the store, and a multi-node head's name
comes from ``ssh -G``. The launch form asks for a plan whenever the rendezvous inputs
change, which is at every keystroke in the endpoint field; done on the GUI thread,
each one froze the window for as long as the lookup took.

``RendezvousPlanner`` is the form's background producer, in the shape of the others: a
named daemon thread with a stop event. ``submit`` only records the request (the newest
replaces any waiting one); the thread plans it once no newer one came for ``delay``
seconds and hands the result to ``deliver`` -- on the planner's thread, so the caller
passes something that hops to its own thread (a queued Qt signal in the launch panel).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable
from typing import Any

QUIET_SECONDS = 0.3
"""How long the rendezvous inputs must stay unchanged before they are planned."""


class RendezvousPlanner:
    """Runs the latest submitted plan on a daemon thread, debounced.

    ``deliver(key, result)`` is called on the planner's thread with what ``work()`` returned.
    """

    def __init__(self, deliver: Callable[[Hashable, Any], None], delay: float = QUIET_SECONDS) -> None:
        self._deliver = deliver
        self._delay = delay
        self._wake = threading.Condition()
        self._request: tuple[Hashable, Callable[[], Any], float] | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rendezvous-planner", daemon=True)
        self._thread.start()

    def submit(self, key: Hashable, work: Callable[[], Any]) -> None:
        """Plan ``work`` for ``key`` once nothing newer was submitted for ``delay`` seconds."""
        with self._wake:
            self._request = (key, work, time.monotonic() + self._delay)
            self._wake.notify()

    def stop(self) -> None:
        """End the thread (a plan under way is finished but not delivered)."""
        self._stop.set()
        with self._wake:
            self._wake.notify()
        self._thread.join(timeout=5)

    def _next(self) -> tuple[Hashable, Callable[[], Any]] | None:
        """The request to plan now, once it is due; ``None`` when stopped."""
        with self._wake:
            while not self._stop.is_set():
                if self._request is None:
                    self._wake.wait()
                    continue
                key, work, due = self._request
                left = due - time.monotonic()
                if left > 0:
                    self._wake.wait(left)  # a newer request moves ``due``; look again
                    continue
                self._request = None
                return key, work
        return None

    def _run(self) -> None:
        while (request := self._next()) is not None:
            key, work = request
            result = work()
            if self._stop.is_set():
                return
            try:
                self._deliver(key, result)
            except RuntimeError:  # the receiver is gone (its window closed)
                return
