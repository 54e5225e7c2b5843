"""Each diagnosis monitor gets a bounded share of the hub's event loop, at any rank count.

The run ticks its monitors every ``MONITOR_INTERVAL_SECONDS`` on the event loop that also
takes in every record. A monitor whose tick grows with the ranks (the straggler judgement
took 165 ms a tick at 512 fake ranks, a quarter of the loop's time) would hold the records
waiting behind it. A monitor whose tick took ``spent`` seconds is not ticked again before
``spent / LOOP_SHARE`` seconds have passed, so it has at most ``LOOP_SHARE`` of the loop; a
cheap tick (well under a millisecond at a few ranks) keeps the run's interval as before.
Its verdicts come later at scale, not wrong: they judge windows of many steps.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol

LOOP_SHARE = 0.05
"""The largest share of the event loop's time one monitor's ticks may take."""


class Ticking(Protocol):
    def tick(self, now: float) -> None: ...


class PacedTick:
    """``monitor.tick``, skipped until the time its last tick bought has passed.

    A tick's cost is the CPU time of the loop's thread (``cost_clock``), not the wall time it
    spanned: on a busy machine a tick preempted for 100 ms cost the loop nothing, and a straggler
    verdict due within a second must not wait two for it."""

    __slots__ = ("monitor", "due", "_share", "_clock", "_cost_clock")

    def __init__(self, monitor: Ticking, share: float = LOOP_SHARE,
                 clock: Callable[[], float] = time.monotonic,
                 cost_clock: Callable[[], float] = time.thread_time) -> None:
        self.monitor = monitor
        self.due = 0.0
        """The reading of ``clock`` before which the monitor is not ticked."""
        self._share = share
        self._clock = clock
        self._cost_clock = cost_clock

    def tick(self, now: float) -> bool:
        """Tick the monitor if it is due (``now``: the wall clock it is given); True if it ran."""
        started = self._clock()
        if started < self.due:
            return False
        cost_before = self._cost_clock()
        try:
            self.monitor.tick(now)
        finally:
            self.due = started + (self._cost_clock() - cost_before) / self._share
        return True
