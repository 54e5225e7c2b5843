"""Where each rank's steps go: the phase bars' view model, Qt-free.

Each optimizer step's time is cut into phases on the device's own clock
(``rankwatch.protocol.PHASES``: data, h2d, forward, backward, comm, optimizer, rest). The
hub keeps each rank's shares of its recent measured steps (``RankRow.phase_shares``,
computed once by ``protocol.PhaseWindow``); the store's whole-run figures
(``runner.store.rank_stats``, read through ``StoreReads.rank_results``) have
each rank's shares over every timed step. This module turns either into what the rank
table's bar column draws: one segment per measured phase, in ``PHASES`` order (the
terminal's ``runner.view.phase_bars`` order), and the tooltip's text.

Rules (principle 0, truth): a phase that never happened (None) has no segment and reads "–";
a rank without a measured step has no bar at all; the clock is named ("GPU clock" or "CPU
clock"), since a CPU-thread time is never GPU work. While a rank runs the bar is its recent
steps; once it ended and the run's figures were read, its whole run (as the timing columns).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from gui.gateway.run_state import RankInfo
from gui.models import NOT_MEASURED
from rankwatch import protocol

if TYPE_CHECKING:
    from gui.gateway.store_reads import RankStats

PHASES = protocol.PHASES
PHASE_WORDS = {
    "data": "waiting for the DataLoader's next batch",
    "h2d": "from the batch to the first module call (copy to the device)",
    "forward": "forward pass, the loss included",
    "backward": "backward pass, until the rank's own gradients are done",
    "comm": "exposed communication: waiting in collectives that did not overlap",
    "optimizer": "inside optimizer.step",
    "rest": "everything else: zero_grad, clipping, logging, the loop",
}
"""What each phase holds (the legend's tooltips), in the contract's words."""
CLOCK_WORDS = {protocol.CLOCK_GPU: "GPU clock", protocol.CLOCK_CPU: "CPU clock"}
COMPUTE_PHASES = protocol.COMPUTING_PHASES
"""The phases a rank computes in (sorting the bar column orders the ranks by their sum)."""


def format_share(share: float | None) -> str:
    """``42 %``, ``<1 %`` for a phase that happened but rounds to nothing, "–" when not measured."""
    if share is None:
        return NOT_MEASURED
    percent = 100.0 * share
    if 0.0 < percent < 0.5:
        return "<1 %"
    return f"{percent:.0f} %"


@dataclass(frozen=True)
class Segment:
    """One phase's part of a bar: ``start`` and ``width`` as fractions (0..1) of the bar."""

    phase: str
    start: float
    width: float


@dataclass(frozen=True)
class RankPhases:
    """Where one rank's steps go, as the bar column shows it."""

    rank: int
    shares: dict[str, float | None] | None
    """Phase (``PHASES``) -> share of the steps' span; None before a measured step."""
    clock: str | None
    """``gpu``, ``cpu`` or None when unknown."""
    whole_run: bool = False
    """The shares are the whole run's (the rank ended and the run's figures were read)."""
    steps: int | None = None
    """How many timed steps the whole-run shares cover (None while live)."""

    @property
    def measured(self) -> bool:
        return bool(self.shares) and any(share is not None for share in (self.shares or {}).values())

    def share(self, phase: str) -> float | None:
        return None if not self.shares else self.shares.get(phase)

    def segments(self) -> list[Segment]:
        """The bar, left to right in ``PHASES`` order; no segment for a phase not measured or of
        no time. Widths are the shares, rescaled to fill the bar when rounding left a gap."""
        if not self.shares:
            return []
        parts = [(phase, share) for phase in PHASES
                 if (share := self.shares.get(phase)) is not None and share > 0.0]
        total = sum(share for _phase, share in parts)
        if total <= 0.0:
            return []
        segments, start = [], 0.0
        for phase, share in parts:
            width = share / total
            segments.append(Segment(phase, start, width))
            start += width
        return segments

    @property
    def clock_text(self) -> str:
        return CLOCK_WORDS.get(self.clock or "", "unknown clock")

    @property
    def compute_share(self) -> float | None:
        """The share the rank spent computing (``COMPUTE_PHASES``); None when not measured."""
        if not self.measured:
            return None
        return sum(self.share(phase) or 0.0 for phase in COMPUTE_PHASES)

    def text(self) -> str:
        """``forward 25 % · backward 40 % · ...`` (the cell's text: copy, accessibility)."""
        if not self.measured:
            return NOT_MEASURED
        return " · ".join(f"{phase} {format_share(self.share(phase))}" for phase in PHASES)

    def tooltip(self) -> str:
        """Every phase's share ("–" for one not measured), and on which clock and over what."""
        if not self.measured:
            return f"rank {self.rank}: where its steps go was not measured (no timed step yet)"
        if self.whole_run:
            over = f"its whole run ({self.steps} timed steps)" if self.steps else "its whole run"
        else:
            over = "its recent measured steps"
        lines = [f"rank {self.rank}, {over}, on the {self.clock_text}:"]
        lines += [f"{phase}: {format_share(self.share(phase))}" for phase in PHASES]
        return "\n".join(lines)


def rank_phases(row: RankInfo, result: RankStats | None = None, finished: bool = False) -> RankPhases:
    """A rank's phases: its recent steps' (the hub's row) while it runs; once it ended
    (``finished``) and the run's figures were read (``MonitorModel.rank_results``), its whole run's."""
    rank = row.rank
    if result is not None and finished and result.phase_shares:
        return RankPhases(rank, result.phase_shares, result.phase_clock or row.phase_clock,
                          whole_run=True, steps=result.measured_steps)
    return RankPhases(rank, row.phase_shares, row.phase_clock)


def clocks_text(rows: list[RankPhases]) -> str:
    """``CPU clock``, ``GPU clock``, ``GPU and CPU clocks`` (the ranks that measured), or empty."""
    clocks = sorted({row.clock for row in rows if row.measured and row.clock in CLOCK_WORDS})
    if not clocks:
        return ""
    if len(clocks) == 1:
        return CLOCK_WORDS[clocks[0]]
    return " and ".join(CLOCK_WORDS[clock].split()[0] for clock in reversed(clocks)) + " clocks"
