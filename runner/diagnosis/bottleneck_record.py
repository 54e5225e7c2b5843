"""The bottleneck verdict as typed values: one rank's or the run's, and the run's with every rank's.

``runner.diagnosis.bottleneck`` judges (``judge``) and publishes the run's verdict in a
``bottleneck`` event whenever it changes; at the end the whole run's verdict goes into the
summary's ``diagnostics.bottleneck``. ``to_wire`` and ``event_fields`` write the JSON the dicts
before these types wrote, key for key and in the same order (``tests/diagnosis/test_finding_json.py``).
``from_wire`` and ``from_event`` read it back leniently: a verdict this version does not know is
"not determined", a key that is missing or of the wrong type is None.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from rankwatch.protocol import Bottleneck, Event, as_float, as_int
from runner.runstate.messages import JsonObject


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _shares(value: object) -> dict[str, float | None] | None:
    if not isinstance(value, Mapping):
        return None
    return {str(phase): as_float(share) for phase, share in value.items()}


@dataclass(frozen=True)
class BottleneckVerdict:
    """A verdict with its evidence; ``kind`` None: not determined, and ``evidence`` says why in a
    sentence that begins with it ("not measured: ..." or "not determined: ..."): readers print it
    as it is, never behind words of their own that would say it twice."""

    kind: Bottleneck | None
    evidence: str
    action: str | None = None
    rank: int | None = None
    """The straggler."""
    phase: str | None = None
    """The phase that names it (a straggler's; the dominant phase otherwise)."""
    shares: dict[str, float | None] | None = None
    clock: str | None = None
    gpu_busy: float | None = None
    steps: int = 0

    @property
    def words(self) -> str:
        return "not determined" if self.kind is None else self.kind.value

    def to_wire(self) -> JsonObject:
        return {"verdict": None if self.kind is None else self.kind.value, "evidence": self.evidence,
                "action": self.action, "rank": self.rank, "phase": self.phase, "shares": self.shares,
                "clock": self.clock, "gpu_busy": self.gpu_busy, "steps": self.steps}

    @classmethod
    def from_wire(cls, data: Mapping[str, Any]) -> BottleneckVerdict:
        try:
            kind = Bottleneck(data.get("verdict")) if data.get("verdict") is not None else None
        except ValueError:
            kind = None  # a verdict of a newer Rankwatch: not one this version can explain
        return cls(kind=kind, evidence=str(data.get("evidence") or ""), action=_text(data.get("action")) or None,
                   rank=as_int(data.get("rank")), phase=_text(data.get("phase")) or None,
                   shares=_shares(data.get("shares")), clock=_text(data.get("clock")) or None,
                   gpu_busy=as_float(data.get("gpu_busy")), steps=as_int(data.get("steps")) or 0)


@dataclass(frozen=True)
class BottleneckRecord:
    """The run's verdict with its words and each rank's own verdict: the live ``bottleneck`` event
    (the verdict's rank is the event's) and the whole run's in ``diagnostics.bottleneck``."""

    verdict: BottleneckVerdict
    message: str | None
    """``input-bound: waiting for data 45% of the step (...)``, as the terminal prints it."""
    ranks: dict[int, BottleneckVerdict] = field(default_factory=dict)

    def _ranks_wire(self) -> JsonObject:
        return {str(rank): self.ranks[rank].to_wire() for rank in sorted(self.ranks)}

    def to_wire(self) -> JsonObject:
        """As the summary keeps it: the verdict's keys, ``message``, then ``ranks`` (keyed by text)."""
        return {**self.verdict.to_wire(), "message": self.message, "ranks": self._ranks_wire()}

    def event_fields(self) -> JsonObject:
        """The ``bottleneck`` event's fields: the verdict's keys but its rank (the event's own), then ``ranks``."""
        fields = {key: value for key, value in self.verdict.to_wire().items() if key != "rank"}
        return {**fields, "ranks": self._ranks_wire()}

    @classmethod
    def from_wire(cls, data: Mapping[str, Any]) -> BottleneckRecord:
        found = data.get("ranks")
        ranks = {int(key): BottleneckVerdict.from_wire(value)
                 for key, value in (found.items() if isinstance(found, Mapping) else ())
                 if str(key).isdigit() and isinstance(value, Mapping)}  # JSON object keys: "0", "1", ...
        return cls(BottleneckVerdict.from_wire(data), _text(data.get("message")), ranks)

    @classmethod
    def from_event(cls, event: Event) -> BottleneckRecord:
        return cls.from_wire({**event.fields, "rank": event.rank, "message": event.message})
