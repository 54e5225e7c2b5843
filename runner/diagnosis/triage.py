"""Failure triage: which rank failed first, how, and why.

When one rank dies, torchrun stops the others, and with NCCL/gloo the survivors
usually fail too ("Connection closed by peer"), each printing a wall of errors.
The root cause is the *first* failure in time, so triage orders the evidence:

* an uncaught exception reported by the bootstrap (exact time, type, message,
  traceback — also without torch's ``@record``);
* a rank whose connection to the hub dropped without an exit message (it died from
  outside: a signal, the OOM killer), at the time of the drop;
* a non-zero exit reported by the bootstrap;
* torchrun's own "Root Cause" entry, when nothing better is known, and its exit
  codes for ranks that could not report one (deaths by signal).

Hints come from ``runner.diagnosis.hints``.
"""

from __future__ import annotations

import signal as signals
from collections import deque
from dataclasses import asdict, dataclass, field
from typing import Any

from runner.diagnosis.hints import Evidence, find_hints
from runner.diagnosis.torchrun_report import TorchrunReport

TAIL_LINES = 200


def signal_name(exit_code: int | None) -> str | None:
    """torchrun reports death by signal N as exit code -N."""
    if exit_code is None or exit_code >= 0:
        return None
    try:
        return signals.Signals(-exit_code).name
    except ValueError:
        return f"signal {-exit_code}"


def exception_line_from_tail(lines: list[str]) -> str | None:
    """The ``Type: message`` line that ends the last traceback in a rank's stderr."""
    inside = False
    candidate = None
    for line in lines:
        text = _strip_torch_rank_prefix(line)
        if text.startswith("Traceback (most recent call last)"):
            inside, candidate = True, None
            continue
        if inside and text and not text.startswith((" ", "\t")) and not text.startswith("^"):
            candidate = text.strip()
            inside = False
    return candidate


def _strip_torch_rank_prefix(line: str) -> str:
    # torch's own excepthook prefixes "[rank1]: " to tracebacks of distributed jobs.
    if line.startswith("[rank") and "]: " in line[:12]:
        return line.split("]: ", 1)[1]
    return line


@dataclass
class RankFailure:
    rank: int
    host: str | None = None
    exit_code: int | None = None
    signal: str | None = None
    exc_type: str | None = None
    exc_message: str | None = None
    exception_line: str | None = None
    traceback: str | None = None
    when: float | None = None
    evidence: str = ""
    """How we know: "exception", "connection lost", "exit code", "torchrun report"."""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class TriageInput:
    """What the runner collected during the run, per rank."""

    exceptions: dict[int, dict[str, Any]] = field(default_factory=dict)
    """rank -> first exception {t, exc_type, message, traceback}"""
    exits: dict[int, tuple[int | None, float]] = field(default_factory=dict)
    """rank -> (code, t) from the bootstrap's exit message"""
    lost: dict[int, float] = field(default_factory=dict)
    """rank -> t its connection dropped without an exit message"""
    hosts: dict[int, str] = field(default_factory=dict)
    stderr_tails: dict[int, deque] = field(default_factory=dict)
    launcher_lines: dict[str, deque] = field(default_factory=dict)
    """node -> torchrun's own lines on that node (the end of them: its failure report)"""
    report: TorchrunReport | None = None
    legacy_local_rank: bool = False
    backend: str | None = None
    cpu_mode: bool = False
    interpreter: str | None = None

    def add_launcher_line(self, node: str, line: str) -> None:
        lines = self.launcher_lines.get(node)
        if lines is None:
            lines = self.launcher_lines[node] = deque(maxlen=2000)
        lines.append(line)

    def all_launcher_lines(self) -> list[str]:
        return [line for lines in self.launcher_lines.values() for line in lines]

    def add_stderr(self, rank: int, line: str) -> None:
        tail = self.stderr_tails.get(rank)
        if tail is None:
            tail = self.stderr_tails[rank] = deque(maxlen=TAIL_LINES)
        tail.append(line)


def _candidates(data: TriageInput) -> list[RankFailure]:
    failures: dict[int, RankFailure] = {}

    def get(rank: int) -> RankFailure:
        if rank not in failures:
            failures[rank] = RankFailure(rank=rank, host=data.hosts.get(rank))
        return failures[rank]

    for rank, exc in data.exceptions.items():
        failure = get(rank)
        failure.exc_type, failure.exc_message = exc.get("exc_type"), exc.get("message")
        failure.exception_line = f"{exc.get('exc_type')}: {exc.get('message')}" if exc.get("message") else exc.get("exc_type")
        failure.traceback, failure.when, failure.evidence = exc.get("traceback"), exc.get("t"), "exception"
    for rank, t in data.lost.items():
        failure = get(rank)
        if failure.when is None:
            failure.when, failure.evidence = t, "connection lost"
    for rank, (code, t) in data.exits.items():
        if code:
            failure = get(rank)
            failure.exit_code = code
            if failure.when is None:
                failure.when, failure.evidence = t, "exit code"
    if data.report is not None:
        for reported in data.report.failures:
            if reported.rank is None:
                continue
            failure = get(reported.rank)
            if failure.exit_code is None or reported.exit_code is not None and reported.exit_code < 0:
                failure.exit_code = reported.exit_code
            failure.host = failure.host or reported.host
            if not failure.evidence:
                failure.evidence = "torchrun report"
            if failure.traceback is None and reported.traceback and not reported.traceback.startswith("To enable"):
                failure.traceback = reported.traceback
    for failure in failures.values():
        failure.signal = signal_name(failure.exit_code)
        if failure.exception_line is None:
            failure.exception_line = exception_line_from_tail(list(data.stderr_tails.get(failure.rank, ())))
    return list(failures.values())


def first_failure(data: TriageInput) -> tuple[RankFailure | None, list[RankFailure]]:
    candidates = _candidates(data)
    if not candidates:
        return None, []
    timed = sorted((c for c in candidates if c.when is not None), key=lambda c: c.when)
    if timed:
        first = timed[0]
        # A rank killed by a signal dies before anyone notices; if torchrun names it as the
        # root cause and its own loss of connection is no later than the first exception,
        # trust that.
        root = data.report.root_cause if data.report else None
        if root is not None and root.rank != first.rank and root.exit_code is not None and root.exit_code < 0:
            for candidate in candidates:
                if candidate.rank == root.rank and (candidate.when is None or candidate.when <= first.when + 0.5):
                    first = candidate
                    break
    else:
        root = data.report.root_cause if data.report else None
        first = next((c for c in candidates if root is not None and c.rank == root.rank), candidates[0])
    others = [c for c in candidates if c is not first]
    return first, others


def triage(data: TriageInput, exit_code: int, stopped: bool) -> dict[str, Any]:
    """The summary stored with the run and printed at the end of ``rankwatch run``."""
    if stopped:
        return {"outcome": "stopped", "headline": "stopped on request", "exit_code": exit_code}
    if exit_code == 0:
        return {"outcome": "succeeded", "headline": "all ranks finished", "exit_code": 0}
    first, others = first_failure(data)
    evidence = Evidence(
        first=first, others=others, launcher_lines=data.all_launcher_lines(),
        stderr_tails={r: list(t) for r, t in data.stderr_tails.items()},
        legacy_local_rank=data.legacy_local_rank, backend=data.backend, cpu_mode=data.cpu_mode,
        interpreter=data.interpreter)
    hints = find_hints(evidence)
    if first is None:
        headline = f"the job failed (exit code {exit_code}) before any rank reported"
        if hints:
            headline += f": {hints[0].cause}"
    else:
        how = f"signal {first.signal}" if first.signal else f"exit code {first.exit_code}" if first.exit_code is not None else "an exception"
        headline = f"rank {first.rank}{' on ' + first.host if first.host else ''} failed first ({how})"
        if first.exception_line:
            headline += f": {first.exception_line}"
    return {
        "outcome": "failed",
        "headline": headline,
        "exit_code": exit_code,
        "first_failure": first.to_json() if first else None,
        "other_failures": [o.to_json() for o in others],
        "hints": [h.to_json() for h in hints],
    }
