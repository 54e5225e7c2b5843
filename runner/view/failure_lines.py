"""What of a failure's output the terminal shows: Rankwatch's summary, not three reports of it.

When a rank fails, torchrun SIGTERMs the others and then reports the failure itself: a
``ChildFailedError`` traceback and its "Root Cause" box, some sixty lines; the survivors
may print their own traceback that only says a peer went away (gloo's "Connection closed
by peer"). All of it came before Rankwatch's summary, which says the same in a few lines.
Every line is still stored (``rankwatch runs logs N --launcher``, ``--rank R``); on the
terminal:

* ``LauncherQuiet``: torchrun's own lines are not shown once a rank has failed, or once
  torchrun itself starts reporting a failure; a line under the summary says where they are.
* ``EchoTracebacks``: after a failure, a rank's traceback is held until its last line; if
  that only says a peer went away (``runner.exit_status.only_says_peer_gone``), the
  traceback is one line naming the exception, for the first ``SHOWN_PER_BURST`` ranks (at
  1,024 ranks there are a thousand such echoes); a line under the summary names every rank
  whose traceback it was and where the rest is.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from runner.exit_status import only_says_peer_gone
from runner.view.bursts import SHOWN_PER_BURST

TORCHRUN_REPORTS_A_FAILURE = re.compile(
    r"failed \(exitcode: |closing signal SIG|Traceback \(most recent call last\)|ChildFailedError")
"""torchrun's own lines once a worker failed (its notices, then the traceback it ends with). Not
"Received 15 death signal": torchrun itself was signalled, which nothing else may explain."""
TRACEBACK_START = "Traceback (most recent call last):"
CHAINED = ("During handling of the above exception", "The above exception was the direct cause")
MAX_HELD_LINES = 400
"""A traceback longer than this is shown as it is (something else is going on)."""


class LauncherQuiet:
    """Decides whether the terminal shows a line of torchrun's own, and counts those it does not."""

    def __init__(self) -> None:
        self.reporting = False
        """torchrun began to report a failure: its following lines are that report."""
        self.hidden = 0

    def hides(self, text: str, a_rank_failed: bool) -> bool:
        if not self.reporting and TORCHRUN_REPORTS_A_FAILURE.search(text):
            self.reporting = True
        if a_rank_failed or self.reporting:
            self.hidden += 1
            return True
        return False


@dataclass
class HeldLine:
    text: str
    stream: str


@dataclass
class _Traceback:
    lines: list[HeldLine] = field(default_factory=list)


class EchoTracebacks:
    """Per rank: holds a traceback that starts after a failure until its exception line, then
    gives back either the whole traceback or, for an echo of a peer's end, one line."""

    def __init__(self, shown_ranks: int = SHOWN_PER_BURST) -> None:
        self._held: dict[int, _Traceback] = {}
        self.collapsed: dict[int, int] = {}
        """rank -> lines of echo tracebacks not shown."""
        self.shown_ranks = shown_ranks
        """How many ranks' echoes get their one line; the others' none (``collapsed`` names them all)."""
        self._given_a_line: set[int] = set()

    def feed(self, rank: int, text: str, stream: str, after_failure: bool) -> list[HeldLine]:
        """The lines to show now for this line of ``rank`` (torch's ``[rankN]:`` prefix already gone)."""
        held = self._held.get(rank)
        if held is None:
            if after_failure and text.startswith(TRACEBACK_START):
                self._held[rank] = _Traceback([HeldLine(text, stream)])
                return []
            return [HeldLine(text, stream)]
        held.lines.append(HeldLine(text, stream))
        if not _ends_a_traceback(text) and len(held.lines) < MAX_HELD_LINES:
            return []
        del self._held[rank]
        if _ends_a_traceback(text) and only_says_peer_gone(text):
            self.collapsed[rank] = self.collapsed.get(rank, 0) + len(held.lines)
            if rank in self._given_a_line or len(self._given_a_line) < self.shown_ranks:
                self._given_a_line.add(rank)
                return [HeldLine(text, stream)]
            return []
        return held.lines

    def flush(self) -> list[tuple[int, HeldLine]]:
        """Every line still held (the run ended before a traceback did)."""
        out = [(rank, line) for rank, held in self._held.items() for line in held.lines]
        self._held.clear()
        return out


def _ends_a_traceback(text: str) -> bool:
    """The exception's own line: the first that is not a frame (indented), not blank, and not the
    words that join chained tracebacks."""
    return bool(text) and not text[0].isspace() and not text.startswith((TRACEBACK_START, *CHAINED))
