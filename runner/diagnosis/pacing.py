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
    """``monitor.tick``, skipped until the time its last tick bought has passed."""

    __slots__ = ("monitor", "due", "_share", "_clock")

    def __init__(self, monitor: Ticking, share: float = LOOP_SHARE,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.monitor = monitor
        self.due = 0.0
        """The loop clock's reading before which the monitor is not ticked."""
        self._share = share
        self._clock = clock

    def tick(self, now: float) -> bool:
        """Tick the monitor if it is due (``now``: the wall clock it is given); True if it ran."""
        started = self._clock()
        if started < self.due:
            return False
        try:
            self.monitor.tick(now)
        finally:
            self.due = started + (self._clock() - started) / self._share
        return True
