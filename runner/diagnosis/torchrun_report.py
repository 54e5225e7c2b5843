"""Read torchrun's own failure report (the ``ChildFailedError`` block on its stderr).

torchrun ends a failed job with::

    Failures:
    [1]:
      time      : 2026-11-22_00:36:49
      host      : node1
      rank      : 0 (local_rank: 0)
      exitcode  : -15 (pid: 4805)  (SIGTERM)
      error_file: <N/A>
      traceback : Signal 15 (SIGTERM) received by PID 4805
    ------------------------------------------------------------
    Root Cause (first observed failure):
    [0]:
      time      : ...
      rank      : 1 (local_rank: 1)
      exitcode  : 1 (pid: 4806)
      ...

It knows every failed rank's exit code (including deaths by signal, which no code
inside the worker can report) and which failure it saw first.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

FIELD = re.compile(r"^\s{2}(\w[\w ]*?)\s*:\s?(.*)$")
ENTRY = re.compile(r"^\[(\d+)\]:\s*$")


@dataclass(frozen=True)
class ReportedFailure:
    rank: int | None
    local_rank: int | None
    exit_code: int | None
    pid: int | None
    host: str | None
    time: str | None
    error_file: str | None
    traceback: str | None
    root_cause: bool


@dataclass
class TorchrunReport:
    failures: list[ReportedFailure] = field(default_factory=list)

    @property
    def root_cause(self) -> ReportedFailure | None:
        for failure in self.failures:
            if failure.root_cause:
                return failure
        return None

    def for_rank(self, rank: int) -> ReportedFailure | None:
        for failure in self.failures:
            if failure.rank == rank:
                return failure
        return None


def parse_torchrun_report(lines: list[str]) -> TorchrunReport:
    """Parse the failure block from torchrun's own (unprefixed) stderr lines."""
    report = TorchrunReport()
    section: str | None = None
    current: dict[str, str] | None = None
    last_key: str | None = None

    def finish() -> None:
        if current:
            report.failures.append(_failure(current, section == "root"))

    for line in lines:
        stripped = line.strip()
        if stripped.startswith("Failures:"):
            finish()
            section, current = "failures", None
            continue
        if stripped.startswith("Root Cause"):
            finish()
            section, current = "root", None
            continue
        if section is None:
            continue
        if stripped.startswith("=====") or stripped.startswith("-----"):
            finish()
            current = None
            if stripped.startswith("====="):
                section = None if report.failures else section
            continue
        if ENTRY.match(stripped):
            finish()
            current, last_key = {}, None
            continue
        if current is None:
            continue
        match = FIELD.match(line)
        if match and match.group(1) in ("time", "host", "rank", "exitcode", "error_file", "traceback"):
            last_key = match.group(1)
            current[last_key] = match.group(2).strip()
        elif last_key == "traceback":
            current["traceback"] += "\n" + line.rstrip()
    finish()
    return report


def _failure(fields: dict[str, str], root: bool) -> ReportedFailure:
    rank = local_rank = exit_code = pid = None
    match = re.match(r"(-?\d+)(?:\s*\(local_rank:\s*(\d+)\))?", fields.get("rank", ""))
    if match:
        rank = int(match.group(1))
        local_rank = int(match.group(2)) if match.group(2) else None
    match = re.match(r"(-?\d+)(?:\s*\(pid:\s*(\d+)\))?", fields.get("exitcode", ""))
    if match:
        exit_code = int(match.group(1))
        pid = int(match.group(2)) if match.group(2) else None
    error_file = fields.get("error_file")
    return ReportedFailure(
        rank=rank, local_rank=local_rank, exit_code=exit_code, pid=pid, host=fields.get("host"),
        time=fields.get("time"), error_file=None if error_file in (None, "<N/A>") else error_file,
        traceback=fields.get("traceback"), root_cause=root)


def merge_reports(reports: list[TorchrunReport]) -> TorchrunReport:
    """One report from each node's torchrun (each names its own root cause)."""
    merged = TorchrunReport()
    for report in reports:
        merged.failures.extend(report.failures)
    return merged
