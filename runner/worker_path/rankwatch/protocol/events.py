"""What the hub publishes about a run besides records: events (one enum of kinds), the
bottleneck verdicts, and a rank's row as subscribers see it."""

from __future__ import annotations

import json
from enum import Enum

TYPE_CHECKING = False  # `typing` costs ~3 ms to import and workers import this module
if TYPE_CHECKING:
    from collections.abc import Mapping


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
                 fields: dict[str, object] | None = None) -> None:
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

    def to_wire(self) -> dict[str, object]:
        return {**self.fields, "kind": self.kind.value, "t": self.t, "rank": self.rank, "message": self.message}

    @classmethod
    def from_store(cls, t: float, kind: str, rank: int | None, data: Mapping[str, object] | None) -> Event:
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

    def to_wire(self) -> dict[str, object]:
        return {name: getattr(self, name) for name in RankRow.__slots__}


def working_without_steps(row: Mapping[str, object], now: float) -> str:
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
