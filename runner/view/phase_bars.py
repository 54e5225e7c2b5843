"""Where each rank's steps went, as text: a stacked bar and the share of each phase.

One wording for ``rankwatch runs show``, the end of ``rankwatch run`` and the live terminal
view (``protocol.PHASES``, on the steps' own clock)::

    rank 0  [dddhFFFFFFBBBBBBBBBBBBcOO·]  data 9 %  h2d 2 %  forward 25 %  ...

A phase that never happened is "–" and has no letters; the letters add up to the bar (each
phase rounded, the largest remainders first), so a straggler's longer forward shows as more F.
"""

from __future__ import annotations

import statistics

from rankwatch import protocol
from runner.format import MISSING, format_percent

LETTERS = {"data": "d", "h2d": "h", "forward": "F", "backward": "B", "comm": "c", "optimizer": "O", "rest": "·"}
BAR_WIDTH = 24
CLOCK_WORDS = {protocol.CLOCK_GPU: "the GPU's clock", protocol.CLOCK_CPU: "the CPU's clock"}


def phase_bar(shares: dict[str, float | None] | None, width: int = BAR_WIDTH) -> str:
    """``[dddFFFFBBBBBBcO·]``: each phase's share of ``width`` letters; blank when not measured."""
    if not shares:
        return "[" + " " * width + "]"
    exact = {phase: (shares.get(phase) or 0.0) * width for phase in protocol.PHASES}
    cells = {phase: int(value) for phase, value in exact.items()}
    left = width - sum(cells.values())
    for phase in sorted(exact, key=lambda phase: exact[phase] - cells[phase], reverse=True)[:max(0, left)]:
        cells[phase] += 1
    return "[" + "".join(LETTERS[phase] * cells[phase] for phase in protocol.PHASES) + "]"


def phase_shares_text(shares: dict[str, float | None] | None) -> str:
    """``data 9 %  h2d 2 %  forward 25 % ...`` ("–" for a phase that never happened)."""
    if not shares:
        return MISSING
    return "  ".join(f"{phase} {format_percent(shares.get(phase))}" for phase in protocol.PHASES)


def phase_lines(rows: list[tuple[int, dict[str, float | None] | None]], clocks: set[str | None],
                steps: int | None = None, median_of: list[dict[str, float | None] | None] | None = None
                ) -> list[str]:
    """A heading and one line per rank that has phases: ``rank 0  [bar]  data 9 %  ...``; with
    ``median_of`` (every rank's shares, when ``rows`` are only some ranks), first a line of each
    phase's median across those ranks, the job's typical step."""
    measured = [(rank, shares) for rank, shares in rows if shares]
    every = [shares for shares in median_of or () if shares]
    if not measured and not every:
        return []
    known = sorted(CLOCK_WORDS[clock] for clock in clocks if clock in CLOCK_WORDS)
    on = f" on {' and '.join(known)}" if known else ""
    timed = f", {steps} timed steps" if steps else ""
    digits = max((len(str(rank)) for rank, _shares in measured), default=1)
    labelled = [(f"rank {str(rank).rjust(digits)}", shares) for rank, shares in measured]
    if every:
        median = {phase: _median([shares.get(phase) for shares in every]) for phase in protocol.PHASES}
        labelled.insert(0, (f"median of {len(every):,} ranks", median))
    width = max(len(label) for label, _shares in labelled)
    legend = "  ".join(f"{letter} {phase}" for phase, letter in LETTERS.items())
    lines = [f"where the steps went{on}{timed} ({legend}):"]
    lines += [f"{label.rjust(width)}  {phase_bar(shares)}  {phase_shares_text(shares)}" for label, shares in labelled]
    return lines


def _median(values: list[float | None]) -> float | None:
    known = sorted(value for value in values if value is not None)
    return statistics.median(known) if known else None
