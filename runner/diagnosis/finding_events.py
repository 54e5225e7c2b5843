"""The fields of the events a diagnosis is read from, typed, for the kinds no finding type covers.

A straggler, a bottleneck verdict, a divergence, a launcher mismatch, a Flight Recorder
comparison and a stack capture are read back through their own types (``straggler_record``,
``bottleneck_record``, ``findings``, ``flight_recorder``, ``stacks``). These are the rest a
reader of the events needs: a stall as its event says it, a node lost, and what a failing rank
says before triage names the first failure. Lenient like every reader of stored events: a field
that is missing or of the wrong type is None.
"""

from __future__ import annotations

from dataclasses import dataclass

from rankwatch.protocol import Event, EventKind, as_float, as_int
from runner.exit_status import ended_by


@dataclass(frozen=True)
class StallEvent:
    """``stalled`` (``runner.diagnosis.stalls``): a rank without progress for too long."""

    rank: int | None
    t: float
    message: str
    step: int | None
    """The step it is stuck at; None: before its first step."""
    seconds: float | None
    """How long without progress when it was flagged."""
    threshold: float | None
    last_progress: float | None
    """When it last made progress (seconds since 1970)."""

    @classmethod
    def from_event(cls, event: Event) -> StallEvent:
        fields = event.fields
        return cls(rank=event.rank, t=event.t, message=event.message, step=as_int(fields.get("step")),
                   seconds=as_float(fields.get("seconds")), threshold=as_float(fields.get("threshold")),
                   last_progress=as_float(fields.get("last_progress")))

    def stalled_for(self, now: float) -> float:
        """Seconds without progress at ``now``: since its last progress, else as flagged plus the time since."""
        if self.last_progress is not None:
            return max(0.0, now - self.last_progress)
        return (self.seconds or 0.0) + max(0.0, now - self.t)


@dataclass(frozen=True)
class NodeLost:
    """``node_lost`` (several nodes): a node whose agent went away."""

    node_rank: int | None
    t: float
    message: str

    @classmethod
    def from_event(cls, event: Event) -> NodeLost:
        return cls(as_int(event.fields.get("node_rank")), event.t, event.message)


@dataclass(frozen=True)
class EarlyFailure:
    """What is known of a failure before triage names the first one: ``exception``, ``rank_failed`` or
    ``connection_lost``."""

    kind: EventKind
    rank: int | None
    t: float
    message: str
    exc_type: str | None = None
    exit_code: int | None = None
    fatal: bool = True
    """An exception that ended the rank (``exception``); older events say so in this field."""

    @classmethod
    def from_event(cls, event: Event) -> EarlyFailure:
        fields = event.fields
        exc_type = fields.get("exc_type")
        return cls(event.kind, event.rank, event.t, event.message, exc_type if isinstance(exc_type, str) else None,
                   as_int(fields.get("exit_code")), bool(fields.get("fatal", True)))

    @property
    def text(self) -> str:
        """``rank 1 raised ValueError: ...``, ``rank 0 failed (exit code 1)``, ``rank 1 disconnected ...``."""
        if self.kind == EventKind.EXCEPTION:
            return f"rank {self.rank} raised {self.message or self.exc_type or 'an exception'}"
        if self.kind == EventKind.CONNECTION_LOST:
            return f"rank {self.rank} disconnected without an exit message (killed?)"
        return f"rank {self.rank} failed" + (f" ({ended_by(self.exit_code)})" if self.exit_code is not None else "")
