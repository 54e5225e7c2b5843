"""Failure triage: which rank failed first, how, and why.

When one rank dies, torchrun stops the others, and with NCCL/gloo the survivors
usually fail too ("Connection closed by peer"), each printing a wall of errors.
The root cause is the *first* failure in time, so triage orders the evidence:

* an uncaught exception reported by the bootstrap (exact time, type, message,
  traceback — also without torch's ``@record``); one that only says a peer went
  away ("Connection closed by peer") is an echo of another rank's death, and
  yields to a failure of another kind up to ``ECHO_WINDOW_SECONDS`` later;
* a rank whose connection to the hub dropped without an exit message (it died from
  outside: a signal, the OOM killer), at the time of the drop;
* a non-zero exit reported by the bootstrap;
* torchrun's own "Root Cause" entry, when nothing better is known, and its exit
  codes for ranks that could not report one (deaths by signal).

The traceback comes from the bootstrap's ``exception`` message (no ``@record``
needed), else from torchrun's error file for that rank (``error_files``), else
from torchrun's report. A rank that died of SIGKILL is looked up in the kernel
log (``kernel_log``: was it the OOM killer?). A rank that exited with an argparse
error (no traceback) gets that ``error:`` line as its exception line.

A failure in a collective that a peer never entered because its script had ended
(exit code 0; the ``finished`` ranks of the summary) is a mismatched collective:
that hint leads the headline, not gloo's "a remote worker crashing".

Hints come from ``runner.diagnosis.hints``. What the live monitors found (stalls,
stack captures, stragglers, divergences; ``findings``) goes into the summary of
every outcome as ``diagnostics`` (stragglers only into a run's that did not fail or hang:
``without_stragglers``), and into the headline of a stopped run that was hanging.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TypedDict

from rankwatch.protocol import Bottleneck
from runner.diagnosis.error_files import find_error_files, read_error_file
from runner.diagnosis.findings import Findings
from runner.diagnosis.hang_verdict import VerdictKind
from runner.diagnosis.hints import (
    Evidence,
    GpuMemory,
    Hint,
    HintKey,
    RunPortHolder,
    find_hints,
    launcher_hint,
    no_rank_reported,
    no_step_measured,
)
from runner.diagnosis.kernel_log import find_oom_kill, read_kernel_log
from runner.diagnosis.summary import FinishedRank, RunSummary, StopRequest
from runner.diagnosis.torchrun_report import TorchrunReport
from runner.exit_status import (
    STOPPING_SIGNALS,
    describe_end_of,
    is_stopping_signal,
    only_says_peer_gone,
    signal_name,
)
from runner.format import ranks_text
from runner.launch.ports import port_holder
from runner.rank_failure import RankFailure, RankLosses
from runner.runstate.messages import JsonObject
from runner.state import Outcome

TAIL_LINES = 200


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


USAGE_ERROR = re.compile(r"^\S+: error: .+")


def usage_error_from_tail(lines: list[str]) -> str | None:
    """argparse's ``prog: error: ...`` line (exit code 2, no traceback), the last one in the tail."""
    for line in reversed(lines):
        text = _strip_torch_rank_prefix(line).strip()
        if USAGE_ERROR.match(text):
            return text
    return None


def _strip_torch_rank_prefix(line: str) -> str:
    # torch's own excepthook prefixes "[rank1]: " to tracebacks of distributed jobs.
    if line.startswith("[rank") and "]: " in line[:12]:
        return line.split("]: ", 1)[1]
    return line


def listening_process(port: int) -> str | None:
    """Who listens on ``port`` on this machine now, when we may know ("pid 12 (python x.py)")."""
    holder = port_holder(port)
    return holder.describe() if holder.pid is not None else None


class FirstException(TypedDict, total=False):
    """A rank's first fatal exception, as its bootstrap reported it (``TriageEvidence``)."""

    t: float | None
    exc_type: str | None
    message: str | None
    traceback: str | None


StoreLosses = JsonObject
"""``Hub.losses``: ``{"losses": [{rank, dropped, rejected, not_received}], "store_incomplete": reason}``,
only the keys that apply."""


@dataclass
class TriageInput:
    """What the runner collected during the run, per rank."""

    exceptions: dict[int, FirstException] = field(default_factory=dict)
    """rank -> its first fatal exception"""
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
    pids: dict[int, int] = field(default_factory=dict)
    """rank -> pid of its worker process (from its hello), for the kernel log."""
    local_ranks: dict[int, int] = field(default_factory=dict)
    """rank -> local rank, for ranks on the head node (their error files are readable here)."""
    rank_gpus: dict[int, tuple[str | None, int]] = field(default_factory=dict)
    """rank -> (host, GPU index) as sampled."""
    rank_gpu_memory: dict[int, GpuMemory] = field(default_factory=dict)
    """rank -> its GPU's memory at the last NVML sample that saw the rank's process on it before it
    reported a fatal exception (ranks on this machine; ``Run`` keeps it from each sample)."""
    gpu_mem_peaks: dict[int, int] = field(default_factory=dict)
    """rank -> the allocator's peak (bytes) in the rank's newest ``gpu_mem_peak`` record."""
    remote_ranks: set[int] = field(default_factory=set)
    """Ranks on other machines: their pids mean nothing in this machine's kernel log."""
    log_dir: str | None = None
    """torchrun's ``--log-dir`` on the head node (holds the error files)."""
    single_node: bool = True
    findings: Findings = field(default_factory=Findings)
    kernel_log_reader: Callable[[], list[str] | None] = read_kernel_log
    port_holder_lookup: Callable[[int], str | None] | None = listening_process
    """port -> who holds it now ("pid 12 (python x.py)"), for the address-in-use hint."""
    port_holders: dict[int, RunPortHolder] = field(default_factory=dict)
    """port -> its holder while the run went on, looked up
    when a rank failed with EADDRINUSE (``runner.diagnosis.launcher``); after the run it is gone."""
    script_args: list[str] = field(default_factory=list)
    """The script's arguments: torchrun passes the same ones to every rank."""
    seen: set[int] = field(default_factory=set)
    """Ranks that said hello: a run none said it in measured nothing, whatever its exit code."""
    run_id: int | None = None
    """The run's id, for the commands hints name (``rankwatch runs logs 12``)."""
    measured: set[int] = field(default_factory=set)
    """Ranks that sent at least one metric (a step, a ``rankwatch.log`` value, a printed value parsed)."""
    instrumented: bool = False
    """Zero-code instrumentation was on: every training step of an ordinary loop would have been measured."""
    self_spawn: bool = False
    """The script started its own ranks (``runner.profile.launch_mode``)."""
    spawn_call: str | None = None
    """That script's spawn call, ``mp.spawn(...) on line 104``, when auto mode found one."""
    world_size: int | None = None
    """From the ranks' hellos."""

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
        if failure.traceback:
            failure.traceback_source = "bootstrap"
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
            if failure.exit_code is None or (reported.exit_code is not None and reported.exit_code < 0):
                failure.exit_code = reported.exit_code
            failure.host = failure.host or reported.host
            if not failure.evidence:
                failure.evidence = "torchrun report"
            failure.pid = failure.pid or reported.pid
            if failure.traceback is None and reported.error_file:
                _use_error_file(failure, reported.error_file)
            if failure.traceback is None and reported.traceback and not reported.traceback.startswith(
                    ("To enable", "Signal ")):
                failure.traceback, failure.traceback_source = reported.traceback, "torchrun report"
    error_files = find_error_files(data.log_dir) if data.log_dir else {}
    by_local_rank = {local: rank for rank, local in data.local_ranks.items()}
    for rank, failure in failures.items():
        failure.pid = failure.pid or data.pids.get(rank)
        failure.signal = signal_name(failure.exit_code)
        tail = list(data.stderr_tails.get(rank, ()))
        if failure.traceback is None:
            local = data.local_ranks.get(rank)
            if local is None and data.single_node and rank not in by_local_rank:
                local = rank  # one node: local rank == rank (it never said hello)
            if local is not None and local in error_files:
                _use_error_file(failure, str(error_files[local]))
        if failure.exception_line is None:
            failure.exception_line = exception_line_from_tail(tail) or usage_error_from_tail(tail)
    return list(failures.values())


def _use_error_file(failure: RankFailure, path: str) -> None:
    recorded = read_error_file(path)
    if recorded is None or not (recorded.traceback or recorded.message):
        return
    failure.error_file = path
    if recorded.traceback:
        failure.traceback, failure.traceback_source = recorded.traceback, "error file"
    if failure.exception_line is None and recorded.message:
        failure.exception_line = recorded.message.strip().splitlines()[-1] if recorded.message.strip() else None


ECHO_WINDOW_SECONDS = 5.0
"""How long after a peer's death its survivors' connection errors can still arrive."""


def is_consequence(failure: RankFailure) -> bool:
    """A failure that only reports that another rank went away (not a cause of its own)."""
    return only_says_peer_gone(failure.exception_line)


def is_echo(failure: RankFailure) -> bool:
    """A failure that follows another's: a survivor's connection error, or a rank ended by
    SIGTERM/SIGINT (what torchrun sends the others once one failed). Seen: two ranks' exits
    reaped in the same instant, the SIGTERMed one stamped 0.2 ms before the one that exited 2."""
    return is_stopping_signal(failure.exit_code) or is_consequence(failure)


def first_failure(data: TriageInput) -> tuple[RankFailure | None, list[RankFailure]]:
    candidates = _candidates(data)
    if not candidates:
        return None, []
    timed = sorted(((c.when, c) for c in candidates if c.when is not None), key=lambda pair: pair[0])
    if timed:
        first_when, first = timed[0]
        # "Connection closed by peer" is what the survivors of a dead rank say, a moment after
        # it died, and SIGTERM is what torchrun then sends them; when the earliest failure is
        # such an echo, the failure it echoes is first.
        if is_echo(first):
            for when, candidate in timed[1:]:
                if when - first_when > ECHO_WINDOW_SECONDS:
                    break
                if not is_echo(candidate):
                    first_when, first = when, candidate
                    break
        # A rank killed by a signal dies before anyone notices; if torchrun names it as the
        # root cause and its own loss of connection is no later than the first exception,
        # trust that.
        # SIGTERM/SIGINT are torchrun (or a person) stopping ranks, not a cause; and torchrun's
        # "first observed" can be a survivor whose error file is timestamped before torchrun
        # noticed the killed rank, so an echo is never promoted this way.
        root = data.report.root_cause if data.report else None
        if (root is not None and root.rank != first.rank and root.exit_code is not None
                and root.exit_code < 0 and -root.exit_code not in STOPPING_SIGNALS):
            for candidate in candidates:
                if (candidate.rank == root.rank and not is_consequence(candidate)
                        and (candidate.when is None or candidate.when <= first_when + 0.5)):
                    first = candidate
                    break
    else:
        root = data.report.root_cause if data.report else None
        first = next((c for c in candidates if root is not None and c.rank == root.rank), candidates[0])
    others = [c for c in candidates if c is not first]
    if first.rank is not None and not is_echo(first):
        for other in others:  # ended because the first failed: stopped, not failed (runner.exit_status)
            if is_echo(other):
                other.after = first.rank
    return first, others


def note_stalls_that_finished(data: TriageInput) -> None:
    """A rank flagged stalled that then exited 0 by itself was not hung: it went on without a step
    (an evaluation whose work the rank could not show, a slow save) and ended. Its stall gets
    ``finished_after`` so the summary says so instead of "never resumed"."""
    for stall in data.findings.stalls:
        if stall.resumed_after is not None:
            continue
        code, ended = data.exits.get(stall.rank, (None, None))
        if code == 0 and ended is not None and ended >= stall.since:
            stall.finished_after = round(ended - stall.since, 2)


def triage(data: TriageInput, exit_code: int, stopped: bool) -> JsonObject:
    """The summary stored with the run and printed at the end of ``rankwatch run``, as JSON
    (:func:`conclude`'s ``RunSummary.to_wire``)."""
    return conclude(data, exit_code, stopped).to_wire()


def conclude(data: TriageInput, exit_code: int, stopped: bool, stop: StopRequest | None = None,
             losses: StoreLosses | None = None) -> RunSummary:
    """The run's summary, whole: nothing edits it afterwards.

    ``stopped``: the ranks were stopped (on request, or by Slurm from outside); ``stop``: who asked
    and how it ended, when it was a request (its words lead the headline when nothing else does);
    ``losses``: what the store lacks (``Hub.losses``), named in the headline when the store is
    incomplete.
    """
    summary = _conclude(data, exit_code, stopped, stop)
    losses = losses or {}
    incomplete, rows = losses.get("store_incomplete"), losses.get("losses")
    incomplete = incomplete if isinstance(incomplete, str) else None
    read = tuple(RankLosses.from_wire(row) for row in rows if isinstance(row, dict)) if isinstance(rows, (list, tuple)) else ()
    return replace(summary, losses=read, store_incomplete=incomplete,
                   headline=summary.headline + (f" (store incomplete: {incomplete})" if incomplete else ""))


def _conclude(data: TriageInput, exit_code: int, stopped: bool, stop: StopRequest | None) -> RunSummary:
    note_stalls_that_finished(data)
    diagnostics = data.findings.stored()
    if stopped or exit_code == 0:
        headline = "stopped on request" if stopped else "all ranks finished"
        hang = hang_headline(data.findings)
        launcher = [hint for hint in (launcher_hint(list(data.findings.launcher.values()), key)
                                      for key in data.findings.launcher) if hint is not None]
        warnings = [hint for hint in launcher if data.findings.launcher[hint.key].level != "info"]
        if stopped and hang:
            headline = f"stopped on request; {hang}"
            diagnostics = without_stragglers(data.findings).stored()
        elif stopped and warnings:
            headline = f"stopped on request; {data.findings.launcher[warnings[0].key].title}"
        elif stopped and stop is not None:  # no finding to lead with: say who and how
            headline = f"stopped on request ({stop.who}): the job was {stop.how}"
        elif not stopped and not data.seen:  # "all ranks finished" would claim ranks that never were
            headline = "the job exited 0, but no rank ever reported: nothing was measured"
            launcher = [no_rank_reported(data.self_spawn, data.spawn_call, data.cpu_mode, data.run_id), *launcher]
        elif not stopped and data.instrumented and not data.measured:
            headline = "all ranks finished, but none made a training step: nothing was measured"
            launcher = [no_step_measured(data.run_id), *launcher]
        return RunSummary(Outcome.STOPPED if stopped else Outcome.SUCCEEDED, headline, exit_code if stopped else 0,
                          hints=tuple(launcher), diagnostics=diagnostics,
                          stopped_by=stop.who if stop is not None else None)
    first, others = first_failure(data)
    kernel_log = None
    if first is not None and first.signal == "SIGKILL" and first.rank not in data.remote_ranks:
        kernel_log = data.kernel_log_reader()
        if kernel_log is not None and first.pid is not None:
            first.kernel_log = find_oom_kill(kernel_log, first.pid)
    evidence = Evidence(
        first=first, others=others, launcher_lines=data.all_launcher_lines(),
        stderr_tails={r: list(t) for r, t in data.stderr_tails.items()},
        legacy_local_rank=data.legacy_local_rank, backend=data.backend, cpu_mode=data.cpu_mode,
        interpreter=data.interpreter, kernel_log=kernel_log, rank_gpus=dict(data.rank_gpus),
        port_holder=data.port_holder_lookup, first_is_remote=first is not None and first.rank in data.remote_ranks,
        launcher=list(data.findings.launcher.values()), script_args=list(data.script_args),
        port_holders=dict(data.port_holders), world_size=data.world_size,
        rank_gpu_memory=dict(data.rank_gpu_memory), gpu_mem_peaks=dict(data.gpu_mem_peaks),
        finished=finished_ranks(data, [c for c in (first, *others) if c is not None]), run_id=data.run_id,
        script_returned=first is not None and first.signal is not None
        and first.rank in data.exits and data.exits[first.rank][0] == 0)
    hints = find_hints(evidence)
    finished = tuple(FinishedRank(rank, round(first.when - ended, 2) if first and first.when else None)
                     for rank, ended in sorted(evidence.finished.items()))
    return RunSummary(Outcome.FAILED, failure_headline(first, hints, exit_code), exit_code, first_failure=first,
                      other_failures=tuple(others), hints=tuple(hints), finished=finished,
                      diagnostics=without_stragglers(data.findings).stored(),
                      stopped_by=stop.who if stop is not None else None)


def failure_headline(first: RankFailure | None, hints: list[Hint], exit_code: int) -> str:
    """``rank 1 on node-a failed first (exit code 1): ValueError: ...``."""
    if first is None:
        headline = f"the job failed (exit code {exit_code}) before any rank reported"
        return headline + (f": {hints[0].cause}" if hints else "")
    how = describe_end_of(first.exit_code, first.signal, first.evidence)
    headline = f"rank {first.rank}{' on ' + first.host if first.host else ''} failed first ({how})"
    if hints and hints[0].key in LEADS_THE_HEADLINE:
        return headline + f": {hints[0].cause}"
    if first.exception_line:
        return headline + f": {first.exception_line}"
    if first.signal == "SIGKILL":
        return headline + (": killed by the kernel's OOM killer (see the kernel log line)" if first.kernel_log
                           else ": killed from outside (the kernel's OOM killer is the usual cause)")
    return headline + (f": {hints[0].cause}" if hints else "")


LEADS_THE_HEADLINE = {HintKey.MISMATCHED_COLLECTIVE}
"""Hints truer than the first failure's own words, which lead its headline instead of them: gloo's
"a remote worker crashing" when the peer ran to its end."""


def finished_ranks(data: TriageInput, failures: list[RankFailure]) -> dict[int, float]:
    """rank -> when its script ran to its end (exit code 0), for the ranks of a failed run that did not
    fail (one whose process died after its script returned did)."""
    failed = {failure.rank for failure in failures}
    return {rank: ended for rank, (code, ended) in data.exits.items() if code == 0 and rank not in failed}


def without_stragglers(findings: Findings) -> Findings:
    """The findings of a failed or hung run: a straggler found while the job still trained does not
    explain its end, so neither its line nor a straggler verdict is repeated there (the events keep them),
    and neither is a bottleneck that could not be determined (a run that failed after a few steps)."""
    bottleneck = findings.bottleneck
    if bottleneck is not None and bottleneck.verdict.kind in (Bottleneck.STRAGGLER, None):
        bottleneck = None
    return replace(findings, stragglers={}, bottleneck=bottleneck)


def hang_headline(findings: Findings) -> str | None:
    """"rank 0 was stalled at step 12 (...)" for a run stopped while ranks made no progress."""
    open_stalls = [s for s in findings.stalls if s.resumed_after is None]
    if not open_stalls:
        return None
    ranks = sorted({s.rank for s in open_stalls})
    who = ranks_text(ranks) + (" was" if len(ranks) == 1 else " were")
    steps = sorted({s.step for s in open_stalls if s.step is not None})
    at = f" at step {steps[0]}" if len(steps) == 1 else ""
    text = f"{who} stalled{at} (no progress for at least {min(s.seconds for s in open_stalls):.0f} s)"
    verdict = findings.stacks.verdict if findings.stacks is not None else None
    if verdict is not None and verdict.message and verdict.kind != VerdictKind.PROGRESSING:
        text += f"; stacks: {verdict.message}"
    return text
