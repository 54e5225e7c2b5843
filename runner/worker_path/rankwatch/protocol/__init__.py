"""The contract between the parts of Rankwatch: every message, record and event kind.

Standard library only: workers import it in the user's interpreter, the runner,
its agents, the CLI and the GUI import the very same package (as
``rankwatch.protocol``). Each message and record is defined once, as a small typed
value with ``to_wire`` / ``from_wire``; nothing else decodes, reorders or words them
again. By job:

  wire      the framing: ``encode``, ``decode``, ``ProtocolError``, the message kinds,
            ``WireFields`` (a decoded object as received: ``Mapping[str, object]``)
  messages  every message below as a typed value (``decode_message``)
  records   the records the hub validates and stores, the metric names, step rows
  events    ``EventKind``, ``Event``, ``Bottleneck``, ``RankRow``
  shares    the data-wait and phase shares, computed once
  numbers   lenient numbers and text (``as_int``, ``as_float``, ``clean_text``)

How a rank ended (``RankFailure``) is the runner's: ``runner.rank_failure``.

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
              decimated: bool (metrics were thinned because this subscriber fell behind,
              or, in a history replay, older metrics stand for more records; the store has
              them all). A history replay is a series of updates, each line at most
              ``HISTORY_LINE_BYTES``, bounded whatever the run's size.
  history_end [HistoryEnd] decimated: bool, left_out: {table: rows not sent}  (both optional;
              after a history replay: what follows is live)
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
"""

from __future__ import annotations

from rankwatch.protocol.events import (
    Bottleneck as Bottleneck,
)
from rankwatch.protocol.events import (
    Event as Event,
)
from rankwatch.protocol.events import (
    EventKind as EventKind,
)
from rankwatch.protocol.events import (
    RankRow as RankRow,
)
from rankwatch.protocol.events import (
    working_without_steps as working_without_steps,
)
from rankwatch.protocol.messages import (
    AGENT_MESSAGES as AGENT_MESSAGES,
)
from rankwatch.protocol.messages import (
    FALLBACK_ITEMS_PER_LINE as FALLBACK_ITEMS_PER_LINE,
)
from rankwatch.protocol.messages import (
    HUB_MESSAGES as HUB_MESSAGES,
)
from rankwatch.protocol.messages import (
    MESSAGE_CLASSES as MESSAGE_CLASSES,
)
from rankwatch.protocol.messages import (
    NO_PROCESS_GROUP as NO_PROCESS_GROUP,
)
from rankwatch.protocol.messages import (
    SUBSCRIBER_MESSAGES as SUBSCRIBER_MESSAGES,
)
from rankwatch.protocol.messages import (
    WORKER_MESSAGES as WORKER_MESSAGES,
)
from rankwatch.protocol.messages import (
    AgentHello as AgentHello,
)
from rankwatch.protocol.messages import (
    AgentStop as AgentStop,
)
from rankwatch.protocol.messages import (
    Bye as Bye,
)
from rankwatch.protocol.messages import (
    DumpStacks as DumpStacks,
)
from rankwatch.protocol.messages import (
    Error as Error,
)
from rankwatch.protocol.messages import (
    ExceptionReport as ExceptionReport,
)
from rankwatch.protocol.messages import (
    Exit as Exit,
)
from rankwatch.protocol.messages import (
    FlightRecord as FlightRecord,
)
from rankwatch.protocol.messages import (
    Heartbeat as Heartbeat,
)
from rankwatch.protocol.messages import (
    Hello as Hello,
)
from rankwatch.protocol.messages import (
    HistoryEnd as HistoryEnd,
)
from rankwatch.protocol.messages import (
    Launch as Launch,
)
from rankwatch.protocol.messages import (
    Log as Log,
)
from rankwatch.protocol.messages import (
    Message as Message,
)
from rankwatch.protocol.messages import (
    Metrics as Metrics,
)
from rankwatch.protocol.messages import (
    NodeExit as NodeExit,
)
from rankwatch.protocol.messages import (
    Notice as Notice,
)
from rankwatch.protocol.messages import (
    Pace as Pace,
)
from rankwatch.protocol.messages import (
    ParamHash as ParamHash,
)
from rankwatch.protocol.messages import (
    Ping as Ping,
)
from rankwatch.protocol.messages import (
    Pong as Pong,
)
from rankwatch.protocol.messages import (
    ProcessSamples as ProcessSamples,
)
from rankwatch.protocol.messages import (
    RemoteStacks as RemoteStacks,
)
from rankwatch.protocol.messages import (
    Snapshot as Snapshot,
)
from rankwatch.protocol.messages import (
    StackRequest as StackRequest,
)
from rankwatch.protocol.messages import (
    StacksWritten as StacksWritten,
)
from rankwatch.protocol.messages import (
    StopRequest as StopRequest,
)
from rankwatch.protocol.messages import (
    Subscribe as Subscribe,
)
from rankwatch.protocol.messages import (
    Update as Update,
)
from rankwatch.protocol.messages import (
    WorkerLost as WorkerLost,
)
from rankwatch.protocol.messages import (
    decode_message as decode_message,
)
from rankwatch.protocol.messages import (
    encode_metric_items as encode_metric_items,
)
from rankwatch.protocol.messages import (
    message_from_wire as message_from_wire,
)
from rankwatch.protocol.numbers import (
    INT64_MAX as INT64_MAX,
)
from rankwatch.protocol.numbers import (
    INT64_MIN as INT64_MIN,
)
from rankwatch.protocol.numbers import (
    LATEST_PLAUSIBLE_TIME as LATEST_PLAUSIBLE_TIME,
)
from rankwatch.protocol.numbers import (
    MAX_LONG_TEXT_CHARS as MAX_LONG_TEXT_CHARS,
)
from rankwatch.protocol.numbers import (
    MAX_NAME_CHARS as MAX_NAME_CHARS,
)
from rankwatch.protocol.numbers import (
    MAX_PID as MAX_PID,
)
from rankwatch.protocol.numbers import (
    MAX_SOURCE_CHARS as MAX_SOURCE_CHARS,
)
from rankwatch.protocol.numbers import (
    MAX_TEXT_CHARS as MAX_TEXT_CHARS,
)
from rankwatch.protocol.numbers import (
    as_count as as_count,
)
from rankwatch.protocol.numbers import (
    as_float as as_float,
)
from rankwatch.protocol.numbers import (
    as_int as as_int,
)
from rankwatch.protocol.numbers import (
    as_pid as as_pid,
)
from rankwatch.protocol.numbers import (
    as_text as as_text,
)
from rankwatch.protocol.numbers import (
    as_time as as_time,
)
from rankwatch.protocol.numbers import (
    clean_text as clean_text,
)
from rankwatch.protocol.numbers import (
    is_storable_text as is_storable_text,
)
from rankwatch.protocol.records import (
    CLOCK_CPU as CLOCK_CPU,
)
from rankwatch.protocol.records import (
    CLOCK_GPU as CLOCK_GPU,
)
from rankwatch.protocol.records import (
    CLOCKS as CLOCKS,
)
from rankwatch.protocol.records import (
    COMM_WAIT as COMM_WAIT,
)
from rankwatch.protocol.records import (
    COMPUTE_TIME as COMPUTE_TIME,
)
from rankwatch.protocol.records import (
    COMPUTING_PHASES as COMPUTING_PHASES,
)
from rankwatch.protocol.records import (
    CPU_WAIT as CPU_WAIT,
)
from rankwatch.protocol.records import (
    DATA_WAIT as DATA_WAIT,
)
from rankwatch.protocol.records import (
    DATA_WAIT_SHARE as DATA_WAIT_SHARE,
)
from rankwatch.protocol.records import (
    EXAMPLE_NAME_CHARS as EXAMPLE_NAME_CHARS,
)
from rankwatch.protocol.records import (
    GPU_MEMORY_ALLOCATED as GPU_MEMORY_ALLOCATED,
)
from rankwatch.protocol.records import (
    GPU_MEMORY_METRICS as GPU_MEMORY_METRICS,
)
from rankwatch.protocol.records import (
    GPU_MEMORY_PEAK as GPU_MEMORY_PEAK,
)
from rankwatch.protocol.records import (
    GPU_MEMORY_RESERVED as GPU_MEMORY_RESERVED,
)
from rankwatch.protocol.records import (
    KNOWN_SOURCES as KNOWN_SOURCES,
)
from rankwatch.protocol.records import (
    LOSS as LOSS,
)
from rankwatch.protocol.records import (
    PHASE_BACKWARD as PHASE_BACKWARD,
)
from rankwatch.protocol.records import (
    PHASE_CLOCK as PHASE_CLOCK,
)
from rankwatch.protocol.records import (
    PHASE_COMM as PHASE_COMM,
)
from rankwatch.protocol.records import (
    PHASE_DATA as PHASE_DATA,
)
from rankwatch.protocol.records import (
    PHASE_FORWARD as PHASE_FORWARD,
)
from rankwatch.protocol.records import (
    PHASE_H2D as PHASE_H2D,
)
from rankwatch.protocol.records import (
    PHASE_METRICS as PHASE_METRICS,
)
from rankwatch.protocol.records import (
    PHASE_OPTIMIZER as PHASE_OPTIMIZER,
)
from rankwatch.protocol.records import (
    PHASE_REST as PHASE_REST,
)
from rankwatch.protocol.records import (
    PHASE_ROW_LENGTH as PHASE_ROW_LENGTH,
)
from rankwatch.protocol.records import (
    PHASES as PHASES,
)
from rankwatch.protocol.records import (
    SAMPLES_PER_SECOND as SAMPLES_PER_SECOND,
)
from rankwatch.protocol.records import (
    SKIPPED_STEP as SKIPPED_STEP,
)
from rankwatch.protocol.records import (
    SOURCE_AUTO as SOURCE_AUTO,
)
from rankwatch.protocol.records import (
    SOURCE_LOG as SOURCE_LOG,
)
from rankwatch.protocol.records import (
    SOURCE_PARSED as SOURCE_PARSED,
)
from rankwatch.protocol.records import (
    SOURCE_PRIORITY as SOURCE_PRIORITY,
)
from rankwatch.protocol.records import (
    STEP_ROW_LENGTH as STEP_ROW_LENGTH,
)
from rankwatch.protocol.records import (
    STEP_TIME as STEP_TIME,
)
from rankwatch.protocol.records import (
    STEPS_PER_SECOND as STEPS_PER_SECOND,
)
from rankwatch.protocol.records import (
    GpuSample as GpuSample,
)
from rankwatch.protocol.records import (
    LogLine as LogLine,
)
from rankwatch.protocol.records import (
    MetricRecord as MetricRecord,
)
from rankwatch.protocol.records import (
    MetricRejection as MetricRejection,
)
from rankwatch.protocol.records import (
    MetricRow as MetricRow,
)
from rankwatch.protocol.records import (
    ProcessSample as ProcessSample,
)
from rankwatch.protocol.records import (
    clock_name as clock_name,
)
from rankwatch.protocol.records import (
    compute_time as compute_time,
)
from rankwatch.protocol.records import (
    data_wait_share as data_wait_share,
)
from rankwatch.protocol.records import (
    metric_records as metric_records,
)
from rankwatch.protocol.records import (
    step_row_records as step_row_records,
)
from rankwatch.protocol.records import (
    step_row_size as step_row_size,
)
from rankwatch.protocol.shares import (
    PHASE_INDEX as PHASE_INDEX,
)
from rankwatch.protocol.shares import (
    PhaseWindow as PhaseWindow,
)
from rankwatch.protocol.shares import (
    StepPairs as StepPairs,
)
from rankwatch.protocol.shares import (
    phase_shares as phase_shares,
)
from rankwatch.protocol.shares import (
    phases_by_step as phases_by_step,
)
from rankwatch.protocol.wire import (
    AGENT_CONTROL_TYPES as AGENT_CONTROL_TYPES,
)
from rankwatch.protocol.wire import (
    AGENT_TYPES as AGENT_TYPES,
)
from rankwatch.protocol.wire import (
    ALL_TYPES as ALL_TYPES,
)
from rankwatch.protocol.wire import (
    HISTORY_LINE_BYTES as HISTORY_LINE_BYTES,
)
from rankwatch.protocol.wire import (
    HUB_TYPES as HUB_TYPES,
)
from rankwatch.protocol.wire import (
    MAX_LINE_BYTES as MAX_LINE_BYTES,
)
from rankwatch.protocol.wire import (
    SUBSCRIBER_TYPES as SUBSCRIBER_TYPES,
)
from rankwatch.protocol.wire import (
    VERSION as VERSION,
)
from rankwatch.protocol.wire import (
    WORKER_TYPES as WORKER_TYPES,
)
from rankwatch.protocol.wire import (
    ProtocolError as ProtocolError,
)
from rankwatch.protocol.wire import (
    decode as decode,
)
from rankwatch.protocol.wire import (
    encode as encode,
)

TYPE_CHECKING = False  # `typing` costs ~3 ms to import and workers import this package
if TYPE_CHECKING:
    from rankwatch.protocol.wire import WireFields as WireFields
