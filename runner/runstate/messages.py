"""What the hub publishes to its subscribers, typed: decoded once, here, for every reader.

The worker -> hub half of the contract is typed in ``rankwatch.protocol``; this module is the
hub -> subscriber half as the readers see it (the GUI's link, the terminal view, ``attach``,
``runs show``, ``stop``, ``stacks``). Records keep the contract's own types (``MetricRecord``,
``LogLine``, ``GpuSample``, ``ProcessSample``, ``Event`` with its ``EventKind``); the rows the
hub sends as JSON objects (the run, its ranks, its nodes) become the frozen dataclasses of
``runner.rows`` (re-exported here; the store's readers return them too).

Decoding is lenient, as the hub's own is: a field of the wrong type becomes ``None`` (not
measured), a key a newer hub adds is kept in ``extra`` so that nothing is lost on the way
through, and ``to_wire`` gives back what ``from_wire`` read.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

from rankwatch import protocol
from rankwatch.protocol import Event, EventKind, GpuSample, LogLine, MetricRecord, ProcessSample
from runner.rows import JsonObject, NodeInfo, RankInfo, Row, RunInfo, wire_float, wire_int

__all__ = [
    "EVENT_FIELDS",
    "Bye",
    "Event",
    "EventFields",
    "EventKind",
    "GpuSample",
    "HistoryEnd",
    "HubMessage",
    "JsonObject",
    "LaunchModeFields",
    "LogLine",
    "MetricItem",
    "MetricRecord",
    "NodeInfo",
    "ProcessSample",
    "RankInfo",
    "ResumedFields",
    "RunFinishedFields",
    "RunInfo",
    "SnapshotMessage",
    "StalledFields",
    "StoppingFields",
    "UpdateMessage",
    "decode_hub_line",
    "decode_hub_message",
    "fields_of",
]

_RowT = TypeVar("_RowT", bound=Row)

MetricItem = Sequence[Any]
"""A metric record as published: ``(rank, t, step, name, value, source)`` (``MetricRecord``, or
the list it is on the wire: 100k of them a second are not copied into tuples)."""


# ---- the fields of the event kinds their readers use, typed ------------------------------------

@dataclass(frozen=True)
class StoppingFields(Row):
    """``stopping``: who or what stops the run (``runner.exit_status.describe_stop_reason``)."""

    KINDS: ClassVar[dict[str, str]] = {"stopped_by": "str"}
    stopped_by: str | None = None


@dataclass(frozen=True)
class LaunchModeFields(Row):
    """``launch_mode``: how the script is started (``torchrun`` or ``self-spawn``), why, and who chose."""

    KINDS: ClassVar[dict[str, str]] = {"mode": "str", "reason": "str", "chosen_by": "str"}
    mode: str | None = None
    reason: str | None = None
    chosen_by: str | None = None


@dataclass(frozen=True)
class StalledFields(Row):
    """``stalled``: the step the rank is stuck at, for how long, and the threshold it passed."""

    KINDS: ClassVar[dict[str, str]] = {"seconds": "float", "threshold": "float"}
    step: int | None = None
    seconds: float | None = None
    threshold: float | None = None


@dataclass(frozen=True)
class ResumedFields(Row):
    """``resumed``: the step a stalled rank made, and how long it had stalled."""

    KINDS: ClassVar[dict[str, str]] = {"stalled_seconds": "float"}
    step: int | None = None
    stalled_seconds: float | None = None


@dataclass(frozen=True)
class RunFinishedFields(Row):
    """``run_finished``: the recorded status, exit code and triage summary."""

    KINDS: ClassVar[dict[str, str]] = {"status": "str", "summary": "summary"}
    status: str | None = None
    exit_code: int | None = None
    summary: JsonObject | None = None


EventFields = StoppingFields | LaunchModeFields | StalledFields | ResumedFields | RunFinishedFields
EVENT_FIELDS: dict[EventKind, type[EventFields]] = {
    EventKind.STOPPING: StoppingFields, EventKind.LAUNCH_MODE: LaunchModeFields, EventKind.STALLED: StalledFields,
    EventKind.RESUMED: ResumedFields, EventKind.RUN_FINISHED: RunFinishedFields,
}
"""The kinds whose fields a reader uses, typed; the others keep ``Event.fields`` as sent."""


def fields_of(event: Event) -> EventFields | None:
    """The event's own fields, typed, for the kinds in :data:`EVENT_FIELDS`; None for the others."""
    kind = EVENT_FIELDS.get(event.kind)
    return None if kind is None else kind.from_wire(event.fields)


def _rows(cls: type[_RowT], value: object) -> tuple[_RowT, ...]:
    rows = []
    for item in value if isinstance(value, list) else []:
        if isinstance(item, Mapping):
            try:
                rows.append(cls.from_wire(item))
            except ValueError:
                continue
    return tuple(rows)


@dataclass(frozen=True)
class SnapshotMessage:
    """The run as it is now: the first message a subscriber gets."""

    TYPE: ClassVar[str] = protocol.Snapshot.TYPE
    run: RunInfo | None
    ranks: tuple[RankInfo, ...] = ()
    nodes: tuple[NodeInfo, ...] = ()
    spec: Mapping[str, Any] = field(default_factory=dict)
    """The profile table the run was launched with."""

    @classmethod
    def from_wire(cls, data: Mapping[str, Any]) -> SnapshotMessage:
        run, spec = data.get("run"), data.get("spec")
        return cls(RunInfo.from_wire(run) if isinstance(run, Mapping) else None,
                   _rows(RankInfo, data.get("ranks")), _rows(NodeInfo, data.get("nodes")),
                   dict(spec) if isinstance(spec, Mapping) else {})

    def to_wire(self) -> JsonObject:
        return {"type": self.TYPE, "run": None if self.run is None else self.run.to_wire(),
                "ranks": [row.to_wire() for row in self.ranks], "nodes": [node.to_wire() for node in self.nodes],
                "spec": dict(self.spec)}


@dataclass(frozen=True)
class UpdateMessage:
    """What changed since the last update, or a chunk of the history replay. ``ranks`` and
    ``nodes`` are the rows as sent (the keys they carry replace the ones known); ``run`` is the
    RUN row's changed keys, None when it did not change."""

    TYPE: ClassVar[str] = protocol.Update.TYPE
    t: float = 0.0
    metrics: tuple[MetricItem, ...] = ()
    """``(rank, t, step, name, value, source)`` each (``MetricRecord``)."""
    logs: tuple[LogLine, ...] = ()
    events: tuple[Event, ...] = ()
    gpus: tuple[GpuSample, ...] = ()
    procs: tuple[ProcessSample, ...] = ()
    ranks: tuple[Mapping[str, Any], ...] = ()
    run: Mapping[str, Any] | None = None
    nodes: tuple[Mapping[str, Any], ...] = ()
    decimated: bool = False

    @classmethod
    def from_wire(cls, data: Mapping[str, Any]) -> UpdateMessage:
        """Logs, events and samples through the contract's own decoders
        (``rankwatch.protocol.Update.from_wire``: a malformed record is left out, an event of an
        unknown kind becomes a warning). Metrics, by far the most records, were validated by the
        hub that sent them: they are taken as they are."""
        update = protocol.Update.from_wire({key: value for key, value in data.items() if key != "metrics"})
        ranks = tuple(row for row in update.ranks if protocol.as_int(row.get("rank")) is not None)
        return cls(update.t, _metric_rows(data.get("metrics")), tuple(update.logs), tuple(update.events),
                   tuple(update.gpus), tuple(update.procs), ranks, update.run, tuple(update.nodes), update.decimated)

    def to_wire(self) -> JsonObject:
        return {"type": self.TYPE, "t": self.t, "metrics": [list(record) for record in self.metrics],
                "logs": [line.to_wire() for line in self.logs], "events": [event.to_wire() for event in self.events],
                "gpus": [sample.to_wire() for sample in self.gpus], "procs": [sample.to_wire() for sample in self.procs],
                "ranks": [dict(row) for row in self.ranks], "run": None if self.run is None else dict(self.run),
                "nodes": [dict(node) for node in self.nodes], "decimated": self.decimated}


def _metric_rows(value: object) -> tuple[MetricItem, ...]:
    """The hub validated each record before it stored and published it (``Metrics.from_wire``): they
    are taken as they come, 100k a second, and their readers unpack them as records."""
    return tuple(value) if isinstance(value, (list, tuple)) else ()


@dataclass(frozen=True)
class HistoryEnd:
    """The stored history was replayed; live updates follow. A replay is bounded: ``decimated``
    says older metrics came thinned (each bucket's low and high), ``left_out`` counts the stored
    rows of each table that were not sent (the oldest log lines, events, samples)."""

    TYPE: ClassVar[str] = protocol.HistoryEnd.TYPE
    decimated: bool = False
    left_out: dict[str, int] = field(default_factory=dict)
    stored_through: dict[str, int] | None = None
    """To a subscriber that reads the history from the store (``Subscribe.from_store``): the last
    row of each table before the live updates (``protocol.HistoryEnd.stored_through``)."""

    @classmethod
    def from_wire(cls, data: Mapping[str, Any]) -> HistoryEnd:
        wire = protocol.HistoryEnd.from_wire(dict(data))
        return cls(wire.decimated, dict(wire.left_out),
                   None if wire.stored_through is None else dict(wire.stored_through))

    def to_wire(self) -> JsonObject:
        wire: JsonObject = {"type": self.TYPE}
        if self.decimated:
            wire["decimated"] = True
        if self.left_out:
            wire["left_out"] = dict(self.left_out)
        if self.stored_through is not None:
            wire["stored_through"] = dict(self.stored_through)
        return wire

    @property
    def thinned(self) -> bool:
        """Whether the replay left anything out or thinned it."""
        return self.decimated or any(self.left_out.values())

    def describe(self, run_id: int | None, opened: bool = False) -> str:
        """What a person attaching (or ``opened``: opening a stored run) is told when the history came
        thinned; "" when it came whole."""
        if not self.thinned:
            return ""
        parts = ["older points of each chart are the low and high of their stretch"] if self.decimated else []
        counted = [f"{_counted(count)} {LEFT_OUT_WORDS.get(table, table.replace('_', ' '))}"
                   for table, count in sorted(self.left_out.items()) if count]
        if counted:  # the oldest ones of a replay, and those a catch-up skipped (it sends each series' newest)
            parts.append(f"{', '.join(counted)} are not shown")
        where = f"rankwatch runs logs {run_id}" if run_id is not None else "rankwatch runs logs RUN"
        verb = "Opened" if opened else "Attached"
        return f"{verb} with a shortened history: {'; '.join(parts)}. The store keeps everything ({where})."


def _counted(count: int) -> str:
    """A count of rows left out, as ``HistoryEnd.left_out`` gives it (past ``COUNTED_UP_TO``: more)."""
    limit = protocol.HistoryEnd.COUNTED_UP_TO
    return f"more than {limit:,}" if count > limit else f"{count:,}"


LEFT_OUT_WORDS = {"logs": "log lines", "events": "events", "gpu_samples": "GPU samples",
                  "process_samples": "process samples", "metrics": "metric records"}
"""How ``HistoryEnd.left_out``'s tables are named to a person."""


@dataclass(frozen=True)
class Bye:
    """The hub is going away (the run ended, or the runner stops)."""

    TYPE: ClassVar[str] = protocol.Bye.TYPE
    reason: str = "ended"

    def to_wire(self) -> JsonObject:
        return {"type": self.TYPE, "reason": self.reason}


HubMessage = SnapshotMessage | UpdateMessage | HistoryEnd | Bye


def decode_hub_message(data: Mapping[str, Any]) -> HubMessage | None:
    """One decoded JSON message from the hub, typed; None for the ones a run's state does not
    take (``pong``, ``error``, ``pace``, a type from a newer hub)."""
    kind = data.get("type")
    if kind == SnapshotMessage.TYPE:
        return SnapshotMessage.from_wire(data)
    if kind == UpdateMessage.TYPE:
        return UpdateMessage.from_wire(data)
    if kind == HistoryEnd.TYPE:
        return HistoryEnd.from_wire(data)
    if kind == Bye.TYPE:
        return Bye(str(data.get("reason") or "ended"))
    return None


def decode_hub_line(line: bytes) -> HubMessage | None:
    """A line from the hub's socket; None for what is not a run's message.

    Raises:
        rankwatch.protocol.ProtocolError: the line is not a hub message (too long, not JSON, ...).
    """
    return decode_hub_message(protocol.decode(line, protocol.HUB_TYPES))


def event_of(data: Mapping[str, Any]) -> Event | None:
    """An event as published (``Event.to_wire``), or as the store gives it back; None when its kind
    is not one the contract defines."""
    fields_of = {key: value for key, value in data.items() if key not in ("kind", "t", "rank")}
    try:
        return Event.from_store(wire_float(data.get("t")) or 0.0, str(data.get("kind")), wire_int(data.get("rank")),
                                fields_of)
    except ValueError:
        return None
