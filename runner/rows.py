"""The rows of a run, typed: the run, its ranks, its nodes, as the store reads them and the hub
publishes them.

The store's ``runs``, ``ranks`` and ``nodes`` rows and the hub's RUN, RANK and NODE objects are
the same rows: decoded once, here, into frozen dataclasses, so no reader looks a row up by its
keys. They live below both the store and ``runner.runstate`` (which re-exports them as the
hub -> subscriber types), so the store's readers return them.

Decoding is lenient, as the hub's own is: a field of the wrong type becomes ``None`` (not
measured), a key a newer hub adds is kept in ``extra`` so that nothing is lost on the way
through, and ``to_wire`` gives back what ``from_wire`` read.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, TypeVar

from rankwatch import protocol

__all__ = ["JsonObject", "NodeInfo", "RankInfo", "Row", "RunInfo", "StoredRank", "StoredRun", "wire_float", "wire_int"]

_RowT = TypeVar("_RowT", bound="Row")

JsonObject = dict[str, object]
"""A JSON object as sent or received: the wire side of the typed values below (nothing else). Its
values are ``object``: whoever reads one checks each value before use (``wire_int``, ``isinstance``)."""

_FieldValues = dict[str, Any]
"""A row's fields by name, each already typed by its ``KINDS`` decoder (``_DECODERS``): the keyword
arguments of the row's constructor. Not a JSON object; ``Any`` only because which field a value goes
to is known by name at run time, where ``_DECODERS`` picked its type."""


def wire_int(value: object) -> int | None:
    """A whole number as a row carries it (a bool counts as 0 or 1); None when it is none."""
    return protocol.as_int(value) if not isinstance(value, bool) else int(value)


def wire_float(value: object) -> float | None:
    """A number as a row carries it (a bool counts as 0 or 1); None when it is none."""
    return protocol.as_float(value) if not isinstance(value, bool) else float(value)


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None if value is None else str(value)


def _share_map(value: object) -> dict[str, float | None] | None:
    if not isinstance(value, Mapping):
        return None
    return {str(key): wire_float(share) for key, share in value.items()}


def _summary(value: object) -> JsonObject | None:
    """The run's triage summary: an object on the wire, JSON text in older store rows."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return None
    return dict(value) if isinstance(value, Mapping) else None


_DECODERS: dict[str, Callable[[object], Any]] = {"int": wire_int, "float": wire_float, "str": _text, "shares": _share_map,
                             "summary": _summary}


@dataclass(frozen=True)
class Row:
    """A JSON object row: its known fields typed, any other key kept in ``extra``."""

    KINDS: ClassVar[dict[str, str]] = {}
    """field -> decoder name (``_DECODERS``); fields not named here are numbers of kind "int"."""

    extra: Mapping[str, object] = field(default_factory=dict, compare=False, repr=False, kw_only=True)
    """Keys the row carries that this version does not know: kept, and sent on. Keyword-only: a row
    made positionally (``RankInfo(3)``) gets its own first field, not ``extra``."""

    @classmethod
    def from_wire(cls: type[_RowT], data: Mapping[str, object]) -> _RowT:
        """Raises ValueError for a row without its key (a rank row without a rank)."""
        return cls._completed(cls._decoded(data))

    @classmethod
    def _decoded(cls, data: Mapping[str, object]) -> _FieldValues:
        """The keys ``data`` carries, typed (the others under ``extra``)."""
        known = _field_names(cls)
        kinds = cls.KINDS
        values: _FieldValues = {}
        extra: JsonObject = {}
        for name, value in data.items():
            if name in known:
                values[name] = _DECODERS[kinds.get(name, "int")](value)
            else:
                extra[name] = value
        values["extra"] = extra
        return values

    @classmethod
    def _completed(cls: type[_RowT], values: _FieldValues) -> _RowT:
        return cls(**values)

    def to_wire(self) -> JsonObject:
        data: JsonObject = dict(self.extra)
        for name in _field_order(type(self)):
            data[name] = getattr(self, name)
        return data

    def merged(self: _RowT, data: Mapping[str, object]) -> _RowT:
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


def _field_names(cls: type[Row]) -> frozenset[str]:
    names = _FIELD_NAMES.get(cls)
    if names is None:
        names = _FIELD_NAMES[cls] = frozenset(_field_order(cls))
    return names


def _field_order(cls: type[Row]) -> tuple[str, ...]:
    """The row's fields but ``extra``, in declaration order (the wire form's key order)."""
    order = _FIELD_ORDER.get(cls)
    if order is None:
        order = _FIELD_ORDER[cls] = tuple(item.name for item in fields(cls) if item.name != "extra")
    return order


@dataclass(frozen=True)
class RunInfo(Row):
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
class RankInfo(Row):
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
    def _completed(cls, values: _FieldValues) -> RankInfo:
        if values.get("state") is None:
            values.pop("state", None)
        if values.get("rank") is None:
            raise ValueError("a rank row without a rank")
        return cls(**values)


@dataclass(frozen=True)
class NodeInfo(Row):
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
    def _completed(cls, values: _FieldValues) -> NodeInfo:
        if values.get("node_rank") is None:
            values["node_rank"] = 0
        return cls(**values)


def _words(value: object) -> tuple[str, ...]:
    """A run's tags: a JSON list of words (text in the store, a list on the wire); none otherwise."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return ()
    return tuple(str(word) for word in value) if isinstance(value, (list, tuple)) else ()


_DECODERS["words"] = _words


@dataclass(frozen=True)
class StoredRun(RunInfo):
    """The store's whole ``runs`` row: the RUN row the hub publishes (``RunInfo``) and the columns
    only the store's readers use. A ``RunInfo`` itself, so whatever shows a run takes it; the hub's
    messages still decode as ``RunInfo`` (these columns in ``extra``), so their wire is unchanged."""

    KINDS: ClassVar[dict[str, str]] = {**RunInfo.KINDS, "run_key": "str", "spec_toml": "str",
                                       "runner_identity": "str", "tags": "words", "notes": "str"}
    id: int = 0
    """The run's id: a stored row always has one (the primary key)."""
    run_key: str | None = None
    """The run's key: its worker processes carry it (``runner.processes``), to be found and stopped."""
    spec_toml: str | None = None
    """The launch spec as stored (TOML text)."""
    runner_identity: str | None = None
    """The runner process's boot id and start time (``runner.store.liveness.process_identity``)."""
    tags: tuple[str, ...] = ()
    """What a person tagged the run with (``RunStore.set_run_notes``); none in a store not migrated yet."""
    notes: str | None = None
    """A person's free notes on the run."""


@dataclass(frozen=True)
class StoredRank(RankInfo):
    """The store's ``ranks`` row: the RANK row and what only the store keeps of the rank."""

    gpu_mem_used_peak: int | None = None
    """The most GPU memory NVML saw the rank's process hold at a sample (bytes); the RANK row's
    ``gpu_mem_used`` is only the newest sample's, and is gone once the run ends."""
