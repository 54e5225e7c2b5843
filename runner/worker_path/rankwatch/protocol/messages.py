"""Every message, as a small typed value with ``to_wire`` / ``from_wire``: nothing else decodes
them again. The directions and fields of each are listed in the package's docstring
(``rankwatch.protocol``); ``decode_message`` turns a line into its typed message."""

from __future__ import annotations

import json
import time

from rankwatch.protocol.events import Event
from rankwatch.protocol.numbers import (
    MAX_LONG_TEXT_CHARS,
    MAX_NAME_CHARS,
    as_count,
    as_float,
    as_int,
    as_pid,
    as_text,
    as_time,
    clean_text,
)
from rankwatch.protocol.records import (
    STEP_ROW_LENGTH,
    GpuSample,
    LogLine,
    MetricRecord,
    MetricRow,
    ProcessSample,
    metric_records,
    step_row_records,
)
from rankwatch.protocol.wire import ALL_TYPES, VERSION, ProtocolError, decode, encode

TYPE_CHECKING = False  # `typing` costs ~3 ms to import and workers import this module
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from typing import ClassVar, TypeVar

    from rankwatch.protocol.wire import WireFields

    MessageT = TypeVar("MessageT", bound="Message")


class Message:
    """Base of every message: ``TYPE`` names it on the wire, ``__slots__`` are its fields in order.

    ``to_wire`` gives the fields (without ``type``/``v``); ``encode`` frames it;
    ``from_wire`` (each class) validates decoded fields and raises ``ProtocolError``
    for a required field that is missing or of the wrong type.
    """

    __slots__ = ()
    TYPE: ClassVar[str] = ""

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        """The fields, in order: the ``__slots__`` of this class and the classes it extends."""
        names = _FIELD_NAMES.get(cls)
        if names is None:
            names = _FIELD_NAMES[cls] = tuple(
                name for klass in reversed(cls.__mro__) for name in klass.__dict__.get("__slots__", ()))
        return names

    def to_wire(self) -> dict[str, object]:
        return {name: getattr(self, name) for name in self.field_names()}

    def encode(self) -> bytes:
        return encode(self.TYPE, **self.to_wire())

    @classmethod
    def from_wire(cls: type[MessageT], fields: WireFields) -> MessageT:
        raise NotImplementedError

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Message) and type(other) is type(self) and self.to_wire() == other.to_wire()

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.field_names())
        return f"{type(self).__name__}({fields})"


_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


def _required_int(fields: WireFields, name: str) -> int:
    value = as_int(fields.get(name))
    if value is None:
        raise ProtocolError("invalid", f"{fields.get('type')}: {name} must be an integer")
    return value


def _texts(value: object) -> list[str]:
    return [clean_text(item) for item in value if type(item) is str] if isinstance(value, list) else []


class Hello(Message):
    """A worker introduces itself (first on every connection)."""

    __slots__ = ("token", "run_key", "rank", "local_rank", "node_rank", "world_size", "local_world_size", "host",
                 "pid", "python", "python_version", "torch", "restart", "argv")
    TYPE = "hello"

    def __init__(self, rank: int, token: str | None = None, run_key: str | None = None,
                 local_rank: int | None = None, node_rank: int | None = None, world_size: int | None = None,
                 local_world_size: int | None = None, host: str | None = None, pid: int | None = None,
                 python: str | None = None, python_version: str | None = None, torch: str | None = None,
                 restart: int | None = None, argv: list[str] | None = None) -> None:
        self.token = token
        """The run's token (a hello the agent forwards has none: the agent checked it)."""
        self.run_key = run_key
        self.rank = rank
        self.local_rank = local_rank
        self.node_rank = node_rank
        self.world_size = world_size
        self.local_world_size = local_world_size
        self.host = host
        self.pid = pid
        self.python = python
        self.python_version = python_version
        self.torch = torch
        self.restart = restart
        self.argv = argv if argv is not None else []

    @classmethod
    def from_wire(cls, fields: WireFields) -> Hello:
        return cls(rank=_required_int(fields, "rank"), token=as_text(fields.get("token")),
                   run_key=as_text(fields.get("run_key")), local_rank=as_int(fields.get("local_rank")),
                   node_rank=as_int(fields.get("node_rank")), world_size=as_int(fields.get("world_size")),
                   local_world_size=as_int(fields.get("local_world_size")),
                   host=as_text(fields.get("host"), MAX_NAME_CHARS * 2), pid=as_pid(fields.get("pid")),
                   python=as_text(fields.get("python")), python_version=as_text(fields.get("python_version")),
                   torch=as_text(fields.get("torch")), restart=as_int(fields.get("restart")),
                   argv=_texts(fields.get("argv")))


class Metrics(Message):
    """A batch of one rank's metric records. ``rejected`` (not on the wire) counts what
    ``from_wire`` left out, by reason."""

    __slots__ = ("rank", "records", "rejected", "examples")
    TYPE = "metrics"

    def __init__(self, rank: int, records: list[MetricRow], rejected: dict[str, int] | None = None,
                 examples: dict[str, str] | None = None) -> None:
        self.rank = rank
        self.records = records
        self.rejected = rejected or {}
        self.examples = examples or {}
        """reason -> the name of the first item left out for it (the event quotes it)."""

    def to_wire(self) -> dict[str, object]:
        return {"rank": self.rank, "items": [list(record[1:]) for record in self.records]}

    @classmethod
    def from_wire(cls, fields: WireFields, rank: int | None = None) -> Metrics:
        """``rank``: the rank the connection said hello as (a worker's own batches), else the message's."""
        if rank is None:
            rank = _required_int(fields, "rank")
        rejected: dict[str, int] = {}
        examples: dict[str, str] = {}
        return cls(rank, metric_records(rank, fields.get("items"), rejected, examples), rejected, examples)


def encode_metric_items(rank: int, items: list[list[object]]) -> bytes:
    """A ``metrics`` line from wire items, ``[t, step, name, value, source]`` and step rows
    (``STEP_ROW_LENGTH``): the reporter's hot path.

    JSON has no NaN: a value that is not finite goes as null in its item, and a step row holding
    one goes as its records' items (null in a row would mean "not measured"); the result is then
    one line or more, together holding every record.
    """
    try:
        text = json.dumps({"type": Metrics.TYPE, "v": VERSION, "rank": rank, "items": items},
                          separators=(",", ":"), allow_nan=False)
    except ValueError:
        finite: list[list[object]] = []
        for item in items:
            if len(item) == STEP_ROW_LENGTH and not _all_finite(item):
                finite += ([t, step, name, value, source] for _rank, t, step, name, value, source
                           in step_row_records(rank, item))
            else:
                finite.append(item)
        # rows become up to 14 items each: as several lines, each far below MAX_LINE_BYTES
        return b"".join(encode(Metrics.TYPE, rank=rank, items=finite[first:first + FALLBACK_ITEMS_PER_LINE])
                        for first in range(0, len(finite), FALLBACK_ITEMS_PER_LINE))
    return text.encode("utf-8", "surrogatepass") + b"\n"


FALLBACK_ITEMS_PER_LINE = 2000
"""Items per line when step rows holding a value that is not finite go as items (~150 KB a line)."""


def _all_finite(row: list[object]) -> bool:
    """Whether no float of a step row (its phases included) is NaN or infinite."""
    for value in row:
        if type(value) is float:
            if value - value != 0:
                return False
        elif type(value) is list and not _all_finite(value):
            return False
    return True


class Heartbeat(Message):
    """A worker is alive: its newest step, its cumulative counts, and whether it works without steps."""

    __slots__ = ("rank", "t", "step", "dropped", "sent", "working")
    TYPE = "heartbeat"

    def __init__(self, rank: int, t: float | None, step: int | None, dropped: int | None,
                 sent: int | None = None, working: bool | None = None) -> None:
        self.rank = rank
        self.t = t
        self.step = step
        self.dropped = dropped
        self.sent = sent
        self.working = working
        """After seconds without a step: whether its training thread worked since the previous heartbeat
        (an evaluation, a checkpoint: not a hang); None when not judged (``rankwatch._activity``)."""

    @classmethod
    def from_wire(cls, fields: WireFields) -> Heartbeat:
        working = fields.get("working")
        return cls(_required_int(fields, "rank"), as_time(fields.get("t")), as_int(fields.get("step")),
                   as_count(fields.get("dropped")), as_count(fields.get("sent")),
                   working if type(working) is bool else None)


class ExceptionReport(Message):
    """An uncaught exception in a worker (``fatal``: the one that ends it)."""

    __slots__ = ("rank", "t", "exc_type", "message", "traceback", "thread", "fatal")
    TYPE = "exception"

    def __init__(self, rank: int, t: float | None, exc_type: str | None, message: str | None,
                 traceback: str | None, thread: str | None, fatal: bool = True) -> None:
        self.rank = rank
        self.t = t
        self.exc_type = exc_type
        self.message = message
        self.traceback = traceback
        self.thread = thread
        self.fatal = fatal

    @classmethod
    def from_wire(cls, fields: WireFields) -> ExceptionReport:
        return cls(_required_int(fields, "rank"), as_time(fields.get("t")), as_text(fields.get("exc_type")),
                   as_text(fields.get("message"), MAX_LONG_TEXT_CHARS),
                   as_text(fields.get("traceback"), MAX_LONG_TEXT_CHARS), as_text(fields.get("thread")),
                   fields.get("fatal") is not False)


class Exit(Message):
    """A worker's last message: its exit status."""

    __slots__ = ("rank", "t", "code")
    TYPE = "exit"

    def __init__(self, rank: int, t: float | None, code: int | None) -> None:
        self.rank = rank
        self.t = t
        self.code = code

    @classmethod
    def from_wire(cls, fields: WireFields) -> Exit:
        return cls(_required_int(fields, "rank"), as_time(fields.get("t")), as_int(fields.get("code")))


class ParamHash(Message):
    """A fingerprint of a rank's parameters after optimizer step ``step``."""

    __slots__ = ("rank", "t", "step", "digest")
    TYPE = "param_hash"

    def __init__(self, rank: int, t: float | None, step: int | None, digest: str | None) -> None:
        self.rank = rank
        self.t = t
        self.step = step
        self.digest = digest

    @classmethod
    def from_wire(cls, fields: WireFields) -> ParamHash:
        return cls(_required_int(fields, "rank"), as_time(fields.get("t")), as_int(fields.get("step")),
                   as_text(fields.get("digest"), MAX_NAME_CHARS))


class StacksWritten(Message):
    """A rank's faulthandler appended a stack dump to ``path``."""

    __slots__ = ("rank", "t", "path")
    TYPE = "stacks"

    def __init__(self, rank: int, t: float | None, path: str | None) -> None:
        self.rank = rank
        self.t = t
        self.path = path

    @classmethod
    def from_wire(cls, fields: WireFields) -> StacksWritten:
        return cls(_required_int(fields, "rank"), as_time(fields.get("t")), as_text(fields.get("path")))


class FlightRecord(Message):
    """A rank's Flight Recorder (``rankwatch._flight_recorder.snapshot``), sent after a stack dump.

    ``record`` holds ``pg_config``, ``pg_status``, ``entries`` (torch's fields, newest
    last) or ``error`` (why it could not be read); ``runner.diagnosis.flight_recorder``
    reads it.
    """

    __slots__ = ("rank", "t", "record")
    TYPE = "flight_record"

    def __init__(self, rank: int, t: float | None, record: dict[str, object]) -> None:
        self.rank = rank
        self.t = t
        self.record = record

    @classmethod
    def from_wire(cls, fields: WireFields) -> FlightRecord:
        record = fields.get("record")
        if not isinstance(record, dict):
            raise ProtocolError("invalid", "flight_record: record must be an object")
        return cls(_required_int(fields, "rank"), as_time(fields.get("t")), record)


NO_PROCESS_GROUP = "no_process_group"
"""The ``notice`` key of a rank that trains without a process group (``rankwatch._group_check``)."""


class Notice(Message):
    """Something about how the script was launched (``rankwatch._launch_checks``): ``key`` names
    it, ``facts`` (flat on the wire, beside ``key``) hold what the worker saw."""

    __slots__ = ("rank", "t", "key", "facts")
    TYPE = "notice"

    def __init__(self, rank: int, t: float | None, key: str, facts: dict[str, object] | None = None) -> None:
        self.rank = rank
        self.t = t
        self.key = key
        self.facts = facts or {}

    def to_wire(self) -> dict[str, object]:
        return {**self.facts, "rank": self.rank, "t": self.t, "key": self.key}

    @classmethod
    def from_wire(cls, fields: WireFields) -> Notice:
        key = as_text(fields.get("key"), MAX_NAME_CHARS)
        if not key:
            raise ProtocolError("invalid", "notice: key must be text")
        facts = {name: value for name, value in fields.items() if name not in ("type", "v", "rank", "t", "key")}
        return cls(_required_int(fields, "rank"), as_time(fields.get("t")), key, facts)


class AgentHello(Message):
    """A remote node's agent introduces itself (first line over TCP)."""

    __slots__ = ("token", "run_key", "node_rank", "host", "pid", "version", "torch")
    TYPE = "agent_hello"

    def __init__(self, node_rank: int | None, token: str | None = None, run_key: str | None = None,
                 host: str | None = None, pid: int | None = None, version: str | None = None,
                 torch: str | None = None) -> None:
        self.token = token
        self.run_key = run_key
        self.node_rank = node_rank
        self.host = host
        self.pid = pid
        self.version = version
        self.torch = torch

    @classmethod
    def from_wire(cls, fields: WireFields) -> AgentHello:
        return cls(as_int(fields.get("node_rank")), token=as_text(fields.get("token")),
                   run_key=as_text(fields.get("run_key")), host=as_text(fields.get("host"), MAX_NAME_CHARS * 2),
                   pid=as_pid(fields.get("pid")), version=as_text(fields.get("version")),
                   torch=as_text(fields.get("torch")))


class Log(Message):
    """An output line forwarded by an agent."""

    __slots__ = ("node_rank", "line")
    TYPE = "log"

    def __init__(self, node_rank: int | None, line: LogLine) -> None:
        self.node_rank = node_rank
        self.line = line

    def to_wire(self) -> dict[str, object]:
        line = self.line
        return {"node_rank": self.node_rank, "rank": line.rank, "t": line.t, "stream": line.stream,
                "line": line.line, "node": line.node}

    @classmethod
    def from_wire(cls, fields: WireFields) -> Log:
        stream = fields.get("stream")
        return cls(as_int(fields.get("node_rank")), LogLine(
            as_int(fields.get("rank")), as_time(fields.get("t")) or time.time(),
            stream if stream in ("stdout", "stderr") else "stdout", as_text(fields.get("line")) or "",
            as_text(fields.get("node"), MAX_NAME_CHARS * 2)))


class RemoteStacks(Message):
    """A rank's stack dump taken on its own node by the agent (``stack_request``)."""

    __slots__ = ("node_rank", "rank", "host", "text", "why")
    TYPE = "remote_stacks"

    def __init__(self, node_rank: int | None, rank: int, host: str | None, text: str, why: str | None = None) -> None:
        self.node_rank = node_rank
        self.rank = rank
        self.host = host
        self.text = text
        self.why = why
        """Why there is no dump (no stack handler, process gone), or None."""

    @classmethod
    def from_wire(cls, fields: WireFields) -> RemoteStacks:
        text = fields.get("text")
        return cls(as_int(fields.get("node_rank")), _required_int(fields, "rank"), as_text(fields.get("host")),
                   text if isinstance(text, str) else "", as_text(fields.get("why")))


class StackRequest(Message):
    """The head asks an agent for the stacks of some of its ranks (head -> agent, on stdin)."""

    __slots__ = ("ranks",)
    TYPE = "stack_request"

    def __init__(self, ranks: list[int]) -> None:
        self.ranks = ranks

    @classmethod
    def from_wire(cls, fields: WireFields) -> StackRequest:
        ranks = fields.get("ranks")
        return cls([rank for rank in ranks if type(rank) is int] if isinstance(ranks, list) else [])


class WorkerLost(Message):
    """A worker's connection to its agent ended without ``exit``."""

    __slots__ = ("rank", "t")
    TYPE = "worker_lost"

    def __init__(self, rank: int, t: float) -> None:
        self.rank = rank
        self.t = t

    @classmethod
    def from_wire(cls, fields: WireFields) -> WorkerLost:
        return cls(_required_int(fields, "rank"), as_time(fields.get("t")) or time.time())


class ProcessSamples(Message):
    """A remote node's ranks' CPU and memory. ``rejected`` (not on the wire): malformed rows."""

    __slots__ = ("node_rank", "rows", "rejected")
    TYPE = "process_samples"

    def __init__(self, node_rank: int | None, rows: list[ProcessSample], rejected: int = 0) -> None:
        self.node_rank = node_rank
        self.rows = rows
        self.rejected = rejected

    def to_wire(self) -> dict[str, object]:
        return {"node_rank": self.node_rank, "rows": [list(row) for row in self.rows]}

    @classmethod
    def from_wire(cls, fields: WireFields) -> ProcessSamples:
        raw = fields.get("rows")
        if not isinstance(raw, list):
            return cls(as_int(fields.get("node_rank")), [], 1)
        rows = [ProcessSample.from_wire(row) for row in raw]
        good = [row for row in rows if row is not None]
        return cls(as_int(fields.get("node_rank")), good, len(rows) - len(good))


class NodeExit(Message):
    """An agent's last message: its torchrun's exit status."""

    __slots__ = ("node_rank", "t", "code", "reason", "dropped")
    TYPE = "node_exit"

    def __init__(self, node_rank: int | None, t: float | None, code: int | None, reason: str | None = None,
                 dropped: int | None = None) -> None:
        self.node_rank = node_rank
        self.t = t
        self.code = code
        self.reason = reason
        self.dropped = dropped

    @classmethod
    def from_wire(cls, fields: WireFields) -> NodeExit:
        return cls(as_int(fields.get("node_rank")), as_time(fields.get("t")), as_int(fields.get("code")),
                   as_text(fields.get("reason")), as_int(fields.get("dropped")))


class Launch(Message):
    """What the head tells an agent first, over ssh's stdin (``runner.remote.launch_message``)."""

    __slots__ = ("token", "head_host", "head_port", "run_key", "run", "node_rank", "host", "argv", "env", "cwd",
                 "grace", "sample_interval")
    TYPE = "launch"

    def __init__(self, token: str, head_host: str, head_port: int, run_key: str, run: int | None, node_rank: int,
                 host: str, argv: tuple[str, ...], env: dict[str, str], cwd: str, grace: float = 5.0,
                 sample_interval: float = 1.0) -> None:
        self.token = token
        """The run's token: the agent presents it to the head (never sent to workers)."""
        self.head_host = head_host
        self.head_port = head_port
        self.run_key = run_key
        """The run key, also the marker every process of the run carries."""
        self.run = run
        self.node_rank = node_rank
        self.host = host
        """How logs name this node (the host as the spec gives it)."""
        self.argv = argv
        self.env = env
        self.cwd = cwd
        self.grace = grace
        """Seconds between SIGTERM and SIGKILL when stopping."""
        self.sample_interval = sample_interval
        """Seconds between samples of the workers' CPU and memory."""

    def to_wire(self) -> dict[str, object]:
        fields = super().to_wire()
        fields["argv"] = list(self.argv)
        return fields

    @classmethod
    def from_wire(cls, fields: WireFields) -> Launch:
        """Raises ProtocolError naming the first field that is missing or of the wrong type."""
        def invalid(name: str) -> ProtocolError:
            return ProtocolError("invalid", f"the launch message has no valid {name!r}")

        def text(name: str) -> str:
            value = fields.get(name)
            if not isinstance(value, str):
                raise invalid(name)
            return value

        def integer(name: str) -> int:
            value = fields.get(name)
            if not isinstance(value, int) or isinstance(value, bool):
                raise invalid(name)
            return value

        # checked in this order: the error names the first field that is wrong
        token, head_host, head_port, run_key = text("token"), text("head_host"), integer("head_port"), text("run_key")
        node_rank, host, argv, env = integer("node_rank"), text("host"), fields.get("argv"), fields.get("env")
        if not isinstance(argv, list):
            raise invalid("argv")
        if not isinstance(env, dict):
            raise invalid("env")
        cwd = text("cwd")
        words = [word for word in argv if isinstance(word, str)]
        if not argv or len(words) != len(argv):
            raise ProtocolError("invalid", "the launch message has an empty or non-text argv")
        variables = {key: value for key, value in env.items() if isinstance(key, str) and isinstance(value, str)}
        if len(variables) != len(env):
            raise ProtocolError("invalid", "the launch message's env must map text to text")

        def positive(name: str, default: float) -> float:
            number = as_float(fields.get(name))
            return number if number is not None and number > 0 else default

        return cls(token=token, head_host=head_host, head_port=head_port, run_key=run_key,
                   run=as_int(fields.get("run")), node_rank=node_rank, host=host, argv=tuple(words), env=variables,
                   cwd=cwd, grace=positive("grace", 5.0), sample_interval=positive("sample_interval", 1.0))


class AgentStop(Message):
    """The head asks an agent to stop its node's workers."""

    __slots__ = ("force",)
    TYPE = "stop"

    def __init__(self, force: bool = False) -> None:
        self.force = force

    @classmethod
    def from_wire(cls, fields: WireFields) -> AgentStop:
        return cls(bool(fields.get("force")))


class Subscribe(Message):
    """A subscriber (GUI, ``rankwatch attach``) asks for the run's updates."""

    __slots__ = ("history", "logs", "records", "from_store")
    TYPE = "subscribe"

    def __init__(self, history: bool = True, logs: bool = True, records: bool = True,
                 from_store: bool = False) -> None:
        self.history = history
        self.logs = logs
        self.records = records
        """Whether the history holds the stored metric records and samples. A view that shows the
        ranks' rows, not charts (the terminal), leaves them out: at 1,024 ranks they took its
        attach 40 s, its log lines and events alone a second."""
        self.from_store = from_store
        """The subscriber reads the history from the run store itself (the GUI, on the runner's
        machine): the hub replays none of it, and its ``history_end`` says up to which row of
        each table the store holds what came before the live updates (``stored_through``). At
        1,024 ranks the hub's replay took 30-80 s (its reads wait for the GIL of a hub busy with
        ingest), the subscriber's own read of the same window ~2 s. An older hub ignores it and
        replays (its ``history_end`` has no ``stored_through``)."""

    @classmethod
    def from_wire(cls, fields: WireFields) -> Subscribe:
        return cls(bool(fields.get("history", True)), bool(fields.get("logs", True)),
                   bool(fields.get("records", True)), fields.get("from_store") is True)


class StopRequest(AgentStop):
    """A subscriber asks the runner to stop the run (same wire shape as the head's ``stop``)."""

    __slots__ = ()

    @classmethod
    def from_wire(cls, fields: WireFields) -> StopRequest:
        return cls(bool(fields.get("force")))


class _Empty(Message):
    __slots__ = ()

    @classmethod
    def from_wire(cls: type[MessageT], fields: WireFields) -> MessageT:
        return cls()


class DumpStacks(_Empty):
    """A subscriber asks for every rank's stacks (answered by a ``stacks`` event)."""

    __slots__ = ()
    TYPE = "dump_stacks"


class Ping(_Empty):
    __slots__ = ()
    TYPE = "ping"


class Pong(_Empty):
    __slots__ = ()
    TYPE = "pong"


class HistoryEnd(Message):
    """The history replay is complete: what follows is live.

    A replay is bounded (the hub's ``runner.store.replay_window``): ``decimated`` says older
    metrics came thinned, ``left_out`` counts stored rows not sent, per table; a count above
    ``COUNTED_UP_TO`` means "more than that" (counting further costs a second at 1,024 ranks).
    Both optional: an older hub sends neither (nothing left out), an older reader ignores them.
    """

    __slots__ = ("decimated", "left_out", "stored_through")
    TYPE = "history_end"
    COUNTED_UP_TO = 1_000_000

    def __init__(self, decimated: bool = False, left_out: dict[str, int] | None = None,
                 stored_through: dict[str, int] | None = None) -> None:
        self.decimated = decimated
        self.left_out = left_out if left_out is not None else {}
        self.stored_through = stored_through
        """To a subscriber that reads the history itself (``Subscribe.from_store``): the last row
        of each of the run's tables that came before the live updates, by row key. The live
        updates hold exactly the rows after these; None: the hub replayed the history."""

    def to_wire(self) -> dict[str, object]:
        wire: dict[str, object] = {"decimated": self.decimated, "left_out": self.left_out}
        if self.stored_through is not None:
            wire["stored_through"] = self.stored_through
        return wire

    @classmethod
    def from_wire(cls, fields: WireFields) -> HistoryEnd:
        left_out = _object(fields.get("left_out")) or {}
        through = _object(fields.get("stored_through"))
        return cls(fields.get("decimated") is True,
                   {str(table): count for table, count in left_out.items() if type(count) is int and count >= 0},
                   None if through is None else
                   {str(table): key for table, key in through.items() if type(key) is int and key >= 0})


class Bye(Message):
    """The run ended (``reason``: its status); the hub closes the connection."""

    __slots__ = ("reason",)
    TYPE = "bye"

    def __init__(self, reason: str) -> None:
        self.reason = reason

    @classmethod
    def from_wire(cls, fields: WireFields) -> Bye:
        return cls(as_text(fields.get("reason")) or "ended")


class Error(Message):
    """The hub refuses something (a wrong token, ...)."""

    __slots__ = ("message",)
    TYPE = "error"

    def __init__(self, message: str) -> None:
        self.message = message

    @classmethod
    def from_wire(cls, fields: WireFields) -> Error:
        return cls(as_text(fields.get("message")) or "")


class Pace(Message):
    """How long a worker may hold records before sending them (hub -> worker).

    Every batch costs the rank a wake-up and the runner a line to decode, on cores the
    ranks need, so the hub asks for fewer, larger batches while nobody
    watches the run live, and for fresh ones as soon as someone does.
    """

    __slots__ = ("flush_latency",)
    TYPE = "pace"

    def __init__(self, flush_latency: float) -> None:
        self.flush_latency = flush_latency

    @classmethod
    def from_wire(cls, fields: WireFields) -> Pace:
        latency = as_float(fields.get("flush_latency"))
        if latency is None or latency < 0:
            raise ProtocolError("invalid", "pace: flush_latency must be a number of seconds >= 0")
        return cls(latency)


class Snapshot(Message):
    """The run as it is now: the first message after ``subscribe``."""

    __slots__ = ("run", "ranks", "nodes", "spec")
    TYPE = "snapshot"

    def __init__(self, run: Mapping[str, object] | None, ranks: Sequence[Mapping[str, object]],
                 nodes: Sequence[Mapping[str, object]], spec: Mapping[str, object]) -> None:
        self.run = run
        """The RUN row."""
        self.ranks = ranks
        """RANK rows (``RankRow.to_wire``)."""
        self.nodes = nodes
        self.spec = spec
        """The profile table the run was launched with."""

    @classmethod
    def from_wire(cls, fields: WireFields) -> Snapshot:
        return cls(_object(fields.get("run")), _objects(fields.get("ranks")), _objects(fields.get("nodes")),
                   _object(fields.get("spec")) or {})


class Update(Message):
    """What changed since the last update (or a chunk of a history replay)."""

    __slots__ = ("t", "metrics", "logs", "events", "gpus", "procs", "ranks", "run", "nodes", "decimated")
    TYPE = "update"

    def __init__(self, t: float, metrics: list[MetricRow] | None = None, logs: list[LogLine] | None = None,
                 events: list[Event] | None = None, gpus: list[GpuSample] | None = None,
                 procs: list[ProcessSample] | None = None, ranks: Sequence[Mapping[str, object]] | None = None,
                 run: Mapping[str, object] | None = None, nodes: Sequence[Mapping[str, object]] | None = None,
                 decimated: bool = False) -> None:
        self.t = t
        self.metrics = metrics if metrics is not None else []
        self.logs = logs if logs is not None else []
        self.events = events if events is not None else []
        self.gpus = gpus if gpus is not None else []
        self.procs = procs if procs is not None else []
        self.ranks = ranks if ranks is not None else []
        """RANK rows that changed."""
        self.run = run
        """The RUN row when it changed, else None."""
        self.nodes = nodes if nodes is not None else []
        self.decimated = decimated

    def to_wire(self) -> dict[str, object]:
        return {"t": self.t, "metrics": self.metrics, "logs": self.logs,
                "events": [event.to_wire() for event in self.events], "gpus": self.gpus, "procs": self.procs,
                "ranks": self.ranks, "run": self.run, "nodes": self.nodes, "decimated": self.decimated}

    @classmethod
    def from_wire(cls, fields: WireFields) -> Update:
        metrics = [MetricRecord.from_wire(item) for item in _list(fields.get("metrics"))]
        logs = [LogLine.from_wire(item) for item in _list(fields.get("logs"))]
        events = []
        for item in _objects(fields.get("events")):
            data = {key: value for key, value in item.items() if key not in ("kind", "t", "rank")}
            try:
                events.append(Event.from_store(as_float(item.get("t")) or 0.0, str(item.get("kind")),
                                               as_int(item.get("rank")), data))
            except ValueError:
                continue
        return cls(as_float(fields.get("t")) or 0.0, [m for m in metrics if m is not None],
                   [line for line in logs if line is not None], events,
                   [GpuSample(*row) for row in _list(fields.get("gpus")) if isinstance(row, list) and len(row) == 8],
                   [row for row in (ProcessSample.from_wire(item) for item in _list(fields.get("procs")))
                    if row is not None],
                   _objects(fields.get("ranks")), _object(fields.get("run")), _objects(fields.get("nodes")),
                   bool(fields.get("decimated")))


def _list(value: object) -> list[object]:
    return value if isinstance(value, list) else []


def _object(value: object) -> dict[str, object] | None:
    return value if isinstance(value, dict) else None


def _objects(value: object) -> list[dict[str, object]]:
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


WORKER_MESSAGES: tuple[type[Message], ...] = (Hello, Metrics, Heartbeat, ExceptionReport, Exit, ParamHash,
                                              StacksWritten, FlightRecord, Notice)
AGENT_MESSAGES: tuple[type[Message], ...] = (AgentHello, Log, WorkerLost, ProcessSamples, NodeExit, RemoteStacks)
SUBSCRIBER_MESSAGES: tuple[type[Message], ...] = (Subscribe, StopRequest, DumpStacks, Ping)
HUB_MESSAGES: tuple[type[Message], ...] = (Snapshot, Update, HistoryEnd, Bye, Pong, Error, Pace)
MESSAGE_CLASSES: dict[str, type[Message]] = {
    message_class.TYPE: message_class
    for message_class in (*WORKER_MESSAGES, *AGENT_MESSAGES, *SUBSCRIBER_MESSAGES, *HUB_MESSAGES)}
"""Hub-side decoding: ``type`` -> class (``stop`` is a subscriber's ``StopRequest`` here; an
agent reads the head's ``stop`` as ``AgentStop``, ``launch`` as ``Launch``)."""


def decode_message(line: bytes, allowed: frozenset[str] = ALL_TYPES) -> Message:
    """Parse one line into its typed message.

    Raises:
        ProtocolError: as ``decode``, or a required field is missing or of the wrong type.
    """
    fields = decode(line, allowed)
    return MESSAGE_CLASSES[str(fields["type"])].from_wire(fields)  # decode checked it is text


def message_from_wire(fields: WireFields) -> Message:
    """The typed message for fields already decoded (``fields["type"]`` names it).

    Raises:
        ProtocolError: an unknown type, or a required field is missing or of the wrong type.
    """
    message_class = MESSAGE_CLASSES.get(str(fields.get("type")))
    if message_class is None:
        raise ProtocolError("unknown_type", repr(fields.get("type"))[:40])
    return message_class.from_wire(fields)
