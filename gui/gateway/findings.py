"""What the runner's monitors found, typed, for the GUI's diagnosis (``runner.diagnosis``).

``FindingEvents`` decodes each event a monitor publishes (a stall, a straggler, a stack
capture, a lost node...) into the runner's own type for it, once, here: the GUI reads no
event or finding by string key. The types it returns are the runner's (``StallEvent``,
``StragglerRecord`` / ``StragglerWithdrawn`` and its ``StragglerCause``, ``Divergence``,
``CaptureRecord`` with its ``SourceFrame`` s, ``LauncherFinding``, ``NodeLost``,
``EarlyFailure``, ``BottleneckRecord``), as is ``StoredDiagnostics``: the findings as a finished
run's summary keeps them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rankwatch.protocol import Event
from runner.diagnosis.bottleneck_record import BottleneckRecord
from runner.diagnosis.finding_events import EarlyFailure, NodeLost, StallEvent
from runner.diagnosis.findings import Divergence, LauncherFinding, StoredDiagnostics
from runner.diagnosis.flight_recorder import FlightRecorderFinding
from runner.diagnosis.stacks import CaptureRecord, SourceFrame, is_capture
from runner.diagnosis.straggler_record import (
    StragglerCause,
    StragglerRecord,
    StragglerWithdrawn,
    straggler_of,
)
from runner.runstate.messages import ResumedFields, RunFinishedFields, fields_of

__all__ = [
    "BottleneckRecord",
    "CaptureRecord",
    "Divergence",
    "EarlyFailure",
    "FindingEvents",
    "LauncherFinding",
    "NodeLost",
    "SourceFrame",
    "StallEvent",
    "StoredDiagnostics",
    "StragglerCause",
    "StragglerRecord",
    "StragglerWithdrawn",
]


class FindingEvents:
    """Each monitor's event (``Event``, of the kind the method names) as the runner's type for it.

    The decoding is the runner's, as lenient as the hub's: a field missing or of the wrong type
    reads as not known, never as an error.
    """

    @staticmethod
    def stall(event: Event) -> StallEvent:
        """A ``stalled`` event: the rank, the step it stopped at, since when."""
        return StallEvent.from_event(event)

    @staticmethod
    def resumed_step(event: Event) -> int | None:
        """The step a ``resumed`` rank made (``None`` when the event does not say)."""
        resumed = fields_of(event)
        return resumed.step if isinstance(resumed, ResumedFields) else None

    @staticmethod
    def straggler(event: Event) -> StragglerRecord | StragglerWithdrawn:
        """A ``straggler`` event: a rank named one, or no longer one (withdrawn)."""
        return straggler_of(event)

    @staticmethod
    def divergence(event: Event) -> Divergence:
        """A ``divergence`` event (replicas whose parameters differ), its message kept."""
        return Divergence.from_wire({**event.fields, "message": event.message})

    @staticmethod
    def capture(event: Event) -> CaptureRecord | None:
        """A ``stacks`` event's cross-rank analysis; ``None`` for a per-rank "dump written" one."""
        return CaptureRecord.from_wire({**event.fields, "t": event.t}) if is_capture(event.fields) else None

    @staticmethod
    def capture_file(data: object) -> CaptureRecord | None:
        """A capture as its JSON file holds it; ``None`` when the file holds something else."""
        return CaptureRecord.from_wire(data) if isinstance(data, dict) and is_capture(data) else None

    @staticmethod
    def flight_recorder_culprits(event: Event) -> tuple[int, ...]:
        """The ranks a ``flight_recorder`` event (collectives compared after a capture) blames."""
        return tuple(FlightRecorderFinding.from_wire(event.fields).culprits)

    @staticmethod
    def launcher(event: Event) -> LauncherFinding:
        """A ``launch_mismatch`` event: how the script was launched does not fit torchrun."""
        return LauncherFinding.from_wire(event.fields)

    @staticmethod
    def node_lost(event: Event) -> NodeLost:
        """A ``node_lost`` event: which node, and what was said of it."""
        return NodeLost.from_event(event)

    @staticmethod
    def early_failure(event: Event) -> EarlyFailure:
        """A ``rank_failed``, ``exception`` or ``connection_lost`` event, before the triage."""
        return EarlyFailure.from_event(event)

    @staticmethod
    def bottleneck(event: Event) -> BottleneckRecord:
        """A ``bottleneck`` event: the live verdict on what bounds the steps."""
        return BottleneckRecord.from_event(event)

    @staticmethod
    def finished_summary(event: Event) -> Mapping[str, Any] | None:
        """The triage summary a ``run_finished`` event carries (as sent), ``None`` without one."""
        finished = fields_of(event)
        return finished.summary if isinstance(finished, RunFinishedFields) else None
