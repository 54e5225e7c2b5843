"""A Slurm job's state as Slurm reports it, and what it means for the run.

Slurm's job states (``scontrol show job``'s ``JobState``, ``squeue``'s ``%T``)::

    PENDING --allocated--> CONFIGURING --> RUNNING --processes ending--> COMPLETING
       |                                      |                             |
       +--scancel----------------------+      +-- exit 0 ---------------> COMPLETED
                                       v      +-- exit != 0 ------------> FAILED
                                   CANCELLED  +-- time limit -----------> TIMEOUT
                                              +-- a higher-priority job-> PREEMPTED
                                              +-- a node died ----------> NODE_FAIL
                                              +-- memory limit ---------> OUT_OF_MEMORY

``JobRecord`` is one observation; ``RunPhase`` is what the run shows for it:
pending (with Slurm's reason and the queue position), running, completing, or
ended (with the final state).
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, replace
from enum import Enum

from runner.slurm.hostlist import HostListError, expand

PENDING_STATES = frozenset({"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD"})
ACTIVE_STATES = frozenset({"CONFIGURING", "RUNNING", "SUSPENDED", "SIGNALING", "STAGE_OUT", "RESIZING", "STOPPED"})
COMPLETING = "COMPLETING"
ENDED_STATES = frozenset({"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "PREEMPTED", "NODE_FAIL",
                          "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE", "REVOKED", "SPECIAL_EXIT"})

ENDINGS = {
    "COMPLETED": "completed",
    "FAILED": "failed",
    "CANCELLED": "cancelled",
    "TIMEOUT": "timeout",
    "PREEMPTED": "preempted",
    "NODE_FAIL": "node failure",
    "OUT_OF_MEMORY": "out of memory",
    "BOOT_FAIL": "boot failure",
    "DEADLINE": "deadline passed",
    "REVOKED": "revoked",
    "SPECIAL_EXIT": "special exit",
}
"""Slurm's final states in the words the run shows."""

REASONS = {
    "None": None,
    "Resources": "waiting for resources to free up",
    "Priority": "jobs of higher priority are ahead",
    "Dependency": "waiting for the jobs it depends on",
    "BeginTime": "its start time has not come yet",
    "JobHeldUser": "held by its user (scontrol release)",
    "JobHeldAdmin": "held by an administrator",
    "QOSMaxJobsPerUserLimit": "you already run as many jobs as this QOS allows",
    "QOSMaxGRESPerUser": "you already use as many GPUs as this QOS allows",
    "AssocMaxJobsLimit": "your account runs as many jobs as it may",
    "AssocGrpGRES": "your account's group uses as many GPUs as it may",
    "ReqNodeNotAvail": "a requested node is unavailable (down, drained or reserved)",
    "PartitionTimeLimit": "the time limit is above the partition's maximum: it will never start",
    "PartitionNodeLimit": "more nodes than the partition allows: it will never start",
    "PartitionDown": "the partition is down",
    "BadConstraints": "no node matches the constraints: it will never start",
    "DependencyNeverSatisfied": "a job it depends on failed: it will never start",
    "InvalidAccount": "the account is not valid: it will never start",
    "InvalidQOS": "the QOS is not valid: it will never start",
}
"""What the most common pending reasons mean (Slurm's word is always shown too)."""

KEY_VALUE = re.compile(r"(?:^|\s)([A-Za-z][A-Za-z0-9_:/]*)=")
NO_TIME = ("", "Unknown", "N/A", "None", "(null)")


class RunPhase(str, Enum):
    """Where a Slurm job stands, as the run shows it."""

    PENDING = "pending"
    RUNNING = "running"
    COMPLETING = "completing"
    ENDED = "ended"


@dataclass(frozen=True)
class JobRecord:
    """One observation of a Slurm job."""

    job_id: str
    state: str
    """Slurm's word: PENDING, RUNNING, COMPLETING, TIMEOUT ..."""
    reason: str | None = None
    """Why it is pending (``Resources``, ``Priority`` ...) or why it ended (``TimeLimit``)."""
    node_list: str | None = None
    """Slurm's compact form, ``n[1-2]``."""
    partition: str | None = None
    start: float | None = None
    end: float | None = None
    time_limit: str | None = None
    run_time: str | None = None
    exit_code: str | None = None
    """Slurm's ``code:signal`` (``0:0``, ``1:0``, ``0:15``)."""
    position: int | None = None
    """1 = the next pending job of its partition to start (by priority); ``None`` unless pending."""
    pending_total: int | None = None

    @property
    def phase(self) -> RunPhase:
        if self.state in PENDING_STATES:
            return RunPhase.PENDING
        if self.state == COMPLETING:
            return RunPhase.COMPLETING
        if self.state in ENDED_STATES:
            return RunPhase.ENDED
        return RunPhase.RUNNING

    @property
    def ended(self) -> bool:
        return self.phase == RunPhase.ENDED

    @property
    def nodes(self) -> list[str]:
        """The allocated node names, in node-rank order (empty while pending)."""
        if not self.node_list or self.node_list in NO_TIME:
            return []
        try:
            return expand(self.node_list)
        except HostListError:
            return [self.node_list]

    @property
    def exit_status(self) -> int | None:
        """``code:signal`` as one shell-style status (128 + signal when killed by one)."""
        if not self.exit_code or ":" not in self.exit_code:
            return None
        code, _, signal = self.exit_code.partition(":")
        try:
            code_number, signal_number = int(code), int(signal)
        except ValueError:
            return None
        return 128 + signal_number if signal_number else code_number

    def with_position(self, position: int | None, total: int | None) -> JobRecord:
        return replace(self, position=position, pending_total=total)

    def describe(self) -> str:
        """One line: "pending: Resources (waiting for resources to free up), 2nd of 3 in the queue of debug"."""
        phase = self.phase
        if phase == RunPhase.PENDING:
            text = "pending"
            if self.reason and self.reason != "None":
                meaning = REASONS.get(self.reason.split(",")[0])
                text += f": {self.reason}" + (f" ({meaning})" if meaning else "")
            if self.position is not None:
                queue = f" of partition {self.partition}" if self.partition else ""
                text += f", position {self.position} of {self.pending_total} in the queue{queue}"
            return text
        if phase == RunPhase.RUNNING:
            where = f" on {self.node_list}" if self.node_list else ""
            since = f" since {time.strftime('%H:%M:%S', time.localtime(self.start))}" if self.start else ""
            return f"running{where}{since}" + (f" ({self.state})" if self.state != "RUNNING" else "")
        if phase == RunPhase.COMPLETING:
            return "completing (Slurm is ending the job's processes)"
        text = ENDINGS.get(self.state, self.state.lower())
        candidates = [f"exit code {self.exit_code}" if self.exit_code else None,
                      f"reason {self.reason}" if self.reason and self.reason != "None" else None,
                      f"ran {self.run_time}" if self.run_time else None,
                      f"time limit {self.time_limit}" if self.state == "TIMEOUT" and self.time_limit else None]
        details = [detail for detail in candidates if detail]
        return text + (f" ({', '.join(details)})" if details else "")

    def to_json(self) -> dict:
        return {"job_id": self.job_id, "state": self.state, "reason": self.reason, "nodes": self.node_list,
                "partition": self.partition, "start": self.start, "end": self.end, "time_limit": self.time_limit,
                "run_time": self.run_time, "exit_code": self.exit_code, "position": self.position,
                "pending_total": self.pending_total, "phase": self.phase.value}


def parse_scontrol(text: str, job_id: str) -> JobRecord | None:
    """``scontrol -o show job ID``: one line of ``Key=Value`` pairs (values may hold spaces)."""
    for line in text.splitlines():
        fields = key_values(line)
        if fields.get("JobId") == job_id:
            return JobRecord(
                job_id=job_id, state=_first_word(fields.get("JobState")) or "UNKNOWN",
                reason=_text(fields.get("Reason")), node_list=_text(fields.get("NodeList")),
                partition=_text(fields.get("Partition")), start=parse_time(fields.get("StartTime")),
                end=parse_time(fields.get("EndTime")), time_limit=_text(fields.get("TimeLimit")),
                run_time=_text(fields.get("RunTime")), exit_code=_text(fields.get("ExitCode")))
    return None


def parse_sacct(text: str, job_id: str) -> JobRecord | None:
    """``sacct -n -X -P -j ID -o JobID,State,Reason,NodeList,Partition,Start,End,Timelimit,Elapsed,ExitCode``."""
    for line in text.splitlines():
        parts = line.split("|")
        if len(parts) >= 10 and parts[0] == job_id:
            return JobRecord(
                job_id=job_id, state=_first_word(parts[1]) or "UNKNOWN", reason=_text(parts[2]),
                node_list=_text(parts[3]), partition=_text(parts[4]), start=parse_time(parts[5]),
                end=parse_time(parts[6]), time_limit=_text(parts[7]), run_time=_text(parts[8]),
                exit_code=_text(parts[9]))
    return None


def key_values(line: str) -> dict[str, str]:
    """``A=1 B=x y C=2`` -> ``{"A": "1", "B": "x y", "C": "2"}`` (a value runs to the next key)."""
    matches = list(KEY_VALUE.finditer(line))
    fields = {}
    for index, match in enumerate(matches):
        end = matches[index + 1].start() if index + 1 < len(matches) else len(line)
        fields[match.group(1)] = line[match.end():end].strip()
    return fields


def parse_time(text: str | None) -> float | None:
    """Slurm's local ``2026-11-22T13:29:40`` as a Unix time; ``None`` for Unknown / N/A."""
    if text is None or text.strip() in NO_TIME:
        return None
    try:
        return time.mktime(time.strptime(text.strip(), "%Y-%m-%dT%H:%M:%S"))
    except ValueError:
        return None


def queue_position(pending_ids: list[str], job_id: str) -> tuple[int | None, int]:
    """``squeue --states=PENDING --sort=-p,i`` lists the next job to start first."""
    ids = [line.strip() for line in pending_ids if line.strip()]
    return (ids.index(job_id) + 1 if job_id in ids else None), len(ids)


def _text(value: str | None) -> str | None:
    if value is None:
        return None
    value = value.strip()
    return None if value in NO_TIME else value


def _first_word(value: str | None) -> str | None:
    """sacct writes ``CANCELLED by 0``; the state is the first word."""
    return value.split()[0] if value and value.split() else None
