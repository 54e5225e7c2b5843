"""The contract between the parts of Rankwatch: every message, record and event kind.

Standard library only: workers import it in the user's interpreter, the runner,
its agents, the CLI and the GUI import the very same module (as
``rankwatch._protocol``). Each message and record is defined here once, as a small
typed value with ``to_wire`` / ``from_wire``; nothing else decodes, reorders or
words them again.

Framing: newline-delimited JSON, one message per line, UTF-8, at most
``MAX_LINE_BYTES`` per line. Every message is an object with ``type`` and ``v``
(the protocol version). A receiver drops (and counts) a line that is too long, is
not JSON, nests deeper than JSON needs here, is not an object, lacks ``type``/``v``
or has an unknown ``type``; one bad line never ends a connection by itself, but a
client that keeps sending garbage is disconnected (``runner.hub``).

Messages, by direction (wire fields beyond ``type``/``v``; the class in brackets)

Worker (or agent) -> hub
  hello       [Hello] token, run_key, rank, local_rank, node_rank, world_size, local_world_size,
              host, pid, python, python_version, torch, restart, argv
              (sent first on every connection, so again after a reconnect; argv is
              [script, *args], or ["-m", module, *args]; torch is null when not installed)
  metrics     [Metrics] rank, items: [[t, step, name, value, source], ...]
              (a ``MetricRecord`` without its rank, which the message carries)
              source is "auto" (measured by the bootstrap), "log" (rankwatch.log)
              or "parsed" (read from printed lines); t is wall-clock time.time();
              "auto" step = optimizer steps completed before that step (0 first);
              value is null when not finite (NaN/inf loss)
  heartbeat   [Heartbeat] rank, t, step, dropped, sent
              dropped: records lost because the queue was full or the hub unreachable;
              sent: metric items handed to the socket; both cumulative (one dropped
              record = one rankwatch.log call or one step's auto metrics); step is null
              before the first record
  exception   [ExceptionReport] rank, t, exc_type, message, traceback, thread, fatal
              thread: name of the thread that raised; fatal: true for the exception
              that ends the process (followed by exit), false for an exception
              that only ended another thread (an event, the worker goes on)
  exit        [Exit] rank, t, code  (the last message of a worker: exit status, 1 after an
              uncaught exception, -2 after an uncaught KeyboardInterrupt)
  param_hash  [ParamHash] rank, t, step, digest    (DDP consistency check: SHA-1 hex of each
              parameter's float64 sum and sum of squares, after the update of
              optimizer step `step`; equal across replicas in sync)
  stacks      [StacksWritten] rank, t, path            (a faulthandler dump was written there)
  flight_record [FlightRecord] rank, t, record         (its Flight Recorder, read after a stack dump)
  notice      [Notice] rank, t, key, ...facts   (how the script was launched does not fit
              torchrun; rankwatch._launch_checks; the runner words it, runner.diagnosis.launcher):
              key "self_spawn": function, nprocs, file, line, function_name (the call site);
              key "local_rank_unpassed": option, value (what the script parsed), local_rank;
              key "local_rank_spelling": passed, instead_of (the legacy option was respelled);
              key "no_process_group" (``NO_PROCESS_GROUP``, rankwatch._group_check): steps,
              world_size, local_world_size, and when the script imported Lightning Fabric: fabric,
              fabric_environment, fabric_strategy, fabric_world_size, fabric_accelerator,
              fabric_launched (a rank of a WORLD_SIZE > 1 job made that many optimizer steps
              without a process group)

Agent (remote node) -> hub, in addition (over TCP; the first line must be agent_hello
with the run's token, and the hub refuses any other TCP client)
  agent_hello [AgentHello] token, run_key, node_rank, host, pid, version, torch
              (version: Rankwatch's on the node; torch: the node interpreter's, or null)
  log         [Log] node_rank, rank, t, stream, line, node   (a worker's output line; rank is
              null for torchrun's and the agent's own lines; node: the host label)
  worker_lost [WorkerLost] rank, t     (a worker's connection to its agent ended without exit)
  process_samples [ProcessSamples] node_rank, rows: [PROCESS_SAMPLE]
              (the node's ranks, sampled there: the head cannot see remote processes)
  remote_stacks [RemoteStacks] node_rank, rank, host, text   (a rank's stack dump, taken by
              its agent on a stack_request; text: what faulthandler wrote, or "" with why)
  node_exit   [NodeExit] node_rank, t, code, reason, dropped   (the agent's last message:
              torchrun's exit status; reason: why it stopped the workers, or null; dropped:
              messages it could not forward)
  Workers' messages (hello, metrics, ...) are forwarded as they are, each with its
  "rank"; a forwarded hello carries no token (the agent checked its own).

Head runner -> agent (over ssh's stdin, never through the hub; runner.remote)
  launch      [Launch] token, head_host, head_port, run_key, run, node_rank, host, argv, env,
              cwd, grace, sample_interval   (the first line)
  stop        [AgentStop] force: bool   (later lines; end of stdin: the head is gone, stop too)
  stack_request [StackRequest] ranks: [int]   (signal these ranks for their stacks; each
              answers with remote_stacks, and its Flight Recorder through the relay)

Subscriber -> hub
  subscribe   [Subscribe] history: bool (replay the stored history first), logs: bool
  stop        [StopRequest] force: bool
  dump_stacks [DumpStacks]
  ping        [Ping]

Hub -> subscriber
  snapshot    [Snapshot] run: RUN, ranks: [RANK], nodes: [NODE], spec: {...profile table...}
              (the first message after subscribe)
  update      [Update] t, metrics: [METRIC], logs: [LOG_LINE], events: [EVENT],
              gpus: [GPU_SAMPLE], procs: [PROCESS_SAMPLE], ranks: [RANK] (only rows that
              changed), run: RUN or null (when changed), nodes: [NODE] (changed),
              decimated: bool (metrics were thinned because this subscriber fell behind;
              the store has them all). A history replay is a series of updates, each line
              at most ``HISTORY_LINE_BYTES``.
  history_end [HistoryEnd] (after a history replay: what follows is live)
  bye         [Bye] reason                                  (the run ended)
  pong / error  [Pong] / [Error] message

Hub -> worker (on the worker's own connection; read by its reporter once a second)
  pace        [Pace] flush_latency   (seconds a record may wait in the worker before it is
              sent: short while someone watches the run live, longer while nobody does;
              runner.hub.freshness. Sent after the hello and whenever it changes)

Records (the same order on the wire, in the hub's pending batch, in the store's reads
and in the GUI; one definition each):

  METRIC          [MetricRecord]  [rank, t, step, name, value, source]
  LOG_LINE        [LogLine]       [rank, t, stream, line, node]   (rank null: a launcher line)
  GPU_SAMPLE      [GpuSample]     [t, gpu_index, utilization, memory_used, memory_total,
                                   power_watts, temperature_c, sm_clock_mhz]
  PROCESS_SAMPLE  [ProcessSample] [t, rank, pid, cpu_percent, rss_bytes, threads]
  EVENT           [Event]         {kind (EventKind), t, rank (or null), message, ...fields}
  RANK            [RankRow]       {rank, local_rank, node_rank, host, pid, gpu_index, state,
                   exit_code, step, loss, loss_source, step_time, data_wait_share (0..1),
                   comm_wait_share (0..1), samples_per_s, steps_per_s, last_seen, first_seen, cpu_percent, rss_bytes,
                   gpu_util, gpu_mem_used, dropped (worker), rejected (hub), sent (worker),
                   world_size, python, torch, restart, working_since, phase_clock,
                   phase_shares {phase: share}, skipped_steps, gpu_mem_allocated,
                   gpu_mem_reserved, gpu_mem_peak}   (null where unknown)
  RUN             {id, run_key, profile, status, created, started, ended, exit_code,
                   world_size, host, command, workdir, runner_pid, runner_identity, socket,
                   spec_toml, summary}
                   (the store's runs row; status: runner.state.RunStatus values;
                   summary: the failure triage once the run ended, else null)
  NODE            {node_rank, host, state, processes, changed, detail}

Also here, once: lenient number parsing (``as_int``, ``as_float``), text the store
can hold (``clean_text``), the data-wait share (``data_wait_share``, ``StepPairs``),
and how a rank ended (``RankFailure``; its words are ``runner.exit_status``'s).
"""

from __future__ import annotations

import json
import time
from enum import Enum

TYPE_CHECKING = False  # `typing` costs ~3 ms to import and workers import this module
if TYPE_CHECKING:
    from collections.abc import Iterable
    from typing import Any, ClassVar, TypeVar

    MessageT = TypeVar("MessageT", bound="Message")

VERSION = 1
MAX_LINE_BYTES = 1 << 20
"""A line longer than this is dropped: 1 MiB holds thousands of metric records."""
HISTORY_LINE_BYTES = 256 << 10
"""A history replay is cut into update lines of about this size (always under ``MAX_LINE_BYTES``)."""

INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1
"""SQLite's INTEGER range: an integer outside it cannot be stored."""
LATEST_PLAUSIBLE_TIME = 1e11
"""Timestamps are seconds since 1970; anything past the year 5000 is garbage."""
MAX_NAME_CHARS = 128
MAX_SOURCE_CHARS = 16
MAX_TEXT_CHARS = 64 * 1024
"""Longest text field kept whole (a log line, a traceback is longer: ``MAX_LONG_TEXT_CHARS``)."""
MAX_LONG_TEXT_CHARS = 1 << 20

WORKER_TYPES = frozenset({"hello", "metrics", "heartbeat", "exception", "exit", "param_hash", "stacks", "flight_record",
                          "notice"})
AGENT_TYPES = frozenset({"agent_hello", "log", "worker_lost", "process_samples", "node_exit", "remote_stacks"})
AGENT_CONTROL_TYPES = frozenset({"launch", "stop", "stack_request"})
"""Head runner -> agent, on ssh's stdin (not hub messages: not in ``ALL_TYPES``)."""
SUBSCRIBER_TYPES = frozenset({"subscribe", "stop", "dump_stacks", "ping"})
HUB_TYPES = frozenset({"snapshot", "update", "history_end", "bye", "pong", "error", "pace"})
ALL_TYPES = WORKER_TYPES | AGENT_TYPES | SUBSCRIBER_TYPES | HUB_TYPES

SOURCE_AUTO = "auto"
SOURCE_LOG = "log"
SOURCE_PARSED = "parsed"
SOURCE_PRIORITY = {SOURCE_AUTO: 0, SOURCE_LOG: 1, SOURCE_PARSED: 2}
"""When a rank reports one metric from several sources, the lowest number is shown."""

# Metric names the bootstrap measures without code changes.
LOSS = "loss"
STEP_TIME = "step_time"
"""Seconds between consecutive optimizer steps."""
DATA_WAIT = "data_wait"
"""Seconds of a step spent waiting for the DataLoader iterator."""
SAMPLES_PER_SECOND = "samples_per_s"
STEPS_PER_SECOND = "steps_per_s"
"""``1 / step_time``: a rank row's field (``RankRow.steps_per_s``), derived by the hub from
``step_time``. Not sent or stored as a series since issue 17 (one row less per step);
stores written before keep theirs."""
DATA_WAIT_SHARE = "data_wait_share"
"""Share (0..1) of a step spent waiting for data: ``data_wait_share`` of the same step's records."""
CPU_WAIT = "cpu_wait"
"""Seconds of a step the training thread was ready to run but waited for a CPU (Linux run queue)."""
COMPUTE_TIME = "compute_time"
"""Seconds of a step the rank worked on its own, on the step's clock: its phases less the waits for
data and for communication (and, on the CPU clock, for a CPU): ``compute_time``."""
COMM_WAIT = "comm_wait"
"""Seconds of a step in collectives, as stores written before the step phases kept it (the CPU
thread's time; a GPU job's was not the GPU's). Read only to show such runs; now ``PHASE_COMM``."""
SKIPPED_STEP = "skipped_step"
"""1 for an optimizer step that ``GradScaler`` skipped (inf/NaN gradients): counted as a step, its
loss kept, and shown as skipped. Only skipped steps carry the record."""

PHASES = ("data", "h2d", "forward", "backward", "comm", "optimizer", "rest")
"""Where an optimizer step's time goes, on the step's own clock (``rankwatch._phases``):

* ``data``: waiting for the DataLoader's next batch (on a GPU: the time the GPU waited for it);
* ``h2d``: from the batch to the first module call (copying it to the device, preparing it);
* ``forward``: from the first module call to the backward (the loss included);
* ``backward``: the backward, until the rank's own gradients are computed;
* ``comm``: exposed communication: waiting for collectives that did not overlap (the end of
  DDP's gradient all-reduce, synchronous ``torch.distributed`` calls);
* ``optimizer``: inside ``optimizer.step``;
* ``rest``: everything else (``zero_grad``, logging, gradient clipping, the loop itself).

A measured step's phases add up to its span on its clock, exactly; a phase that did not happen
in the step (no DataLoader, no process group, no module call) is None (not measured), and its
time is in the phase that was running."""
COMPUTING_PHASES = ("h2d", "forward", "backward", "optimizer")
"""The phases in which a rank works on the step itself (the verdict's "computing" share, the GUI's
sort key); ``rest`` is the loop's own work around it."""
PHASE_METRICS = tuple(f"phase_{phase}" for phase in PHASES)
"""The metric name of each phase, in ``PHASES`` order: seconds on the step's clock."""
PHASE_DATA, PHASE_H2D, PHASE_FORWARD, PHASE_BACKWARD, PHASE_COMM, PHASE_OPTIMIZER, PHASE_REST = PHASE_METRICS
CLOCK_GPU = "gpu"
"""Phases timed with CUDA events on the training stream, read later: what the GPU spent."""
CLOCK_CPU = "cpu"
"""Phases timed with the training thread's clock (a CPU job)."""
CLOCKS = frozenset({CLOCK_GPU, CLOCK_CPU})
PHASE_CLOCK = "phase_clock"
"""The clock a step's phases were timed on, as a record of each measured step: 1 for the GPU's
(``CLOCK_GPU``), 0 for the CPU's (``clock_name`` reads it back)."""
_CLOCK_VALUES = {CLOCK_GPU: 1, CLOCK_CPU: 0}


def clock_name(value: float | None) -> str | None:
    """``CLOCK_GPU`` or ``CLOCK_CPU`` from a ``PHASE_CLOCK`` record's value; None when unknown."""
    if value == 1:
        return CLOCK_GPU
    if value == 0:
        return CLOCK_CPU
    return None

GPU_MEMORY_ALLOCATED = "gpu_mem_allocated"
"""Bytes of GPU memory the rank's tensors hold (torch's caching allocator), read about once a second."""
GPU_MEMORY_RESERVED = "gpu_mem_reserved"
"""Bytes the allocator holds from the driver (allocated plus its cache)."""
GPU_MEMORY_PEAK = "gpu_mem_peak"
"""The most bytes the rank's tensors held at once since it started."""
GPU_MEMORY_METRICS = (GPU_MEMORY_ALLOCATED, GPU_MEMORY_RESERVED, GPU_MEMORY_PEAK)


class ProtocolError(ValueError):
    """A line that is not a valid message. ``reason`` is a short, countable label."""

    def __init__(self, reason: str, detail: str = ""):
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason


# ---- lenient values: one definition of "a number", "an integer", "text" ---------------------


def as_int(value: object) -> int | None:
    """An integer SQLite can hold, from a JSON number (a float is truncated); else None.

    Booleans are not numbers here, and neither are NaN, infinities or integers
    outside the 64-bit range.
    """
    kind = type(value)
    if kind is int:
        return value if INT64_MIN <= value <= INT64_MAX else None  # type: ignore[return-value,operator]
    if kind is float:
        number: float = value  # type: ignore[assignment]
        if number - number == 0 and INT64_MIN <= number <= INT64_MAX:
            return int(number)
    return None


def as_count(value: object) -> int | None:
    """``as_int`` of a count: None for a negative number (no count is; a forged ``dropped: -1``
    would read "-1 records dropped")."""
    number = as_int(value)
    return number if number is not None and number >= 0 else None


def as_float(value: object) -> float | None:
    """A finite float from a JSON number; None for anything else (booleans included)."""
    kind = type(value)
    if kind is float:
        number: float = value  # type: ignore[assignment]
        return number if number - number == 0 else None
    if kind is int:
        try:
            return float(value)  # type: ignore[arg-type]
        except OverflowError:
            return None
    return None


def as_time(value: object) -> float | None:
    """A plausible wall-clock time (seconds since 1970), else None."""
    number = as_float(value)
    return number if number is not None and 0.0 < number < LATEST_PLAUSIBLE_TIME else None


def is_storable_text(text: str) -> bool:
    """Whether ``text`` encodes to UTF-8 (JSON lets lone surrogates through; SQLite refuses them)."""
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def clean_text(text: str, limit: int = MAX_TEXT_CHARS) -> str:
    """``text`` as the store can hold it: lone surrogates replaced by U+FFFD, at most ``limit`` chars."""
    if len(text) > limit:
        text = text[:limit]
    if is_storable_text(text):
        return text
    return "".join("\ufffd" if "\ud800" <= char <= "\udfff" else char for char in text)


def as_text(value: object, limit: int = MAX_TEXT_CHARS) -> str | None:
    """``clean_text`` of a string; None for anything else."""
    return clean_text(value, limit) if isinstance(value, str) else None


# ---- framing -----------------------------------------------------------------------------------


def encode(message_type: str, **fields: Any) -> bytes:
    """One framed message. ``allow_nan=False`` keeps the output strict JSON (NaN becomes null)."""
    body = {"type": message_type, "v": VERSION}
    body.update(fields)
    try:
        text = json.dumps(body, separators=(",", ":"), allow_nan=False)
    except ValueError:
        text = json.dumps(_replace_non_finite(body), separators=(",", ":"))
    return text.encode("utf-8", "surrogatepass") + b"\n"


def _replace_non_finite(value: Any) -> Any:
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        return None
    if isinstance(value, dict):
        return {key: _replace_non_finite(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_replace_non_finite(item) for item in value]
    return value


def decode(line: bytes, allowed: frozenset[str] = ALL_TYPES) -> dict[str, Any]:
    """Parse one line (with or without its newline) into the message's fields.

    Raises:
        ProtocolError: too long, not UTF-8 JSON, nested too deeply (``[`` x 5000
            would exhaust the parser's recursion), not an object, missing or
            unknown ``type``, or a ``v`` this side does not speak.
    """
    if len(line) > MAX_LINE_BYTES:
        raise ProtocolError("oversized", f"{len(line)} bytes")
    try:
        message = json.loads(line)
    except RecursionError:
        raise ProtocolError("too_deep") from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise ProtocolError("malformed", str(exc)[:80]) from None
    if not isinstance(message, dict):
        raise ProtocolError("not_an_object")
    message_type = message.get("type")
    if not isinstance(message_type, str) or message_type not in allowed:
        raise ProtocolError("unknown_type", repr(message_type)[:40])
    if message.get("v") != VERSION:
        raise ProtocolError("bad_version", repr(message.get("v"))[:20])
    return message


def decode_message(line: bytes, allowed: frozenset[str] = ALL_TYPES) -> Message:
    """Parse one line into its typed message.

    Raises:
        ProtocolError: as ``decode``, or a required field is missing or of the wrong type.
    """
    fields = decode(line, allowed)
    return MESSAGE_CLASSES[fields["type"]].from_wire(fields)


def message_from_wire(fields: dict[str, Any]) -> Message:
    """The typed message for fields already decoded (``fields["type"]`` names it).

    Raises:
        ProtocolError: an unknown type, or a required field is missing or of the wrong type.
    """
    message_class = MESSAGE_CLASSES.get(str(fields.get("type")))
    if message_class is None:
        raise ProtocolError("unknown_type", repr(fields.get("type"))[:40])
    return message_class.from_wire(fields)


# ---- records -------------------------------------------------------------------------------


MetricRow = tuple[int, float, "int | None", str, "float | None", str]
"""A metric record as a plain tuple ``(rank, t, step, name, value, source)``: what the hub's hot
path keeps and hands to SQLite. ``MetricRecord`` is the same row with its fields named."""


class MetricRecord(tuple[int, float, int | None, str, float | None, str]):
    """One value of one named series of one rank: ``(rank, t, step, name, value, source)``.

    The order is the same everywhere (wire, pending batch, store, replay, GUI). A tuple:
    the hub makes 200k of these a second and hands them to SQLite as they are.
    """

    __slots__ = ()

    def __new__(cls, rank: int, t: float, step: int | None, name: str, value: float | None,
                source: str) -> MetricRecord:
        return tuple.__new__(cls, (rank, t, step, name, value, source))

    @property
    def rank(self) -> int:
        return self[0]

    @property
    def t(self) -> float:
        return self[1]

    @property
    def step(self) -> int | None:
        return self[2]

    @property
    def name(self) -> str:
        return self[3]

    @property
    def value(self) -> float | None:
        """None: reported but not finite (a NaN loss), shown as a gap."""
        return self[4]

    @property
    def source(self) -> str:
        """``SOURCE_AUTO``, ``SOURCE_LOG`` or ``SOURCE_PARSED``."""
        return self[5]

    def to_wire(self) -> list[Any]:
        return list(self)

    @classmethod
    def from_wire(cls, item: object) -> MetricRecord | None:
        """A published record ``[rank, t, step, name, value, source]``; None when malformed."""
        if not isinstance(item, (list, tuple)) or len(item) != 6:
            return None
        rank, t, step, name, value, source = item
        rank, t = as_int(rank), as_float(t)
        if rank is None or t is None or type(name) is not str:
            return None
        return cls(rank, t, as_int(step), name, as_float(value), source if type(source) is str else SOURCE_AUTO)

    def __repr__(self) -> str:
        return "MetricRecord(rank={!r}, t={!r}, step={!r}, name={!r}, value={!r}, source={!r})".format(*self)


class MetricRejection:
    """Why metric items were dropped at ingest: counts by reason (``reasons``)."""

    MALFORMED = "malformed item"
    TIME = "time not a plausible timestamp"
    STEP = "step out of range"
    NAME = "name not text"
    NAME_TOO_LONG = f"name longer than {MAX_NAME_CHARS} characters"
    NOT_A_NUMBER = "value not a number"
    VALUE = "value out of range"
    SOURCE = "source not text"


KNOWN_SOURCES = frozenset({SOURCE_AUTO, SOURCE_LOG, SOURCE_PARSED})


def metric_records(rank: int, items: object, rejected: dict[str, int],
                   examples: dict[str, str] | None = None) -> list[MetricRow]:
    """The records of one ``metrics`` message's items, as plain ``MetricRow`` tuples; what
    cannot be stored is left out and counted in ``rejected`` by reason (``MetricRejection``),
    and ``examples`` gets the name of the first item left out for each reason (where it has one).

    The hot path of the hub (200k records/s): the usual item (a float time, an int step, a
    short ASCII name, a float value, a known source) passes one combined check and becomes
    a tuple; anything else goes through ``_unusual_metric``, which decides slowly.
    """
    records: list[MetricRow] = []
    if type(items) is not list:
        rejected[MetricRejection.MALFORMED] = rejected.get(MetricRejection.MALFORMED, 0) + 1
        return records
    append = records.append
    latest, low, high, longest, sources = LATEST_PLAUSIBLE_TIME, INT64_MIN, INT64_MAX, MAX_NAME_CHARS, KNOWN_SOURCES
    for item in items:
        if type(item) is list:
            length = len(item)
            if length == 5:
                t, step, name, value, source = item
                if (type(t) is float and 0.0 < t < latest
                        and (step is None or (type(step) is int and low <= step <= high))
                        and type(name) is str and name.isascii() and 0 < len(name) <= longest
                        and source in sources):
                    kind = type(value)
                    if kind is float:
                        append((rank, t, step, name, value if value - value == 0 else None, source))
                        continue
                    if kind is int and low <= value <= high:
                        append((rank, t, step, name, value, source))
                        continue
            elif length == STEP_ROW_LENGTH:
                records += _step_row_records(rank, item, rejected)
                continue
        record = _unusual_metric(rank, item, rejected, examples)
        if record is not None:
            append(record)
    return records


# ---- step rows: one step of the zero-code instrumentation in one item ------------------------

STEP_ROW_LENGTH = 9
"""A ``metrics`` item of this length is a **step row**, ``[t, step, loss, step_time, data_wait,
samples, cpu_wait, skipped, phases]``: everything the zero-code instrumentation measured of one
optimizer step (``rankwatch._instrument``), each value None when not measured, ``samples`` the
batch sizes counted (0: none), ``skipped`` true when ``GradScaler`` skipped the step, ``phases``
None or ``[clock, data, h2d, forward, backward, comm, optimizer, rest]`` (``CLOCKS``, then
``PHASES`` in seconds, each None when not measured). The hub expands it into the step's records
(``step_row_records``), deriving ``samples_per_s`` and ``compute_time``. Why not one
``[t, step, name, value, source]`` item per value: a step was then up to 14 items to format on the
worker's reporter thread, which shares the GIL with training, and to parse on the hub."""
PHASE_ROW_LENGTH = 1 + len(PHASES)


def compute_time(clock: str, phases: list[Any] | tuple[Any, ...], cpu_wait: float | None = None) -> float | None:
    """Seconds of a step's span not spent waiting, on its clock: the span (its phases' sum) less the
    data phase, the exposed communication and, on the CPU clock, the time the thread waited for a
    CPU (the GPU does not wait for the host's run queue). None when a phase is not finite.

    ``phases`` is ``PHASES`` in order (seconds or None); a phase not measured counts as none.
    """
    span = 0.0
    for value in phases:
        if value is not None:
            span += value
    if span - span != 0:
        return None
    waited = (phases[0] or 0.0) + (phases[4] or 0.0)
    if clock == CLOCK_CPU and cpu_wait is not None:
        waited += cpu_wait
    return max(0.0, span - waited)


def step_row_records(rank: int, row: list[Any] | tuple[Any, ...]) -> list[MetricRow]:
    """The records of a well-formed step ``row`` (``STEP_ROW_LENGTH``), in the order a step's records
    always have: loss, step time, samples per second, data wait, cpu wait, skipped step, the phases'
    clock, the phases (``PHASES`` order), compute time.

    A value that is not finite (a NaN loss) is a record whose value is None (shown as a gap), as
    for any metric item; nothing is derived from it.
    """
    t, step, loss, step_time, data_wait, samples, cpu_wait, skipped, phases = row
    auto = SOURCE_AUTO
    records: list[MetricRow] = []
    if loss is not None:
        records.append((rank, t, step, LOSS, _finite(loss), auto))
    if step_time is not None:
        step_time = _finite(step_time)
        records.append((rank, t, step, STEP_TIME, step_time, auto))
        if samples and step_time is not None and step_time > 0:
            records.append((rank, t, step, SAMPLES_PER_SECOND, _finite(samples / step_time), auto))
    if data_wait is not None:
        records.append((rank, t, step, DATA_WAIT, _finite(data_wait), auto))
    if cpu_wait is not None:
        cpu_wait = _finite(cpu_wait)
        records.append((rank, t, step, CPU_WAIT, cpu_wait, auto))
    if skipped:
        records.append((rank, t, step, SKIPPED_STEP, 1, auto))
    if phases is not None:
        clock, *values = phases
        records.append((rank, t, step, PHASE_CLOCK, _CLOCK_VALUES[clock], auto))
        for name, value in zip(PHASE_METRICS, values, strict=False):
            if value is not None:
                records.append((rank, t, step, name, _finite(value), auto))
        records.append((rank, t, step, COMPUTE_TIME, compute_time(clock, values, cpu_wait), auto))
    return records


def step_row_size(row: list[Any] | tuple[Any, ...]) -> int:
    """How many records ``step_row_records`` makes of the well-formed step ``row``, without making
    them: the worker counts what it sent (its heartbeats' ``sent``) in records, as the hub counts
    what it received."""
    _t, _step, loss, step_time, data_wait, samples, cpu_wait, skipped, phases = row
    size = (loss is not None) + (data_wait is not None) + (cpu_wait is not None) + bool(skipped)
    if step_time is not None:
        step_time = _finite(step_time)
        size += 1 + bool(samples and step_time is not None and step_time > 0)
    if phases is not None:
        size += 2 + sum(value is not None for value in phases[1:])
    return size


def _finite(value: float) -> float | None:
    """``value``, or None when it is not finite."""
    return value if value - value == 0 else None


def _usual_phases(phases: object) -> bool:
    """Whether a step row's ``phases`` is None or of the usual shape (a clock, then floats or None)."""
    if phases is None:
        return True
    if type(phases) is not list or len(phases) != PHASE_ROW_LENGTH or phases[0] not in CLOCKS:
        return False
    return all(not (value is not None and type(value) is not float) for value in phases[1:])


def _step_row_records(rank: int, row: list[Any], rejected: dict[str, int]) -> list[MetricRow]:
    """The records of a step row from the wire (the hub's hot path: one combined check)."""
    t, step, loss, step_time, data_wait, samples, cpu_wait, skipped, phases = row
    if (type(t) is float and 0.0 < t < LATEST_PLAUSIBLE_TIME and type(step) is int and INT64_MIN <= step <= INT64_MAX
            and type(samples) is int and 0 <= samples <= INT64_MAX
            and (loss is None or type(loss) is float) and (step_time is None or type(step_time) is float)
            and (data_wait is None or type(data_wait) is float) and (cpu_wait is None or type(cpu_wait) is float)
            and type(skipped) is bool and _usual_phases(phases)):
        return step_row_records(rank, row)
    return _unusual_step_row(rank, row, rejected)


def _is_number(value: object) -> bool:
    return value is None or type(value) is float or (type(value) is int and INT64_MIN <= value <= INT64_MAX)


def _unusual_step_row(rank: int, row: list[Any], rejected: dict[str, int]) -> list[MetricRow]:
    """A step row that is not of the usual shape: integers where floats are usual are taken as
    floats; a row with a field of any other kind is left out whole, its records counted in
    ``rejected`` (one, when even that cannot be told)."""
    t, step, loss, step_time, data_wait, samples, cpu_wait, skipped, phases = row
    measured = (loss, step_time, data_wait, cpu_wait)
    reason = None
    if as_time(t) is None or type(t) not in (int, float):
        reason = MetricRejection.TIME
    elif type(step) is not int or not INT64_MIN <= step <= INT64_MAX:
        reason = MetricRejection.STEP
    elif (type(samples) is not int or not 0 <= samples <= INT64_MAX or type(skipped) is not bool
          or not all(_is_number(value) for value in measured)
          or not (phases is None or (type(phases) is list and len(phases) == PHASE_ROW_LENGTH
                                     and phases[0] in CLOCKS and all(_is_number(value) for value in phases[1:])))):
        reason = MetricRejection.VALUE
    if reason is None:
        loss, step_time, data_wait, cpu_wait = (value if value is None else float(value) for value in measured)
        if phases is not None:
            phases = [phases[0], *(value if value is None else float(value) for value in phases[1:])]
        return step_row_records(rank, [float(t), step, loss, step_time, data_wait, samples, cpu_wait, skipped, phases])
    try:
        count = max(1, step_row_size(row))
    except TypeError:  # values that cannot even be compared or counted
        count = 1
    rejected[reason] = rejected.get(reason, 0) + count
    return []


def _unusual_metric(rank: int, item: object, rejected: dict[str, int],
                    examples: dict[str, str] | None = None) -> MetricRow | None:
    """The record of an item that is not of the usual shape, or None (counted in ``rejected``).

    A name is never cut short (two long names could become one key) and a value that is not a
    number (a string, a list) is never taken as "not measured": either item is left out, alone.
    """
    reason = MetricRejection.MALFORMED
    name: object = None
    if type(item) is list and len(item) == 5:
        t, step, name, value, source = item
        time_value = as_time(t)
        if time_value is None:
            reason = MetricRejection.TIME
        elif step is not None and (type(step) in (int, float)) and as_int(step) is None:
            reason = MetricRejection.STEP
        elif type(name) is not str or not name or not is_storable_text(name):
            reason = MetricRejection.NAME
        elif len(name) > MAX_NAME_CHARS:
            reason = MetricRejection.NAME_TOO_LONG
        elif type(value) is int and not INT64_MIN <= value <= INT64_MAX:
            reason = MetricRejection.VALUE
        elif value is not None and type(value) not in (int, float, bool):  # a boolean: a gap, as before
            reason = MetricRejection.NOT_A_NUMBER
        elif type(source) is not str or not source or not source.isascii():
            reason = MetricRejection.SOURCE
        else:
            step_value = as_int(step) if type(step) in (int, float) else None  # other types: no step
            return (rank, time_value, step_value, name, as_float(value), source[:MAX_SOURCE_CHARS])
    rejected[reason] = rejected.get(reason, 0) + 1
    if examples is not None and reason not in examples and type(name) is str and name:
        examples[reason] = clean_text(name, EXAMPLE_NAME_CHARS) + ("…" if len(name) > EXAMPLE_NAME_CHARS else "")
    return None


EXAMPLE_NAME_CHARS = 40
"""How much of a rejected item's name its ``records_rejected`` event quotes."""


class LogLine(tuple[int | None, float, str, str, str | None]):
    """One line a rank (or the launcher, ``rank`` None) printed: ``(rank, t, stream, line, node)``."""

    __slots__ = ()

    def __new__(cls, rank: int | None, t: float, stream: str, line: str, node: str | None) -> LogLine:
        return tuple.__new__(cls, (rank, t, stream, line, node))

    @property
    def rank(self) -> int | None:
        return self[0]

    @property
    def t(self) -> float:
        return self[1]

    @property
    def stream(self) -> str:
        """``stdout`` or ``stderr``."""
        return self[2]

    @property
    def line(self) -> str:
        return self[3]

    @property
    def node(self) -> str | None:
        """The host label of the node it came from."""
        return self[4]

    def to_wire(self) -> list[Any]:
        return list(self)

    @classmethod
    def from_wire(cls, item: object) -> LogLine | None:
        """A published line ``[rank, t, stream, line, node]``; None when malformed."""
        if not isinstance(item, (list, tuple)) or len(item) < 4:
            return None
        rank, t, stream, line = item[:4]
        node = item[4] if len(item) > 4 else None
        text = as_text(line)
        if text is None:
            return None
        return cls(as_int(rank), as_time(t) or 0.0, as_text(stream, MAX_SOURCE_CHARS) or "stdout", text,
                   as_text(node, MAX_NAME_CHARS))

    def __repr__(self) -> str:
        return "LogLine(rank={!r}, t={!r}, stream={!r}, line={!r}, node={!r})".format(*self)


class GpuSample(tuple[float, int, float | None, int | None, int | None, float | None, float | None,
                      float | None]):
    """One GPU sampled by NVML at ``t``: ``(t, gpu_index, utilization (%), memory_used (bytes),
    memory_total, power_watts, temperature_c, sm_clock_mhz)``."""

    __slots__ = ()

    def __new__(cls, t: float, gpu_index: int, utilization: float | None, memory_used: int | None,
                memory_total: int | None, power_watts: float | None, temperature_c: float | None,
                sm_clock_mhz: float | None) -> GpuSample:
        return tuple.__new__(cls, (t, gpu_index, utilization, memory_used, memory_total, power_watts,
                                   temperature_c, sm_clock_mhz))

    @property
    def t(self) -> float:
        return self[0]

    @property
    def gpu_index(self) -> int:
        return self[1]

    def to_wire(self) -> list[Any]:
        return list(self)


class ProcessSample(tuple[float, int, int | None, float | None, int | None, int | None]):
    """One rank's process sampled by psutil on its node: ``(t, rank, pid, cpu_percent (% of one
    core), rss_bytes, threads)``."""

    __slots__ = ()

    def __new__(cls, t: float, rank: int, pid: int | None, cpu_percent: float | None, rss_bytes: int | None,
                threads: int | None) -> ProcessSample:
        return tuple.__new__(cls, (t, rank, pid, cpu_percent, rss_bytes, threads))

    @property
    def t(self) -> float:
        return self[0]

    @property
    def rank(self) -> int:
        return self[1]

    @property
    def cpu_percent(self) -> float | None:
        return self[3]

    @property
    def rss_bytes(self) -> int | None:
        return self[4]

    def to_wire(self) -> list[Any]:
        return list(self)

    @classmethod
    def from_wire(cls, row: object) -> ProcessSample | None:
        """``[t, rank, pid, cpu_percent, rss_bytes, threads]`` (all numbers); None when malformed."""
        if not isinstance(row, (list, tuple)) or len(row) != 6:
            return None
        t, rank = as_time(row[0]), as_int(row[1])
        numbers = [as_float(value) for value in row[2:]]
        if t is None or rank is None or any(number is None for number in numbers):
            return None
        return cls(t, rank, as_int(row[2]), as_float(row[3]), as_int(row[4]), as_int(row[5]))


class Bottleneck(str, Enum):
    """What limits a rank or a run: the verdict of ``runner.diagnosis.bottleneck`` (its ``bottleneck``
    events and the summary's ``diagnostics.bottleneck``), as every surface names it."""

    INPUT = "input-bound"
    COMMUNICATION = "communication-bound"
    LAUNCH = "launch-bound"
    COMPUTE = "compute-bound"
    """Healthy: the device computes."""
    STRAGGLER = "straggler"


class EventKind(str, Enum):
    """Every kind of event the runner records and publishes; nothing else is emitted.

    Fields beyond ``kind, t, rank, message`` are listed for each (``rank`` is the rank
    concerned, or null for the run as a whole).
    """

    RANK_STARTED = "rank_started"
    """A rank said hello: host, pid, local_rank, node_rank, restart."""
    RANK_EXITED = "rank_exited"
    """A rank ended with exit code 0: exit_code."""
    RANK_FAILED = "rank_failed"
    """A rank ended with a non-zero exit code: exit_code."""
    RANK_STOPPED = "rank_stopped"
    """A rank ended because another failed (its error only says a peer went away): after (the rank
    that failed before it, or null), stopped_by_failure; no exit code: torchrun's report gives it."""
    EXCEPTION = "exception"
    """The uncaught exception that ends a rank: exc_type, exc_message, traceback, thread."""
    THREAD_EXCEPTION = "thread_exception"
    """An exception that ended another thread of a rank (it goes on): as ``exception``."""
    CONNECTION_LOST = "connection_lost"
    """A rank's connection ended without an exit message (killed from outside?)."""
    PARAM_HASH = "param_hash"
    """A parameter fingerprint: step, digest."""
    STACKS_WRITTEN = "stacks_written"
    """A rank's faulthandler wrote a stack dump: path."""
    STACKS = "stacks"
    """A stack capture of every rank, analysed (``runner.diagnosis.stacks``): groups, outlier, path, ..."""
    STALLED = "stalled"
    """No step progress for too long (``runner.diagnosis.stalls``): step, seconds, threshold, ..."""
    RESUMED = "resumed"
    """A stalled rank made progress again: step, stalled_seconds."""
    STRAGGLER = "straggler"
    """A rank slows every step, or no longer does (``runner.diagnosis.stragglers``): active, cause, phase, ..."""
    BOTTLENECK = "bottleneck"
    """The run's bottleneck verdict changed (``runner.diagnosis.bottleneck``): verdict, evidence, action,
    rank, phase, shares, clock, gpu_busy, ranks."""
    FLIGHT_RECORDER = "flight_recorder"
    """The ranks' Flight Recorders compared (``runner.diagnosis.flight_records``): message, culprits, ..."""
    DIVERGENCE = "divergence"
    """DDP replicas' parameters differ (``runner.diagnosis.consistency``): step, ranks, reference, digests."""
    NODE_LOST = "node_lost"
    """A node's agent dropped out: node_rank, host, reason."""
    AGENT_CONNECTED = "agent_connected"
    """A node's agent connected over TCP: node_rank, host."""
    AGENTS_LISTENING = "agents_listening"
    """The hub listens on TCP for the agents: addresses, port."""
    REFUSED = "refused"
    """Clients refused (a wrong token, not an agent over TCP): count, reasons; one per run at most
    every ``runner.hub`` interval, so refused clients cannot grow the store."""
    RECORDS_REJECTED = "records_rejected"
    """Records a rank sent that could not be stored (a value out of range, ...): count, reasons."""
    STORE_INCOMPLETE = "store_incomplete"
    """The store stopped taking records (disk full, unwritable): reason; the run goes on."""
    STOP_REQUESTED = "stop_requested"
    """A subscriber asked to stop the run: force."""
    STOPPING = "stopping"
    """The runner is stopping the run (on request, Ctrl-C, a lost node)."""
    RUN_FINISHED = "run_finished"
    """The run ended: status, exit_code, summary."""
    WARNING = "warning"
    """Something the user should know that is not one of the above."""
    HUB_STATS = "hub_stats"
    """The hub's counters at the end of the run (bad lines, refused clients, ...): counters."""
    LAUNCH_MISMATCH = "launch_mismatch"
    """How the script was launched does not fit torchrun (``runner.diagnosis.launcher``):
    key, level, ranks, title, cause, advice."""
    SLURM_SUBMITTED = "slurm_submitted"
    """The run was submitted to Slurm (``runner.slurm``): job_id, ..."""
    SLURM = "slurm"
    """Slurm's record of the job changed (pending and why, running, ended): its fields."""
    LAUNCH_MODE = "launch_mode"
    """How the script is started, and why (``runner.launch.launch_mode``): mode ("torchrun" or
    "self-spawn"), reason, chosen_by ("profile" when the user chose it, else "auto")."""


class Event:
    """Something that happened in a run, as stored and as published."""

    __slots__ = ("t", "kind", "rank", "message", "fields")

    def __init__(self, t: float, kind: EventKind | str, rank: int | None, message: str,
                 fields: dict[str, Any] | None = None) -> None:
        self.t = t
        self.kind = EventKind(kind)
        """Raises ValueError for a kind the contract does not define: no event is emitted unlisted."""
        self.rank = rank
        self.message = message
        self.fields = fields or {}

    def data_json(self) -> str:
        """What the store keeps in ``events.data``: the message and the kind's fields."""
        return json.dumps({"message": self.message, **self.fields}, default=str)

    def to_row(self) -> tuple[float, str, int | None, str]:
        """``(t, kind, rank, data)`` for the store's events table."""
        return (self.t, self.kind.value, self.rank, self.data_json())

    def to_wire(self) -> dict[str, Any]:
        return {**self.fields, "kind": self.kind.value, "t": self.t, "rank": self.rank, "message": self.message}

    @classmethod
    def from_store(cls, t: float, kind: str, rank: int | None, data: dict[str, Any] | None) -> Event:
        """From the store's row (``data`` decoded). A kind from a newer Rankwatch becomes a warning."""
        fields = dict(data or {})
        message = str(fields.pop("message", "") or "")
        try:
            event_kind = EventKind(kind)
        except ValueError:
            event_kind, fields["unknown_kind"] = EventKind.WARNING, kind
        return cls(t, event_kind, rank, message, fields)

    def __repr__(self) -> str:
        return f"Event({self.kind.value}, rank={self.rank}, {self.message!r})"


class RankRow:
    """One rank as the hub shows it (the RANK shape): identity, state, latest values, counts."""

    __slots__ = ("rank", "local_rank", "node_rank", "host", "pid", "gpu_index", "state", "exit_code", "step",
                 "loss", "loss_source", "step_time", "data_wait_share", "comm_wait_share", "samples_per_s", "steps_per_s",
                 "last_seen", "first_seen", "cpu_percent", "rss_bytes", "gpu_util", "gpu_mem_used", "dropped",
                 "rejected", "sent", "world_size", "python", "torch", "restart", "working_since", "phase_clock",
                 "phase_shares", "skipped_steps", "gpu_mem_allocated", "gpu_mem_reserved", "gpu_mem_peak")

    def __init__(self, rank: int) -> None:
        self.rank = rank
        self.local_rank: int | None = None
        self.node_rank: int | None = None
        self.host: str | None = None
        self.pid: int | None = None
        self.gpu_index: int | None = None
        self.state = "waiting"
        """A ``runner.state.RankState`` value."""
        self.exit_code: int | None = None
        self.step: int | None = None
        self.loss: float | None = None
        self.loss_source: str | None = None
        self.step_time: float | None = None
        self.data_wait_share: float | None = None
        self.comm_wait_share: float | None = None
        """Share (0..1) of the recent measured steps' span in exposed communication (``phase_shares``'
        ``comm``)."""
        self.samples_per_s: float | None = None
        self.steps_per_s: float | None = None
        self.last_seen: float | None = None
        self.first_seen: float | None = None
        """When the rank's first message (its hello, or its first line) arrived."""
        self.cpu_percent: float | None = None
        self.rss_bytes: int | None = None
        self.gpu_util: float | None = None
        self.gpu_mem_used: int | None = None
        self.dropped = 0
        """Records the worker could not send (its queue was full, the hub away): from its heartbeats."""
        self.rejected = 0
        """Records the hub received but could not store (out of range, ...)."""
        self.sent: int | None = None
        """Metric items the worker handed to its socket, as of its last heartbeat."""
        self.world_size: int | None = None
        self.python: str | None = None
        self.torch: str | None = None
        self.restart: int | None = None
        self.working_since: float | None = None
        """While the rank works without making steps (an evaluation, a checkpoint: its heartbeats say
        so, ``Heartbeat.working``): when it made its last step (wall clock). None while it steps, and
        once a heartbeat says it stopped working."""
        self.phase_clock: str | None = None
        """The clock of the rank's newest measured phases (``CLOCKS``); None before one."""
        self.phase_shares: dict[str, float | None] | None = None
        """Where the rank's recent measured steps go: phase (``PHASES``) -> share of their span
        (``PhaseWindow``); None before a measured step."""
        self.skipped_steps = 0
        """Steps ``GradScaler`` skipped (``SKIPPED_STEP``), counted among the steps."""
        self.gpu_mem_allocated: int | None = None
        """Bytes the rank's tensors hold on its GPU, torch's allocator (``GPU_MEMORY_ALLOCATED``)."""
        self.gpu_mem_reserved: int | None = None
        self.gpu_mem_peak: int | None = None

    def to_wire(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in RankRow.__slots__}


def working_without_steps(row: dict[str, Any], now: float) -> str:
    """``working without steps for 42 s (since step 310)`` for a RANK row whose rank works without
    stepping (``RankRow.working_since``); empty otherwise. One wording for the terminal and the GUI."""
    since = row.get("working_since")
    if not isinstance(since, (int, float)):
        return ""
    seconds = max(0.0, now - since)
    duration = f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min"
    step = row.get("step")
    if step is None:
        return f"working for {duration}, no step yet"
    return f"working without steps for {duration} (since step {step})"


# ---- the data-wait share and the phase shares: computed here, once ---------------------------


def data_wait_share(step_time: float | None, data_wait: float | None) -> float | None:
    """The share (0..1) of a step spent waiting (for data, or in collectives); None when not measured."""
    if step_time is None or data_wait is None or not step_time > 0:
        return None
    return min(1.0, max(0.0, data_wait / step_time))


PHASE_INDEX = {name: index for index, name in enumerate(PHASE_METRICS)}


def phases_by_step(records: Iterable[MetricRow]) -> dict[int, list[float | None]]:
    """The measured phases of each step among ``records`` (``PHASES`` order, None where not
    measured): the zero-code instrumentation's, as ``step_row_records`` made them."""
    steps: dict[int, list[float | None]] = {}
    index_of = PHASE_INDEX
    for _rank, _t, step, name, value, source in records:
        index = index_of.get(name)
        if index is None or step is None or source != SOURCE_AUTO:
            continue
        phases = steps.get(step)
        if phases is None:
            phases = steps[step] = [None] * len(PHASES)
        phases[index] = value
    return steps


class PhaseWindow:
    """A rank's last ``limit`` measured steps' phases: where its steps go, as shares of their span.

    The share of a phase is its seconds over the window's span (the sum of every phase), so the
    shares add up to 1; a phase measured in none of the window's steps has no share (None). One
    definition for the hub's rank rows and the GUI.
    """

    __slots__ = ("_steps", "_limit")

    def __init__(self, limit: int = 20) -> None:
        self._steps: list[list[float | None]] = []
        self._limit = limit

    def add(self, phases: list[float | None]) -> None:
        self._steps.append(phases)
        if len(self._steps) > self._limit:
            del self._steps[0]

    def shares(self) -> dict[str, float | None] | None:
        """Phase name (``PHASES``) -> share (0..1) of the window's span; None before a measured step."""
        return phase_shares(self._steps)


def phase_shares(steps: Iterable[list[float | None]]) -> dict[str, float | None] | None:
    """Phase name (``PHASES``) -> its share of the steps' span (the sum of every phase); None when
    no step was measured. Non-finite values (gaps) count as not measured."""
    totals: list[float | None] = [None] * len(PHASES)
    for phases in steps:
        for index, value in enumerate(phases):
            if value is not None and value - value == 0:
                total = totals[index]
                totals[index] = value if total is None else total + value
    span = sum(total for total in totals if total is not None)
    if all(total is None for total in totals):
        return None
    return {phase: (None if total is None else (total / span if span > 0 else 0.0))
            for phase, total in zip(PHASES, totals, strict=False)}


class StepPairs:
    """Pairs each step's ``step_time`` and one other record of one rank into its share of the step.

    ``part`` is ``DATA_WAIT`` (the data-wait share) or ``COMM_WAIT`` (the share in
    collectives). The worker sends both for every step (usually in the same
    message); whichever comes second completes the pair. At most ``limit``
    incomplete steps are kept.
    """

    __slots__ = ("_pending", "_limit", "_part")

    def __init__(self, limit: int = 256, part: str = DATA_WAIT) -> None:
        self._pending: dict[int, list[Any]] = {}
        self._limit = limit
        self._part = part

    def add(self, step: int | None, t: float, name: str, value: float | None) -> tuple[int, float, float | None] | None:
        """Feed one record; returns ``(step, t, share)`` when it completes a pair."""
        if step is None or (name != STEP_TIME and name != self._part):
            return None
        pair = self._pending.get(step)
        if pair is None:
            pair = self._pending[step] = [None, None, t, 0]
        pair[0 if name == STEP_TIME else 1] = value
        pair[2] = max(pair[2], t)
        pair[3] |= 1 << (0 if name == STEP_TIME else 1)
        if pair[3] == 3:
            del self._pending[step]
            return step, pair[2], data_wait_share(pair[0], pair[1])
        if len(self._pending) > self._limit:
            self._pending.pop(next(iter(self._pending)))
        return None


# ---- how a rank ended (its words: runner.exit_status) ----------------------------------------------


class Evidence:
    """How triage knows when and how a rank ended (``RankFailure.evidence``)."""

    EXCEPTION = "exception"
    CONNECTION_LOST = "connection lost"
    EXIT_CODE = "exit code"
    TORCHRUN_REPORT = "torchrun report"


def stall_outcome(stall: dict[str, Any]) -> str:
    """How a stall (a ``stalls`` record of a run's diagnostics) ended, as the tail of its summary line."""
    after = stall.get("resumed_after")
    if isinstance(after, (int, float)):
        return f"; resumed after {after:.0f} s"
    finished = stall.get("finished_after")
    if isinstance(finished, (int, float)):
        return f"; then it finished by itself {finished:.0f} s after its last progress (exit code 0): not a hang"
    return "; never resumed"


class RankFailure:
    """How one rank ended, as failure triage found it (``runner.diagnosis.triage``), and its words."""

    __slots__ = ("rank", "host", "exit_code", "signal", "exc_type", "exc_message", "exception_line", "traceback",
                 "when", "evidence", "pid", "traceback_source", "error_file", "kernel_log", "after")

    def __init__(self, rank: int | None, host: str | None = None, exit_code: int | None = None,
                 signal: str | None = None, exc_type: str | None = None, exc_message: str | None = None,
                 exception_line: str | None = None, traceback: str | None = None, when: float | None = None,
                 evidence: str = "", pid: int | None = None, traceback_source: str | None = None,
                 error_file: str | None = None, kernel_log: str | None = None, after: int | None = None) -> None:
        self.rank = rank
        self.host = host
        self.exit_code = exit_code
        self.signal = signal
        """The signal's name when it died of one (``SIGKILL``)."""
        self.exc_type = exc_type
        self.exc_message = exc_message
        self.exception_line = exception_line
        self.traceback = traceback
        self.when = when
        self.evidence = evidence
        """How we know: an ``Evidence`` value."""
        self.pid = pid
        self.traceback_source = traceback_source
        """Where the traceback came from: "bootstrap", "error file", "torchrun report"."""
        self.error_file = error_file
        self.kernel_log = kernel_log
        """The kernel's OOM-killer line for this rank's pid (SIGKILL only), when found."""
        self.after = after
        """The rank whose failure this one's end followed (torchrun's SIGTERM, or its peer went away):
        it did not fail by itself (``runner.exit_status.rank_end_words``)."""

    def to_wire(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in RankFailure.__slots__}

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> RankFailure:
        """Lenient: a field that is missing or of the wrong type is unknown."""
        def text(name: str) -> str | None:
            return as_text(data.get(name), MAX_LONG_TEXT_CHARS)

        return cls(rank=as_int(data.get("rank")), host=text("host"), exit_code=as_int(data.get("exit_code")),
                   signal=text("signal"), exc_type=text("exc_type"), exc_message=text("exc_message"),
                   exception_line=text("exception_line"), traceback=text("traceback"),
                   when=as_float(data.get("when")), evidence=text("evidence") or "", pid=as_int(data.get("pid")),
                   traceback_source=text("traceback_source"), error_file=text("error_file"),
                   kernel_log=text("kernel_log"), after=as_int(data.get("after")))

    @property
    def who(self) -> str:
        """``rank 1 on node-a``."""
        rank = "an unknown rank" if self.rank is None else f"rank {self.rank}"
        return rank + (f" on {self.host}" if self.host else "")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RankFailure) and self.to_wire() == other.to_wire()

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"RankFailure({self.who!r}, exit_code={self.exit_code!r}, signal={self.signal!r})"


def _records(count: int) -> str:
    return f"{count} record{'s' if count != 1 else ''}"


def describe_losses(summary: dict[str, Any]) -> list[str]:
    """What a run's store lacks, one line per rank (``rank 3: 120 records dropped (...)``), from the
    summary's ``losses`` and ``store_incomplete`` (``runner.hub.Hub.losses``)."""
    lines = []
    for row in summary.get("losses") or []:
        if not isinstance(row, dict):
            continue
        parts = []
        dropped, rejected, missing = (as_int(row.get(key)) or 0 for key in ("dropped", "rejected", "not_received"))
        if dropped:
            parts.append(f"{_records(dropped)} dropped by the worker (its queue was full or the runner unreachable)")
        if rejected:
            parts.append(f"{_records(rejected)} dropped by the runner (values the store cannot hold)")
        if missing:
            parts.append(f"{_records(missing)} sent but never received (a connection broke)")
        if parts:
            lines.append(f"rank {row.get('rank')}: " + "; ".join(parts))
    incomplete = summary.get("store_incomplete")
    if incomplete:
        lines.append(f"store incomplete: {incomplete}; what followed was shown live but not stored")
    return lines


# ---- messages ---------------------------------------------------------------------------------

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

    def to_wire(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.field_names()}

    def encode(self) -> bytes:
        return encode(self.TYPE, **self.to_wire())

    @classmethod
    def from_wire(cls: type[MessageT], fields: dict[str, Any]) -> MessageT:
        raise NotImplementedError

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Message) and type(other) is type(self) and self.to_wire() == other.to_wire()

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.field_names())
        return f"{type(self).__name__}({fields})"


_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


def _required_int(fields: dict[str, Any], name: str) -> int:
    value = as_int(fields.get(name))
    if value is None:
        raise ProtocolError("invalid", f"{fields.get('type')}: {name} must be an integer")
    return value


MAX_PID = 1 << 22
"""Linux's ``PID_MAX_LIMIT``: no process id is above it."""


def as_pid(value: object) -> int | None:
    """A process id (1 .. ``MAX_PID``) from a JSON number; None for anything else: a pid of 0 or
    -1 names a process group or every process to ``kill``, and no sampler can follow it."""
    pid = as_int(value)
    return pid if pid is not None and 0 < pid <= MAX_PID else None


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
    def from_wire(cls, fields: dict[str, Any]) -> Hello:
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

    def to_wire(self) -> dict[str, Any]:
        return {"rank": self.rank, "items": [list(record[1:]) for record in self.records]}

    @classmethod
    def from_wire(cls, fields: dict[str, Any], rank: int | None = None) -> Metrics:
        """``rank``: the rank the connection said hello as (a worker's own batches), else the message's."""
        if rank is None:
            rank = _required_int(fields, "rank")
        rejected: dict[str, int] = {}
        examples: dict[str, str] = {}
        return cls(rank, metric_records(rank, fields.get("items"), rejected, examples), rejected, examples)


def encode_metric_items(rank: int, items: list[list[Any]]) -> bytes:
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
        finite: list[list[Any]] = []
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


def _all_finite(row: list[Any]) -> bool:
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
    def from_wire(cls, fields: dict[str, Any]) -> Heartbeat:
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
    def from_wire(cls, fields: dict[str, Any]) -> ExceptionReport:
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
    def from_wire(cls, fields: dict[str, Any]) -> Exit:
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
    def from_wire(cls, fields: dict[str, Any]) -> ParamHash:
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
    def from_wire(cls, fields: dict[str, Any]) -> StacksWritten:
        return cls(_required_int(fields, "rank"), as_time(fields.get("t")), as_text(fields.get("path")))


class FlightRecord(Message):
    """A rank's Flight Recorder (``rankwatch._flight_recorder.snapshot``), sent after a stack dump.

    ``record`` holds ``pg_config``, ``pg_status``, ``entries`` (torch's fields, newest
    last) or ``error`` (why it could not be read); ``runner.diagnosis.flight_recorder``
    reads it.
    """

    __slots__ = ("rank", "t", "record")
    TYPE = "flight_record"

    def __init__(self, rank: int, t: float | None, record: dict[str, Any]) -> None:
        self.rank = rank
        self.t = t
        self.record = record

    @classmethod
    def from_wire(cls, fields: dict[str, Any]) -> FlightRecord:
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

    def __init__(self, rank: int, t: float | None, key: str, facts: dict[str, Any] | None = None) -> None:
        self.rank = rank
        self.t = t
        self.key = key
        self.facts = facts or {}

    def to_wire(self) -> dict[str, Any]:
        return {**self.facts, "rank": self.rank, "t": self.t, "key": self.key}

    @classmethod
    def from_wire(cls, fields: dict[str, Any]) -> Notice:
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
    def from_wire(cls, fields: dict[str, Any]) -> AgentHello:
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

    def to_wire(self) -> dict[str, Any]:
        line = self.line
        return {"node_rank": self.node_rank, "rank": line.rank, "t": line.t, "stream": line.stream,
                "line": line.line, "node": line.node}

    @classmethod
    def from_wire(cls, fields: dict[str, Any]) -> Log:
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
    def from_wire(cls, fields: dict[str, Any]) -> RemoteStacks:
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
    def from_wire(cls, fields: dict[str, Any]) -> StackRequest:
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
    def from_wire(cls, fields: dict[str, Any]) -> WorkerLost:
        return cls(_required_int(fields, "rank"), as_time(fields.get("t")) or time.time())


class ProcessSamples(Message):
    """A remote node's ranks' CPU and memory. ``rejected`` (not on the wire): malformed rows."""

    __slots__ = ("node_rank", "rows", "rejected")
    TYPE = "process_samples"

    def __init__(self, node_rank: int | None, rows: list[ProcessSample], rejected: int = 0) -> None:
        self.node_rank = node_rank
        self.rows = rows
        self.rejected = rejected

    def to_wire(self) -> dict[str, Any]:
        return {"node_rank": self.node_rank, "rows": [list(row) for row in self.rows]}

    @classmethod
    def from_wire(cls, fields: dict[str, Any]) -> ProcessSamples:
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
    def from_wire(cls, fields: dict[str, Any]) -> NodeExit:
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

    def to_wire(self) -> dict[str, Any]:
        fields = super().to_wire()
        fields["argv"] = list(self.argv)
        return fields

    @classmethod
    def from_wire(cls, fields: dict[str, Any]) -> Launch:
        """Raises ProtocolError naming the first field that is missing or of the wrong type."""
        expected: dict[str, type] = {"token": str, "head_host": str, "head_port": int, "run_key": str,
                                     "node_rank": int, "host": str, "argv": list, "env": dict, "cwd": str}
        for name, kind in expected.items():
            if not isinstance(fields.get(name), kind) or isinstance(fields.get(name), bool):
                raise ProtocolError("invalid", f"the launch message has no valid {name!r}")
        argv, env = fields["argv"], fields["env"]
        if not argv or not all(isinstance(word, str) for word in argv):
            raise ProtocolError("invalid", "the launch message has an empty or non-text argv")
        if not all(isinstance(key, str) and isinstance(value, str) for key, value in env.items()):
            raise ProtocolError("invalid", "the launch message's env must map text to text")

        def positive(name: str, default: float) -> float:
            number = as_float(fields.get(name))
            return number if number is not None and number > 0 else default

        return cls(token=fields["token"], head_host=fields["head_host"], head_port=fields["head_port"],
                   run_key=fields["run_key"], run=as_int(fields.get("run")), node_rank=fields["node_rank"],
                   host=fields["host"], argv=tuple(argv), env=dict(env), cwd=fields["cwd"],
                   grace=positive("grace", 5.0), sample_interval=positive("sample_interval", 1.0))


class AgentStop(Message):
    """The head asks an agent to stop its node's workers."""

    __slots__ = ("force",)
    TYPE = "stop"

    def __init__(self, force: bool = False) -> None:
        self.force = force

    @classmethod
    def from_wire(cls, fields: dict[str, Any]) -> AgentStop:
        return cls(bool(fields.get("force")))


class Subscribe(Message):
    """A subscriber (GUI, ``rankwatch attach``) asks for the run's updates."""

    __slots__ = ("history", "logs")
    TYPE = "subscribe"

    def __init__(self, history: bool = True, logs: bool = True) -> None:
        self.history = history
        self.logs = logs

    @classmethod
    def from_wire(cls, fields: dict[str, Any]) -> Subscribe:
        return cls(bool(fields.get("history", True)), bool(fields.get("logs", True)))


class StopRequest(AgentStop):
    """A subscriber asks the runner to stop the run (same wire shape as the head's ``stop``)."""

    __slots__ = ()

    @classmethod
    def from_wire(cls, fields: dict[str, Any]) -> StopRequest:
        return cls(bool(fields.get("force")))


class _Empty(Message):
    __slots__ = ()

    @classmethod
    def from_wire(cls: type[MessageT], fields: dict[str, Any]) -> MessageT:
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


class HistoryEnd(_Empty):
    """The history replay is complete: what follows is live."""

    __slots__ = ()
    TYPE = "history_end"


class Bye(Message):
    """The run ended (``reason``: its status); the hub closes the connection."""

    __slots__ = ("reason",)
    TYPE = "bye"

    def __init__(self, reason: str) -> None:
        self.reason = reason

    @classmethod
    def from_wire(cls, fields: dict[str, Any]) -> Bye:
        return cls(as_text(fields.get("reason")) or "ended")


class Error(Message):
    """The hub refuses something (a wrong token, ...)."""

    __slots__ = ("message",)
    TYPE = "error"

    def __init__(self, message: str) -> None:
        self.message = message

    @classmethod
    def from_wire(cls, fields: dict[str, Any]) -> Error:
        return cls(as_text(fields.get("message")) or "")


class Pace(Message):
    """How long a worker may hold records before sending them (hub -> worker).

    Every batch costs the rank a wake-up and the runner a line to decode, on cores the
    ranks need (issue 17), so the hub asks for fewer, larger batches while nobody
    watches the run live, and for fresh ones as soon as someone does.
    """

    __slots__ = ("flush_latency",)
    TYPE = "pace"

    def __init__(self, flush_latency: float) -> None:
        self.flush_latency = flush_latency

    @classmethod
    def from_wire(cls, fields: dict[str, Any]) -> Pace:
        latency = as_float(fields.get("flush_latency"))
        if latency is None or latency < 0:
            raise ProtocolError("invalid", "pace: flush_latency must be a number of seconds >= 0")
        return cls(latency)


class Snapshot(Message):
    """The run as it is now: the first message after ``subscribe``."""

    __slots__ = ("run", "ranks", "nodes", "spec")
    TYPE = "snapshot"

    def __init__(self, run: dict[str, Any] | None, ranks: list[dict[str, Any]], nodes: list[dict[str, Any]],
                 spec: dict[str, Any]) -> None:
        self.run = run
        """The RUN row."""
        self.ranks = ranks
        """RANK rows (``RankRow.to_wire``)."""
        self.nodes = nodes
        self.spec = spec
        """The profile table the run was launched with."""

    @classmethod
    def from_wire(cls, fields: dict[str, Any]) -> Snapshot:
        return cls(_object(fields.get("run")), _objects(fields.get("ranks")), _objects(fields.get("nodes")),
                   _object(fields.get("spec")) or {})


class Update(Message):
    """What changed since the last update (or a chunk of a history replay)."""

    __slots__ = ("t", "metrics", "logs", "events", "gpus", "procs", "ranks", "run", "nodes", "decimated")
    TYPE = "update"

    def __init__(self, t: float, metrics: list[MetricRow] | None = None, logs: list[LogLine] | None = None,
                 events: list[Event] | None = None, gpus: list[GpuSample] | None = None,
                 procs: list[ProcessSample] | None = None, ranks: list[dict[str, Any]] | None = None,
                 run: dict[str, Any] | None = None, nodes: list[dict[str, Any]] | None = None,
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

    def to_wire(self) -> dict[str, Any]:
        return {"t": self.t, "metrics": self.metrics, "logs": self.logs,
                "events": [event.to_wire() for event in self.events], "gpus": self.gpus, "procs": self.procs,
                "ranks": self.ranks, "run": self.run, "nodes": self.nodes, "decimated": self.decimated}

    @classmethod
    def from_wire(cls, fields: dict[str, Any]) -> Update:
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


def _list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def _object(value: object) -> dict[str, Any] | None:
    return value if isinstance(value, dict) else None


def _objects(value: object) -> list[dict[str, Any]]:
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
