"""What the hub publishes to its subscribers, typed: decoded once, here, for every reader.

The worker -> hub half of the contract is typed in ``rankwatch.protocol``; this module is the
hub -> subscriber half as the readers see it (the GUI's link, the terminal view, ``attach``,
``runs show``, ``stop``, ``stacks``). Records keep the contract's own types (``MetricRecord``,
``LogLine``, ``GpuSample``, ``ProcessSample``, ``Event`` with its ``EventKind``); the rows the
hub sends as JSON objects (the run, its ranks, its nodes) become frozen dataclasses here.

Decoding is lenient, as the hub's own is: a field of the wrong type becomes ``None`` (not
measured), a key a newer hub adds is kept in ``extra`` so that nothing is lost on the way
through, and ``to_wire`` gives back what ``from_wire`` read.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, TypeVar

from rankwatch import protocol
from rankwatch.protocol import Event, EventKind, GpuSample, LogLine, MetricRecord, ProcessSample

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

_RowT = TypeVar("_RowT", bound="_Row")

JsonObject = dict[str, Any]
"""A JSON object as the hub sends it: the wire side of the typed values below (nothing else)."""

MetricItem = Sequence[Any]
"""A metric record as published: ``(rank, t, step, name, value, source)`` (``MetricRecord``, or
the list it is on the wire: 100k of them a second are not copied into tuples)."""


def _int(value: object) -> int | None:
    return protocol.as_int(value) if not isinstance(value, bool) else int(value)


def _float(value: object) -> float | None:
    return protocol.as_float(value) if not isinstance(value, bool) else float(value)


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None if value is None else str(value)


def _share_map(value: object) -> dict[str, float | None] | None:
    if not isinstance(value, Mapping):
        return None
    return {str(key): _float(share) for key, share in value.items()}


def _summary(value: object) -> JsonObject | None:
    """The run's triage summary: an object on the wire, JSON text in older store rows."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return None
    return dict(value) if isinstance(value, Mapping) else None


_DECODERS: dict[str, Callable[[object], Any]] = {"int": _int, "float": _float, "str": _text, "shares": _share_map,
                             "summary": _summary}


@dataclass(frozen=True)
class _Row:
    """A JSON object row: its known fields typed, any other key kept in ``extra``."""

    KINDS: ClassVar[dict[str, str]] = {}
    """field -> decoder name (``_DECODERS``); fields not named here are numbers of kind "int"."""

    extra: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False, kw_only=True)
    """Keys the row carries that this version does not know: kept, and sent on. Keyword-only: a row
    made positionally (``RankInfo(3)``) gets its own first field, not ``extra``."""

    @classmethod
    def from_wire(cls: type[_RowT], data: Mapping[str, Any]) -> _RowT:
        """Raises ValueError for a row without its key (a rank row without a rank)."""
        return cls._completed(cls._decoded(data))

    @classmethod
    def _decoded(cls, data: Mapping[str, Any]) -> JsonObject:
        """The keys ``data`` carries, typed (the others under ``extra``)."""
        known = _field_names(cls)
        kinds = cls.KINDS
        values: JsonObject = {}
        extra = {}
        for name, value in data.items():
            if name in known:
                values[name] = _DECODERS[kinds.get(name, "int")](value)
            else:
                extra[name] = value
        values["extra"] = extra
        return values

    @classmethod
    def _completed(cls: type[_RowT], values: JsonObject) -> _RowT:
        return cls(**values)

    def to_wire(self) -> JsonObject:
        data = dict(self.extra)
        for name in _field_order(type(self)):
            data[name] = getattr(self, name)
        return data

    def merged(self: _RowT, data: Mapping[str, Any]) -> _RowT:
        """This row with the keys ``data`` carries replaced (the hub sends whole rows, the store
        fewer columns: a key that is absent keeps its value).

        Copied field by field rather than through ``dataclasses.replace`` (which runs ``fields``
        and ``__init__`` again): a live update of a 1,024-rank run merges a thousand rows, and
        ``replace`` made that 20 ms of the GUI thread."""
        changes = type(self)._decoded(data)
        extra = changes.pop("extra")
        if changes.get("state", "") is None and "state" in _field_names(type(self)):
            changes.pop("state")
        merged = copy.copy(self)
        state = merged.__dict__
        state.update(changes)
        if extra:
            state["extra"] = {**self.extra, **extra}
        return merged


_FIELD_ORDER: dict[type, tuple[str, ...]] = {}
_FIELD_NAMES: dict[type, frozenset[str]] = {}


def _field_names(cls: type[_Row]) -> frozenset[str]:
    names = _FIELD_NAMES.get(cls)
    if names is None:
        names = _FIELD_NAMES[cls] = frozenset(_field_order(cls))
    return names


def _field_order(cls: type[_Row]) -> tuple[str, ...]:
    """The row's fields but ``extra``, in declaration order (the wire form's key order)."""
    order = _FIELD_ORDER.get(cls)
    if order is None:
        order = _FIELD_ORDER[cls] = tuple(item.name for item in fields(cls) if item.name != "extra")
    return order


@dataclass(frozen=True)
class RunInfo(_Row):
    """The RUN row: the store's ``runs`` row as the hub publishes it (``summary`` decoded)."""

    KINDS: ClassVar[dict[str, str]] = {
        "profile": "str", "command": "str", "host": "str", "workdir": "str",
        "created": "float", "started": "float", "ended": "float", "status": "str", "socket": "str",
        "summary": "summary",
    }
    id: int | None = None
    profile: str | None = None
    command: str | None = None
    host: str | None = None
    workdir: str | None = None
    created: float | None = None
    started: float | None = None
    ended: float | None = None
    status: str | None = None
    """A ``runner.state.RunStatus`` value."""
    exit_code: int | None = None
    runner_pid: int | None = None
    socket: str | None = None
    world_size: int | None = None
    summary: JsonObject | None = None


_RANK_FLOATS = ("loss", "step_time", "data_wait_share", "comm_wait_share", "samples_per_s", "steps_per_s",
                "last_seen", "first_seen", "cpu_percent", "gpu_util", "working_since")
_RANK_TEXTS = ("host", "state", "loss_source", "python", "torch", "phase_clock")


@dataclass(frozen=True)
class RankInfo(_Row):
    """A RANK row (``rankwatch.protocol.RankRow``), or the store's ``ranks`` row of a run that ended."""

    KINDS: ClassVar[dict[str, str]] = {**{name: "float" for name in _RANK_FLOATS},
                                       **{name: "str" for name in _RANK_TEXTS}, "phase_shares": "shares"}
    rank: int = 0
    local_rank: int | None = None
    node_rank: int | None = None
    host: str | None = None
    pid: int | None = None
    gpu_index: int | None = None
    state: str = "waiting"
    """A ``runner.state.RankState`` value."""
    exit_code: int | None = None
    step: int | None = None
    """The newest step index the rank reported (0 is its first step)."""
    loss: float | None = None
    loss_source: str | None = None
    step_time: float | None = None
    data_wait_share: float | None = None
    comm_wait_share: float | None = None
    samples_per_s: float | None = None
    steps_per_s: float | None = None
    last_seen: float | None = None
    first_seen: float | None = None
    cpu_percent: float | None = None
    rss_bytes: int | None = None
    gpu_util: float | None = None
    gpu_mem_used: int | None = None
    dropped: int | None = None
    rejected: int | None = None
    sent: int | None = None
    world_size: int | None = None
    python: str | None = None
    torch: str | None = None
    restart: int | None = None
    working_since: float | None = None
    phase_clock: str | None = None
    phase_shares: dict[str, float | None] | None = None
    skipped_steps: int | None = None
    gpu_mem_allocated: int | None = None
    gpu_mem_reserved: int | None = None
    gpu_mem_peak: int | None = None

    @classmethod
    def _completed(cls, values: JsonObject) -> RankInfo:
        if values.get("state") is None:
            values.pop("state", None)
        if values.get("rank") is None:
            raise ValueError("a rank row without a rank")
        return cls(**values)


@dataclass(frozen=True)
class NodeInfo(_Row):
    """A node of the run (the store's ``nodes`` row): its host and how it is doing."""

    KINDS: ClassVar[dict[str, str]] = {"host": "str", "state": "str", "changed": "float", "detail": "str"}
    node_rank: int = 0
    host: str | None = None
    state: str | None = None
    """A ``runner.state.NodeState`` value."""
    processes: int | None = None
    changed: float | None = None
    detail: str | None = None

    @classmethod
    def _completed(cls, values: JsonObject) -> NodeInfo:
        if values.get("node_rank") is None:
            values["node_rank"] = 0
        return cls(**values)


# ---- the fields of the event kinds their readers use, typed ------------------------------------

@dataclass(frozen=True)
class StoppingFields(_Row):
    """``stopping``: who or what stops the run (``runner.exit_status.describe_stop_reason``)."""

    KINDS: ClassVar[dict[str, str]] = {"stopped_by": "str"}
    stopped_by: str | None = None


@dataclass(frozen=True)
class LaunchModeFields(_Row):
    """``launch_mode``: how the script is started (``torchrun`` or ``self-spawn``), why, and who chose."""

    KINDS: ClassVar[dict[str, str]] = {"mode": "str", "reason": "str", "chosen_by": "str"}
    mode: str | None = None
    reason: str | None = None
    chosen_by: str | None = None


@dataclass(frozen=True)
class StalledFields(_Row):
    """``stalled``: the step the rank is stuck at, for how long, and the threshold it passed."""

    KINDS: ClassVar[dict[str, str]] = {"seconds": "float", "threshold": "float"}
    step: int | None = None
    seconds: float | None = None
    threshold: float | None = None


@dataclass(frozen=True)
class ResumedFields(_Row):
    """``resumed``: the step a stalled rank made, and how long it had stalled."""

    KINDS: ClassVar[dict[str, str]] = {"stalled_seconds": "float"}
    step: int | None = None
    stalled_seconds: float | None = None


@dataclass(frozen=True)
class RunFinishedFields(_Row):
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

    @classmethod
    def from_wire(cls, data: Mapping[str, Any]) -> HistoryEnd:
        wire = protocol.HistoryEnd.from_wire(dict(data))
        return cls(wire.decimated, dict(wire.left_out))

    def to_wire(self) -> JsonObject:
        wire: JsonObject = {"type": self.TYPE}
        if self.decimated:
            wire["decimated"] = True
        if self.left_out:
            wire["left_out"] = dict(self.left_out)
        return wire

    @property
    def thinned(self) -> bool:
        """Whether the replay left anything out or thinned it."""
        return self.decimated or any(self.left_out.values())

    def describe(self, run_id: int | None) -> str:
        """What a person attaching is told when the history came thinned; "" when it came whole."""
        if not self.thinned:
            return ""
        parts = ["older points of each chart are the low and high of their stretch"] if self.decimated else []
        counted = [f"{count:,} {LEFT_OUT_WORDS.get(table, table.replace('_', ' '))}"
                   for table, count in sorted(self.left_out.items()) if count]
        if counted:  # the oldest ones of a replay, and those a catch-up skipped (it sends each series' newest)
            parts.append(f"{', '.join(counted)} are not shown")
        where = f"rankwatch runs logs {run_id}" if run_id is not None else "rankwatch runs logs RUN"
        return f"Attached with a shortened history: {'; '.join(parts)}. The store keeps everything ({where})."


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
        return Event.from_store(_float(data.get("t")) or 0.0, str(data.get("kind")), _int(data.get("rank")),
                                fields_of)
    except ValueError:
        return None
