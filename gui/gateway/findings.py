"""What the runner's monitors found, typed, for the GUI's diagnosis (``runner.diagnosis``).

The findings as a stored summary keeps them (``StoredDiagnostics``: stalls, stacks, Flight
Recorder, launcher mismatches, stragglers, the bottleneck verdict, divergences) and the events
they are published in, decoded once by the runner's own types: the GUI reads no event or
finding by string key. Only this gateway package reaches into ``runner``.
"""

from __future__ import annotations

from runner.diagnosis.bottleneck_record import BottleneckRecord, BottleneckVerdict
from runner.diagnosis.finding_events import EarlyFailure, NodeLost, StallEvent
from runner.diagnosis.findings import (
    Divergence,
    LauncherFinding,
    StacksFinding,
    StallFinding,
    StoredDiagnostics,
)
from runner.diagnosis.flight_recorder import FlightRecorderFinding
from runner.diagnosis.hang_verdict import HangVerdict, VerdictLevel
from runner.diagnosis.stacks import CaptureRecord, MissingStack, SourceFrame, StackGroup, is_capture
from runner.diagnosis.straggler_record import (
    StragglerCause,
    StragglerRecord,
    StragglerWithdrawn,
    straggler_of,
)
from runner.runstate.messages import ResumedFields, RunFinishedFields, fields_of

__all__ = [
    "BottleneckRecord",
    "BottleneckVerdict",
    "CaptureRecord",
    "Divergence",
    "EarlyFailure",
    "FlightRecorderFinding",
    "HangVerdict",
    "LauncherFinding",
    "MissingStack",
    "NodeLost",
    "ResumedFields",
    "RunFinishedFields",
    "SourceFrame",
    "StackGroup",
    "StacksFinding",
    "StallEvent",
    "StallFinding",
    "StoredDiagnostics",
    "StragglerCause",
    "StragglerRecord",
    "StragglerWithdrawn",
    "VerdictLevel",
    "fields_of",
    "is_capture",
    "straggler_of",
]
