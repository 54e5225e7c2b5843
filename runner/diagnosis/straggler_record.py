"""A straggler finding as one typed value: what its ``straggler`` event carries and the summary keeps.

``runner.diagnosis.stragglers`` names a rank (an event ``straggler`` with ``active: true``),
withdraws it (``active: false``) and, at the end, keeps the ranks named for a share of their
steps in the summary's ``diagnostics.stragglers``. These are the values it builds; ``to_wire``
writes the JSON the dicts before them wrote, key for key and in the same order (the GUI, the
terminal view and stored runs read it; ``tests/diagnosis/test_finding_json.py`` pins it).

``from_wire`` and ``from_event`` read what this version or an earlier one stored, leniently:
a key that is missing or of the wrong type is None (not measured, not known).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

from rankwatch.protocol import Event, as_float, as_int
from runner.runstate.messages import JsonObject


class StragglerCause(str, Enum):
    """Why a straggler holds the others up: it waits for its data, or it computes longer."""

    DATA = "data"
    COMPUTE = "compute"

    @classmethod
    def of(cls, value: object) -> StragglerCause | None:
        """The cause a stored record names; None when it names none this version knows."""
        try:
            return cls(value)
        except ValueError:
            return None


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None


@dataclass(frozen=True)
class StragglerRecord:
    """A rank named a straggler: its step, its medians against the other ranks' and the margin its
    excess beat (``runner.diagnosis.stragglers``'s module docstring). As the summary keeps it, it also
    has its ``message`` and how many of its steps it was named for (``held_steps``, ``steps``,
    ``share``): None where the event does not carry them (``to_wire`` leaves them out then)."""

    rank: int | None
    cause: StragglerCause | None
    phase: str | None = None
    """``data``, or the compute phase it exceeds the others in most (None without phases)."""
    step: int | None = None
    """The rank's last step when it was judged."""
    since_step: int | None = None
    """The first step of the window where the finding began."""
    step_time: float | None = None
    data_wait: float | None = None
    """None: not measured (fewer than ``MIN_STEPS`` of the window)."""
    compute_time: float | None = None
    others_step_time: float | None = None
    others_data_wait: float | None = None
    others_compute_time: float | None = None
    excess: float | None = None
    """Seconds per step more than the others' median."""
    margin: float | None = None
    window: int | None = None
    """Measured steps per window."""
    message: str | None = None
    """The finding's words (the event's message is the event's own)."""
    held_steps: int | None = None
    """Steps it was named for (from the window where it began to the one where it recovered)."""
    steps: int | None = None
    """Its steps in the whole run (``conclude``)."""
    share: float | None = None
    """``held_steps / steps`` (``conclude``)."""

    def measures(self) -> JsonObject:
        """The judged values, as the ``straggler`` event carries them after ``active`` (no rank)."""
        return {"cause": None if self.cause is None else self.cause.value, "phase": self.phase, "step": self.step,
                "since_step": self.since_step, "step_time": self.step_time, "data_wait": self.data_wait,
                "compute_time": self.compute_time, "others_step_time": self.others_step_time,
                "others_data_wait": self.others_data_wait, "others_compute_time": self.others_compute_time,
                "excess": self.excess, "margin": self.margin, "window": self.window}

    def event_fields(self) -> JsonObject:
        """The fields of the ``straggler`` event that names the rank (its rank and message are the event's)."""
        return {"active": True, **self.measures()}

    def to_wire(self) -> JsonObject:
        """The finding as ``diagnostics.stragglers`` keeps it."""
        data: JsonObject = {"rank": self.rank, **self.measures()}
        counts = {"message": self.message, "held_steps": self.held_steps, "steps": self.steps, "share": self.share}
        data.update((key, value) for key, value in counts.items() if value is not None)
        return data

    @classmethod
    def from_wire(cls, data: Mapping[str, Any]) -> StragglerRecord:
        """A finding as stored (``to_wire``), or an event's fields with its rank and message."""
        return cls(rank=as_int(data.get("rank")), cause=StragglerCause.of(data.get("cause")),
                   phase=_text(data.get("phase")), step=as_int(data.get("step")),
                   since_step=as_int(data.get("since_step")), step_time=as_float(data.get("step_time")),
                   data_wait=as_float(data.get("data_wait")), compute_time=as_float(data.get("compute_time")),
                   others_step_time=as_float(data.get("others_step_time")),
                   others_data_wait=as_float(data.get("others_data_wait")),
                   others_compute_time=as_float(data.get("others_compute_time")),
                   excess=as_float(data.get("excess")), margin=as_float(data.get("margin")),
                   window=as_int(data.get("window")), message=_text(data.get("message")) or None,
                   held_steps=as_int(data.get("held_steps")), steps=as_int(data.get("steps")),
                   share=as_float(data.get("share")))

    @classmethod
    def from_event(cls, event: Event) -> StragglerRecord:
        """A ``straggler`` event that names a rank."""
        return cls.from_wire({**event.fields, "rank": event.rank, "message": event.message})


@dataclass(frozen=True)
class StragglerWithdrawn:
    """A named rank no longer beats the noise (``straggler`` with ``active: false``)."""

    rank: int | None
    step: int | None
    """Its last step when it was withdrawn."""
    held_steps: int | None
    """The steps it was named for, all its namings together."""
    message: str = ""

    def event_fields(self) -> JsonObject:
        return {"active": False, "step": self.step, "held_steps": self.held_steps}

    @classmethod
    def from_event(cls, event: Event) -> StragglerWithdrawn:
        return cls(rank=event.rank, step=as_int(event.fields.get("step")),
                   held_steps=as_int(event.fields.get("held_steps")), message=event.message)


def straggler_of(event: Event) -> StragglerRecord | StragglerWithdrawn:
    """A ``straggler`` event, typed: a rank named (``active``, the default of older events) or withdrawn."""
    if event.fields.get("active", True):
        return StragglerRecord.from_event(event)
    return StragglerWithdrawn.from_event(event)
