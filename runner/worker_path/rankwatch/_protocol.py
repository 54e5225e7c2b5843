"""The wire protocol between workers, the runner (hub), agents and subscribers.

Standard library only: workers import it in the user's interpreter, the runner and
the GUI import the very same module (as ``rankwatch._protocol``).

Framing: newline-delimited JSON, one message per line, UTF-8, at most
``MAX_LINE_BYTES`` per line. Every message is an object with ``type`` and ``v``
(the protocol version). A receiver drops (and counts) a line that is too long, is
not JSON, is not an object, lacks ``type``/``v`` or has an unknown ``type``; one bad
line never ends a connection by itself, but a client that keeps sending garbage
is disconnected (``runner.hub``).

Messages, by direction (fields beyond ``type``/``v``):

Worker (or agent) -> hub
  hello       token, run_key, rank, local_rank, node_rank, world_size, local_world_size,
              host, pid, python, python_version, torch, restart, argv
              (sent first on every connection, so again after a reconnect; argv is
              [script, *args], or ["-m", module, *args]; torch is null when not installed)
  metrics     rank, items: [[t, step, name, value, source], ...]
              source is "auto" (measured by the bootstrap), "log" (rankwatch.log)
              or "parsed" (read from printed lines); t is wall-clock time.time();
              "auto" step = optimizer steps completed before that step (0 first);
              value is null when not finite (NaN/inf loss)
  heartbeat   rank, t, step, dropped (records lost because the queue was full or
              the hub unreachable; cumulative; one record = one rankwatch.log call
              or one step's auto metrics; step is null before the first record)
  exception   rank, t, exc_type, message, traceback, thread, fatal
              thread: name of the thread that raised; fatal: true for the exception
              that ends the process (followed by exit), false for an exception
              that only ended another thread (an event, the worker goes on)
  exit        rank, t, code  (the last message of a worker: exit status, 1 after an
              uncaught exception, -2 after an uncaught KeyboardInterrupt)
  param_hash  rank, t, step, digest    (DDP consistency check: SHA-1 hex of each
              parameter's float64 sum and sum of squares, after the update of
              optimizer step `step`; equal across replicas in sync)
  stacks      rank, t, path            (a faulthandler dump was written there)
  notice      rank, t, key, ...facts   (how the script was launched does not fit torchrun;
              rankwatch._launch_checks; the runner words it, runner.diagnosis.launcher):
              key "self_spawn": function, nprocs, file, line, function_name (the call site);
              key "local_rank_unpassed": option, value (what the script parsed), local_rank;
              key "local_rank_spelling": passed, instead_of (the legacy option was respelled)

Agent (remote node) -> hub, in addition (over TCP; the first line must be agent_hello
with the job's token, and the hub refuses any other TCP client)
  agent_hello token, run_key, node_rank, host, pid, version, torch
              (version: Rankwatch's on the node; torch: the node interpreter's, or null)
  log         node_rank, rank, t, stream, line, node   (a worker's output line; rank is
              null for torchrun's and the agent's own lines; node: the host label)
  worker_lost rank, t     (a worker's connection to its agent ended without exit)
  process_samples node_rank, rows: [[t, rank, pid, cpu_percent, rss_bytes, threads]]
              (the node's ranks, sampled there: the head cannot see remote processes)
  node_exit   node_rank, t, code, reason, dropped   (the agent's last message: torchrun's
              exit status; reason: why it stopped the workers, or null; dropped:
              messages it could not forward)
  Workers' messages (hello, metrics, ...) are forwarded as they are, each with its
  "rank"; a forwarded hello carries no token (the agent checked its own).

Head runner -> agent (over ssh's stdin, never through the hub; runner.remote)
  launch      token, head_host, head_port, run_key, run, node_rank, host, argv, env, cwd,
              grace, sample_interval   (the first line)
  stop        force: bool   (later lines; end of stdin: the head is gone, stop too)

Subscriber -> hub
  subscribe   history: bool (replay the stored history first), logs: bool
  stop        force: bool
  dump_stacks
  ping

Hub -> subscriber
  snapshot    run: RUN, ranks: [RANK], nodes: [NODE], spec: {...profile table...}
              (the first message after subscribe)
  update      t, metrics: [[rank, t, step, name, value, source]],
              logs: [[rank, t, stream, line, node]]   (rank null: a launcher line),
              events: [EVENT], gpus: [[t, index, util, mem_used, mem_total, power_w,
              temp_c, sm_mhz]], procs: [[t, rank, pid, cpu_percent, rss_bytes, threads]],
              ranks: [RANK] (only rows that changed), run: RUN or null (when changed),
              nodes: [NODE] (changed), decimated: bool (metrics were thinned because
              this subscriber fell behind; the store has them all)
  history_end (after a history replay: what follows is live)
  bye         reason                                        (the run ended)
  pong / error  message

  RUN   {id, run_key, profile, status, created, started, ended, exit_code, world_size,
         host, command, workdir, summary}  (status: runner.state.RunStatus values;
         summary: the failure triage once the run ended, else null)
  RANK  {rank, local_rank, node_rank, host, pid, gpu_index, state (RankState values),
         exit_code, step, loss, step_time, data_wait_share (0..1), samples_per_s,
         steps_per_s, last_seen (t of the last message), cpu_percent, rss_bytes,
         gpu_util, gpu_mem_used}  (null where unknown)
  NODE  {node_rank, host, state (NodeState values), processes, changed, detail}
  EVENT {kind, t, rank (or null), message, ...kind-specific fields}
        kinds: rank_started, rank_exited, rank_failed, exception, stalled, resumed,
        straggler, divergence, stacks, node_lost, run_finished, warning,
        launch_mismatch {key, level, ranks, title, cause, advice} (runner.diagnosis.launcher)
"""

from __future__ import annotations

import json
from typing import Any

VERSION = 1
MAX_LINE_BYTES = 1 << 20
"""A line longer than this is dropped: 1 MiB holds thousands of metric records."""

WORKER_TYPES = frozenset({"hello", "metrics", "heartbeat", "exception", "exit", "param_hash", "stacks",
                          "notice"})
AGENT_TYPES = frozenset({"agent_hello", "log", "worker_lost", "process_samples", "node_exit"})
AGENT_CONTROL_TYPES = frozenset({"launch", "stop"})
"""Head runner -> agent, on ssh's stdin (not hub messages: not in ``ALL_TYPES``)."""
SUBSCRIBER_TYPES = frozenset({"subscribe", "stop", "dump_stacks", "ping"})
HUB_TYPES = frozenset({"snapshot", "update", "history_end", "bye", "pong", "error"})
ALL_TYPES = WORKER_TYPES | AGENT_TYPES | SUBSCRIBER_TYPES | HUB_TYPES

SOURCE_AUTO = "auto"
SOURCE_LOG = "log"
SOURCE_PARSED = "parsed"

# Metric names the bootstrap measures without code changes.
LOSS = "loss"
STEP_TIME = "step_time"
"""Seconds between consecutive optimizer steps."""
DATA_WAIT = "data_wait"
"""Seconds of a step spent waiting for the DataLoader iterator."""
SAMPLES_PER_SECOND = "samples_per_s"
STEPS_PER_SECOND = "steps_per_s"


class ProtocolError(ValueError):
    """A line that is not a valid message. ``reason`` is a short, countable label."""

    def __init__(self, reason: str, detail: str = ""):
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason


def encode(message_type: str, **fields: Any) -> bytes:
    """One framed message. ``allow_nan=False`` keeps the output strict JSON (NaN becomes null)."""
    body = {"type": message_type, "v": VERSION}
    body.update(fields)
    try:
        text = json.dumps(body, separators=(",", ":"), allow_nan=False)
    except ValueError:
        text = json.dumps(_replace_non_finite(body), separators=(",", ":"))
    return text.encode("utf-8") + b"\n"


def _replace_non_finite(value: Any) -> Any:
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        return None
    if isinstance(value, dict):
        return {k: _replace_non_finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_replace_non_finite(v) for v in value]
    return value


def decode(line: bytes, allowed: frozenset[str] = ALL_TYPES) -> dict[str, Any]:
    """Parse one line (with or without its newline).

    Raises:
        ProtocolError: too long, not UTF-8 JSON, not an object, missing or unknown
            ``type``, or a ``v`` this side does not speak.
    """
    if len(line) > MAX_LINE_BYTES:
        raise ProtocolError("oversized", f"{len(line)} bytes")
    try:
        message = json.loads(line)
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
