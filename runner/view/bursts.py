"""Many ranks saying the same thing at once: the first few lines, then one line with a count.

At 1,024 ranks one failure makes the other 1,023 stop after it (an event each, and a traceback
each that only says a peer went away), and a hang flags every rank as stalled within a tick or
two. Line by line that is a thousand lines, and the first failure scrolls off the screen.
``Bursts`` lets the terminal show the first ``SHOWN_PER_BURST`` lines of one kind as they come
and hold the rest; once the kind has been quiet for ``QUIET_SECONDS`` (or the run ended) it
says them in one line, their ranks as ranges: ``1,021 more: ranks 3-1023 stopped after rank 1
failed``. Nothing is lost: every event is stored (``rankwatch runs show N``), and the summary
groups the ranks that ended alike.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field

from rankwatch.protocol import EventKind
from runner.format import ranks_text

__all__ = ["QUIET_SECONDS", "SHOWN_PER_BURST", "BurstLine", "Bursts", "burst_of"]

SHOWN_PER_BURST = 3
"""Lines of one kind shown as they come before the rest of the burst is held and counted: enough
to see what is going on and whether it is more than one rank, few enough to keep the screen."""
QUIET_SECONDS = 2.0
"""A kind with no new line for this long has ended its burst: its held ranks are said then."""


SAME_WORDS = {EventKind.STALLED: "stalled", EventKind.RESUMED: "resumed", EventKind.RANK_FAILED: "failed",
              EventKind.CONNECTION_LOST: "disconnected",
              EventKind.RECORDS_REJECTED: "dropped records the store cannot hold"}
"""Kinds whose lines differ from rank to rank only in figures (seconds, steps, exit codes): one
burst per kind, said in these words."""


@dataclass(frozen=True)
class BurstLine:
    """A rank's line that belongs to a burst."""

    key: Hashable
    """Tells bursts apart: what was said, not who said it."""
    rank: int
    words: str
    """What the rank did, without its name, for the count line should this line be held."""


def burst_of(kind: EventKind, rank: int | None, message: str) -> BurstLine | None:
    """The burst an event's line belongs to and the words its count line says, or None for a line
    that is always shown (it is about no rank, or its words are the rank's own). Other kinds group
    the lines that say the same after the rank's name: ``rank 7 stopped after rank 1 failed``."""
    if rank is None:
        return None
    if kind in SAME_WORDS:
        return BurstLine(kind, rank, SAME_WORDS[kind])
    own = f"rank {rank} "
    if not message.startswith(own):
        return None
    words = message[len(own):]
    return BurstLine((kind, words), rank, words)


@dataclass
class _Burst:
    words: str
    """What every held rank did, without the rank: ``stopped after rank 1 failed``."""
    last: float
    shown: int = 0
    held: list[int] = field(default_factory=list)


class Bursts:
    """Which per-rank lines of a kind to show, and the count lines for those it held."""

    def __init__(self, shown: int = SHOWN_PER_BURST, quiet_seconds: float = QUIET_SECONDS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.shown = shown
        self.quiet_seconds = quiet_seconds
        self._clock = clock
        self._bursts: dict[Hashable, _Burst] = {}

    def admit(self, line: BurstLine) -> bool:
        """Whether to show this line now (else it is held, to be counted)."""
        now = self._clock()
        burst = self._bursts.get(line.key)
        if burst is None or (now - burst.last >= self.quiet_seconds and not burst.held):
            burst = self._bursts[line.key] = _Burst(line.words, now)
        burst.last = now
        if burst.shown < self.shown:
            burst.shown += 1
            return True
        burst.held.append(line.rank)
        return False

    def ended(self) -> list[str]:
        """The count lines of the bursts that have been quiet for ``quiet_seconds``; each is said once."""
        now = self._clock()
        return self._say([key for key, burst in self._bursts.items()
                          if burst.held and now - burst.last >= self.quiet_seconds])

    def flush(self) -> list[str]:
        """The count lines of every burst still holding ranks (the run ended)."""
        return self._say([key for key, burst in self._bursts.items() if burst.held])

    def _say(self, keys: list[Hashable]) -> list[str]:
        lines = []
        for key in keys:
            burst = self._bursts.pop(key)
            lines.append(f"{len(burst.held):,} more: {ranks_text(burst.held)} {burst.words}")
        return lines
