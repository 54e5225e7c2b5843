"""How a rank moves, as the stall monitor sees it when a stack capture or a Flight Recorder comparison is taken.

``StallMonitor.progress_of`` makes one per rank; the capture keeps them
(``progress`` in its JSON), ``hang_verdict`` never blames a rank that progresses,
and the Flight Recorder comparison skips the collectives of ranks that all move.
"""

from __future__ import annotations

from dataclasses import dataclass

from runner.runstate.messages import JsonObject


@dataclass(frozen=True)
class RankProgress:
    """``progressing``: None when unknown (no step yet, or no step telemetry)."""

    step: int | None
    idle_seconds: float | None
    """Seconds since its step last moved, rounded to 0.1 s."""
    stalled: bool
    progressing: bool | None

    def to_json(self) -> JsonObject:
        return {"step": self.step, "idle_seconds": self.idle_seconds, "stalled": self.stalled,
                "progressing": self.progressing}

