"""Which rank, where, why: the diagnosis of one run as the monitor shows it, Qt-free.

Two sources, both from the runner (``runner/diagnosis``):

* the run's **summary** (``RUN.summary`` once the run ended; ``triage.triage``):
  ``outcome``, ``headline``, ``first_failure`` (rank, host, exit code, signal,
  evidence, exception line, traceback, kernel log line), ``other_failures``,
  ``hints`` (cause -> advice) and ``diagnostics`` (what the monitors found);
* the **events** the monitors publish while the run goes on: ``stalled`` /
  ``resumed`` (``stalls``), ``straggler`` (``stragglers``), ``bottleneck`` (the run's
  live verdict: input-, communication-, launch- or compute-bound, or a straggler, with
  its evidence and one action; the summary's ``diagnostics.bottleneck`` is the whole
  run's), ``divergence`` (``consistency``), ``stacks`` (``stacks``: who holds up the others),
  ``launch_mismatch`` (``launcher``: a script that does not fit torchrun),
  ``node_lost`` (several nodes), ``rank_failed`` and ``run_finished``.

:class:`DiagnosisModel` follows a :class:`~gui.models.monitor.MonitorModel` (a live
run, or a finished one loaded from the store: its events are replayed the same
way) and answers what the failure banner, the diagnosis panel, the rank table's
notes and the stacks view show. It only reads; nothing here blocks or raises on
odd input (a field that is missing is shown as unknown). Events and findings are
decoded once, at the entry, through the runner's own types (``gui.gateway.findings``,
``gui.gateway.run_state``): nothing below reads them by string key.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from gui.gateway.findings import (
    BottleneckRecord,
    CaptureRecord,
    Divergence,
    EarlyFailure,
    FindingEvents,
    LauncherFinding,
    NodeLost,
    StallEvent,
    StoredDiagnostics,
    StragglerCause,
    StragglerRecord,
    StragglerWithdrawn,
)
from gui.gateway.runner_rules import (
    Hint,
    HintKey,
    Outcome,
    RankFailure,
    RunSummary,
)
from gui.gateway.wording import RunWording
from gui.models import Event
from gui.models.monitor import MonitorModel, format_age
from gui.models.stacks import ERROR as STACKS_ERROR
from gui.models.stacks import INFO as STACKS_INFO
from gui.models.stacks import StacksLayout, layout_capture
from rankwatch.protocol import Bottleneck as Verdicts
from rankwatch.protocol import Event as HubEvent
from rankwatch.protocol import EventKind

ERROR, WARNING, INFO = "error", "warning", "info"
"""Banner levels."""


NOTHING_MEASURED = (HintKey.NO_RANK_REPORTED, HintKey.NO_STEP_MEASURED)
"""The summary hints of a job that exited 0 and measured nothing: no rank ever reported, or none made
a training step (``runner.diagnosis.hints``)."""

CAUSE_WORDS = {StragglerCause.DATA: "waiting for data", StragglerCause.COMPUTE: "computing"}
"""A straggler's cause, as the banner and the rank table say it."""
STRAGGLER_VERDICT = Verdicts.STRAGGLER.value
HEALTHY_VERDICTS = frozenset({Verdicts.COMPUTE.value})
"""Bottleneck verdicts that are no problem to point at (the device computes)."""


def clock(t: float | None) -> str:
    """``12:03:04`` (local time), or empty."""
    return "" if t is None else time.strftime("%H:%M:%S", time.localtime(float(t)))


def _ms(seconds: float | None) -> str:
    return "?" if seconds is None else f"{1000.0 * seconds:.0f} ms"


@dataclass(frozen=True)
class Finding:
    """One thing a monitor found: a stall, a straggler, a divergence, a stack capture, a lost node."""

    kind: str
    rank: int | None
    step: int | None
    text: str
    active: bool
    """Still going on (a stall not yet resumed, a straggler not yet cleared)."""
    t: float | None = None
    ranks: tuple[int, ...] = ()


MAX_FINDINGS = 500
FINDINGS_PER_RANK = 4
"""The findings held in memory: the newest ``MAX_FINDINGS``, or this many per rank in a bigger run
(a hang of 1,024 ranks is 1,024 stalls at once; 500 would have kept the last 500 of them)."""
ALIKE_STALLS_SHOWN = 3
"""Up to this many ranks stalled at one step get a findings row each; more get one row together."""


def close_finding(findings: list[Finding], kind: str, rank: int | None, tail: str) -> None:
    """End the newest active finding of ``kind`` for ``rank`` in place: no longer active, ``tail`` added."""
    for index in range(len(findings) - 1, -1, -1):
        finding = findings[index]
        if finding.kind == kind and finding.rank == rank and finding.active:
            findings[index] = Finding(kind, rank, finding.step, f"{finding.text}{tail}", False, finding.t,
                                      finding.ranks)
            return


@dataclass(frozen=True)
class Banner:
    level: str
    """``error``, ``warning`` or ``info``."""
    text: str
    kind: str
    """``failure``, ``hang``, ``stall``, ``node_lost``, ``straggler``, ``divergence``, ``findings``,
    ``no_rank_reported``, ``no_step_measured``, ``bottleneck`` (a verdict worth acting on)."""
    rank: int | None = None
    more: int = 0
    """Further findings not in this one line (the diagnosis panel lists them all)."""


@dataclass(frozen=True)
class RankLine:
    """One row of the diagnosis panel's "every rank" table: a rank, or ranks that ended alike."""

    ranks: tuple[int, ...]
    host: str
    """The ranks' host, or how many hosts they were on."""
    state: str
    fate: str
    detail: str
    first: bool

    @property
    def rank(self) -> int:
        return self.ranks[0]

    @property
    def label(self) -> str:
        """``3``, or ``0, 2-1023 (1,023)`` for ranks that ended alike."""
        ranks = RunWording.rank_numbers(self.ranks)
        return ranks if len(self.ranks) == 1 else f"{ranks} ({len(self.ranks):,})"


@dataclass(frozen=True)
class Bottleneck:
    """The run's bottleneck verdict (``runner.diagnosis.bottleneck``) as the monitor shows it."""

    verdict: str | None
    """``input-bound``, ``communication-bound``, ``launch-bound``, ``compute-bound``, ``straggler``,
    or None: not determined (``evidence`` says why)."""
    evidence: str
    action: str | None
    rank: int | None
    """The straggler."""
    phase: str | None
    """The phase that names it: a straggler's, else the dominant one."""
    clock: str | None
    steps: int
    whole_run: bool
    """The verdict over the whole run (the summary's), not the live one (the latest event)."""
    t: float | None = None
    ranks: tuple[tuple[int, str | None], ...] = ()
    """Each rank's own verdict, by rank."""
    ended: bool = False
    """The run ended without a whole-run verdict (a runner that was killed): the last live one."""

    @classmethod
    def of(cls, record: BottleneckRecord, whole_run: bool, t: float | None = None, ended: bool = False) -> Bottleneck:
        """The runner's verdict as the monitor shows it (the summary's, or a ``bottleneck`` event's at ``t``)."""
        verdict = record.verdict
        return cls(None if verdict.kind is None else verdict.kind.value, verdict.evidence, verdict.action,
                   verdict.rank, verdict.phase, verdict.clock, verdict.steps, whole_run, t,
                   tuple((rank, None if each.kind is None else each.kind.value)
                         for rank, each in sorted(record.ranks.items())), ended)

    @property
    def title(self) -> str:
        """``input-bound``, ``a straggler: rank 1 (forward)``, ``not determined``."""
        if self.verdict is None:
            return "not determined"
        if self.verdict == STRAGGLER_VERDICT:
            who = f"rank {self.rank}" if self.rank is not None else "a rank"
            return f"a straggler: {who}" + (f" ({self.phase})" if self.phase else "")
        return self.verdict

    @property
    def scope(self) -> str:
        """``whole run, 640 timed steps``, ``live, last 10 timed steps``, or ``last live verdict, ...``
        for a run that ended without a whole-run verdict."""
        if self.whole_run:
            return "whole run" + (f", {self.steps} timed steps" if self.steps else "")
        return ("last live verdict" if self.ended else "live") + (
            f", last {self.steps} timed steps" if self.steps else "")

    @property
    def problem(self) -> bool:
        """Worth a banner: a verdict that is not healthy compute."""
        return self.verdict is not None and self.verdict not in HEALTHY_VERDICTS

    @property
    def short_evidence(self) -> str:
        """The evidence without what the title says already (a straggler's rank, "not determined")."""
        evidence = self.evidence
        if self.verdict is None and evidence.startswith("not determined: "):
            evidence = evidence[len("not determined: "):]
        if self.verdict == STRAGGLER_VERDICT and self.rank is not None:
            lead = f"rank {self.rank} is a straggler: "  # the straggler's message: its rank is in the title
            evidence = evidence[len(lead):] if evidence.startswith(lead) else evidence
        return evidence

    @property
    def text(self) -> str:
        """``bottleneck: input-bound: waiting for data 45 % of the step (...) → feed it faster: ...``."""
        evidence = self.short_evidence
        line = f"bottleneck: {self.title}: {evidence}" if evidence else f"bottleneck: {self.title}"
        return f"{line} → {self.action}" if self.action else line

    def rank_verdicts_text(self) -> str:
        """``rank 0 compute-bound · rank 1 input-bound`` when the ranks' own verdicts differ, else empty."""
        if len({verdict for _rank, verdict in self.ranks}) <= 1:
            return ""
        return " · ".join(f"rank {rank} {verdict or 'not determined'}" for rank, verdict in self.ranks)


def _straggler(straggler: StragglerRecord | Mapping[str, Any]) -> StragglerRecord:
    """A straggler as the runner types it; its JSON (a stored finding, an event's fields) is read as one."""
    return straggler if isinstance(straggler, StragglerRecord) else StragglerRecord.from_wire(straggler)


def straggler_text(straggler: StragglerRecord | Mapping[str, Any], past: bool = False) -> str:
    """``rank 1 is a straggler at step 6: it waits for data (161 ms of its 167 ms step in the data loader; ...)``.

    The runner's message says it (``runner.diagnosis.stragglers``: the phase, on the step's
    clock); only the step is added, and the tense once it is over. Events without a message
    (older stores) are worded from their fields.
    """
    record = _straggler(straggler)
    rank = record.rank
    verb = "was" if past else "is"
    where = f" at step {record.step}" if record.step is not None else ""
    if record.message:
        lead = f"rank {rank} is a straggler"
        if record.message.startswith(lead):
            return f"rank {rank} {verb} a straggler{where}{record.message[len(lead):]}"
        return record.message
    cause = "cause unknown" if record.cause is None else CAUSE_WORDS[record.cause]
    if record.cause == StragglerCause.DATA:
        detail = (f"{_ms(record.data_wait)} of its {_ms(record.step_time)} step in the data loader; "
                  f"the other ranks wait {_ms(record.others_data_wait)}")
    elif record.compute_time is not None and record.others_compute_time is not None:
        # under DDP every rank's step time is the same: the compute times are the evidence
        detail = (f"{_ms(record.compute_time)} of its {_ms(record.step_time)} step vs "
                  f"{_ms(record.others_compute_time)} on the other ranks, which wait for it in collectives")
    else:
        detail = (f"{_ms(record.step_time)} per step against {_ms(record.others_step_time)} "
                  "on the other ranks, not explained by data wait")
    return f"rank {rank} {verb} a straggler{where}: {cause} ({detail})"


def straggler_note(straggler: StragglerRecord | Mapping[str, Any]) -> str:
    """The rank table's note: ``straggler: waiting for data``, ``straggler: computing (forward)``."""
    record = _straggler(straggler)
    note = f"straggler: {'?' if record.cause is None else CAUSE_WORDS[record.cause]}"
    if record.cause != StragglerCause.DATA and record.phase:
        note += f" ({record.phase})"
    return note


def divergence_text(divergence: Divergence, rank: int | None = None) -> str:
    """``parameters diverged at step 14: rank 1 disagrees with rank 0``; ``rank``: the event's, for one
    that names no ranks."""
    ranks = list(divergence.ranks) or ([rank] if rank is not None else [])
    who = RunWording.ranks(ranks) if ranks else "a rank"
    verb = "disagrees" if len(ranks) == 1 else "disagree"
    against = f" with {RunWording.ranks(divergence.reference)}" if divergence.reference else ""
    return f"parameters diverged at step {divergence.step}: {who} {verb}{against}"


def _stall_line(stalls: Iterable[StallEvent], now: float) -> str:
    """``rank 0 stalled at step 7 for 12 s`` (several ranks at one step in one line)."""
    by_step: dict[int | None, list[StallEvent]] = {}
    for stall in stalls:
        by_step.setdefault(stall.step, []).append(stall)
    parts = []
    for step, events in sorted(by_step.items(), key=lambda item: (item[0] is None, item[0] or 0)):
        ranks = sorted(stall.rank for stall in events if stall.rank is not None)
        seconds = min(stall.stalled_for(now) for stall in events)
        where = f"at step {step}" if step is not None else "before its first step"
        parts.append(f"{RunWording.ranks(ranks)} stalled {where} for {format_age(seconds)}")
    return "; ".join(parts)


@dataclass(frozen=True)
class _Divergence:
    """A ``divergence`` event: its finding and the event's own rank and time."""

    divergence: Divergence
    rank: int | None
    t: float


@dataclass(frozen=True)
class _Mismatch:
    """A ``launch_mismatch`` event: its finding, the rank that showed it first, and its message."""

    finding: LauncherFinding
    rank: int | None
    message: str


class DiagnosisModel:
    """The diagnosis of the run a :class:`MonitorModel` holds.

    Events (``gui.models.Event``):
        changed: the summary or a finding changed (redraw the banner and the panel).
        stacks_received(CaptureRecord): a new stack capture (the ``stacks`` event's analysis).
    """

    def __init__(self, monitor: MonitorModel) -> None:
        self.monitor = monitor
        self.changed = Event()
        self.stacks_received = Event()
        self._clear()
        monitor.reset.connect(self._on_reset)
        monitor.events_added.connect(self._on_events_added)
        monitor.run_changed.connect(self._on_run_changed)
        self._on_reset()

    def _clear(self) -> None:
        self._events_seen = 0
        self._summary_seen: Mapping[str, Any] | None = None
        self._finished_summary: Mapping[str, Any] | None = None
        """The ``run_finished`` event's summary, until the run's row has it."""
        self.stalls: dict[int, StallEvent] = {}
        """rank -> its open ``stalled`` event (removed on ``resumed``)."""
        self.findings_seen: list[Finding] = []
        self.stragglers: dict[int, StragglerRecord] = {}
        """rank -> its active ``straggler`` event."""
        self.divergences: list[_Divergence] = []
        self.lost_nodes: dict[int, NodeLost] = {}
        self.launch_mismatches: dict[str, _Mismatch] = {}
        """key -> the ``launch_mismatch`` event (the first rank that showed it)."""
        self._decoded: tuple[Mapping[str, Any], RunSummary, StoredDiagnostics] | None = None
        """The summary last decoded, and the mapping it was decoded from."""
        self.early_failures: list[EarlyFailure] = []
        """``exception``, ``rank_failed`` and ``connection_lost`` events: what is known of a
        failure before the runner's triage names the first one (at the end of the run)."""
        self._stopping = False
        self.live_bottleneck: tuple[BottleneckRecord, float] | None = None
        """The latest ``bottleneck`` event and its time: the run's live verdict."""
        self.capture: CaptureRecord | None = None
        self.captures = 0
        self._layout: tuple[CaptureRecord, StacksLayout] | None = None

    # ---- following the monitor model --------------------------------------------------

    def _on_reset(self) -> None:
        self._clear()
        self._take_events(list(self.monitor.events))
        self._events_seen = self.monitor.events_total
        self._summary_seen = self.summary
        self._load_stored_capture()
        self.changed.emit()

    def _on_events_added(self) -> None:
        new = self.monitor.events_total - self._events_seen
        if new <= 0:
            return
        events = self.monitor.events
        self._events_seen = self.monitor.events_total
        if self._take_events(list(events)[-min(new, len(events)):]):
            self.changed.emit()

    def _on_run_changed(self) -> None:
        summary = self.summary
        if summary is not self._summary_seen and summary != self._summary_seen:
            self._summary_seen = summary
            self._load_stored_capture()
            self.changed.emit()

    def _load_stored_capture(self) -> None:
        """The last capture of a finished run whose ``stacks`` events are no longer in memory: its file."""
        if self.capture is not None:
            return
        stacks = self.diagnostics.stacks
        path = None if stacks is None else stacks.json_path
        if not path:
            return
        try:
            with open(path, encoding="utf-8") as handle:
                capture = json.load(handle)
        except (OSError, ValueError):
            return  # moved or deleted: the summary's verdict is still shown in the findings
        stored = FindingEvents.capture_file(capture)
        if stored is not None:
            self.capture = stored
            self.captures += 1
            self.stacks_received.emit(self.capture)

    def _take_events(self, events: Iterable[HubEvent]) -> bool:
        """Apply events in order (as the monitor holds them, typed); True when anything the
        diagnosis shows changed."""
        changed = False
        for event in events:
            if self._take_event(event):
                changed = True
        return changed

    def _take_event(self, event: HubEvent) -> bool:
        """One typed event; True when it changed what is shown."""
        kind, rank, t = event.kind, event.rank, event.t
        if kind == EventKind.STALLED and rank is not None:
            stall = self.stalls[rank] = FindingEvents.stall(event)
            self._note(Finding(kind.value, rank, stall.step, stall.message or _stall_line([stall], t), True, t))
        elif kind == EventKind.RESUMED and rank is not None:
            self.stalls.pop(rank, None)
            step = FindingEvents.resumed_step(event)
            self._close(EventKind.STALLED.value, rank, f"resumed at step {step}")
        elif kind == EventKind.STRAGGLER and rank is not None:
            straggler = FindingEvents.straggler(event)
            if isinstance(straggler, StragglerWithdrawn):
                self.stragglers.pop(rank, None)
                self._close(kind.value, rank, f"no longer a straggler at step {straggler.step}")
            else:
                self.stragglers[rank] = straggler
                self._note(Finding(kind.value, rank, straggler.step, straggler_text(straggler), True, t))
        elif kind == EventKind.DIVERGENCE:
            divergence = FindingEvents.divergence(event)
            self.divergences.append(_Divergence(divergence, rank, t))
            self._note(Finding(kind.value, rank, divergence.step, divergence_text(divergence, rank), True, t,
                               tuple(divergence.ranks)))
        elif kind == EventKind.STACKS and (capture := FindingEvents.capture(event)) is not None:
            self.capture = capture
            self.captures += 1
            layout = self._laid_out(capture)
            self._note(Finding(kind.value, None, None, f"stacks ({layout.reason}): {layout.verdict}", False, t))
            self.stacks_received.emit(capture)
        elif kind == EventKind.FLIGHT_RECORDER:  # the ranks' collectives compared after a capture
            culprits = FindingEvents.flight_recorder_culprits(event)
            self._note(Finding(kind.value, culprits[0] if len(culprits) == 1 else None, None,
                               f"collectives (Flight Recorder): {event.message}", bool(culprits), t, culprits))
        elif kind == EventKind.LAUNCH_MISMATCH:
            mismatch = FindingEvents.launcher(event)
            if not mismatch.key:
                return False
            self.launch_mismatches[mismatch.key] = _Mismatch(mismatch, rank, event.message)
            self._note(Finding(kind.value, rank, None, mismatch.title or mismatch.cause or event.message,
                               mismatch.level != "info", t))
        elif kind == EventKind.NODE_LOST:
            lost = FindingEvents.node_lost(event)
            self.lost_nodes[lost.node_rank if lost.node_rank is not None else -1] = lost
            self._note(Finding(kind.value, None, None, lost.message or "a node was lost", True, t))
        elif kind in (EventKind.RANK_FAILED, EventKind.EXCEPTION) and rank is not None:
            failure = FindingEvents.early_failure(event)
            if kind == EventKind.RANK_FAILED or failure.fatal:
                self.early_failures.append(failure)
        elif kind == EventKind.CONNECTION_LOST and rank is not None:
            if not self._stopping:  # ranks stopped on request drop their connections too
                self.early_failures.append(FindingEvents.early_failure(event))
        elif kind == EventKind.STOPPING:
            self._stopping = True
        elif kind == EventKind.BOTTLENECK:
            self.live_bottleneck = (FindingEvents.bottleneck(event), t)
        elif kind == EventKind.RUN_FINISHED:
            summary = FindingEvents.finished_summary(event)
            if summary is None:
                return False
            self._finished_summary = summary
        else:
            return False
        return True

    def _note(self, finding: Finding) -> None:
        self.findings_seen.append(finding)
        del self.findings_seen[:-max(MAX_FINDINGS, FINDINGS_PER_RANK * len(self.monitor.ranks))]

    def _close(self, kind: str, rank: int, how: str) -> None:
        close_finding(self.findings_seen, kind, rank, f"; {how}")

    # ---- what the views read ----------------------------------------------------------

    @property
    def summary(self) -> Mapping[str, Any] | None:
        """The run's summary as it came (the run's row, else the ``run_finished`` event); read it
        through ``run_summary`` and ``diagnostics``."""
        summary = None if self.monitor.run is None else self.monitor.run.summary
        if summary is not None:
            return summary
        return self._finished_summary

    def _decoded_summary(self) -> tuple[RunSummary, StoredDiagnostics] | None:
        """The summary decoded once (the runner's ``RunSummary`` and its findings), while it is the same."""
        summary = self.summary
        if summary is None:
            return None
        if self._decoded is None or self._decoded[0] is not summary:
            decoded = RunSummary.from_wire(dict(summary))
            self._decoded = (summary, decoded, decoded.diagnostics or StoredDiagnostics())
        return self._decoded[1], self._decoded[2]

    @property
    def run_summary(self) -> RunSummary | None:
        decoded = self._decoded_summary()
        return None if decoded is None else decoded[0]

    @property
    def outcome(self) -> Outcome | None:
        decoded = self.run_summary
        return None if decoded is None else decoded.outcome

    @property
    def failed(self) -> bool:
        return self.outcome == Outcome.FAILED

    @property
    def headline(self) -> str:
        decoded = self.run_summary
        return "" if decoded is None else decoded.headline

    @property
    def first_failure(self) -> RankFailure | None:
        decoded = self.run_summary
        return None if decoded is None else decoded.first_failure

    @property
    def other_failures(self) -> list[RankFailure]:
        decoded = self.run_summary
        return [] if decoded is None else list(decoded.other_failures)

    @property
    def hints(self) -> list[Hint]:
        decoded = self.run_summary
        return [] if decoded is None else list(decoded.hints)

    @property
    def diagnostics(self) -> StoredDiagnostics:
        """What the monitors found, as the summary keeps it (empty before the summary)."""
        decoded = self._decoded_summary()
        return StoredDiagnostics() if decoded is None else decoded[1]

    @property
    def bottleneck(self) -> Bottleneck | None:
        """The run's bottleneck verdict: over the whole run once the summary has it, else the
        live one (the latest ``bottleneck`` event); None before either."""
        final = self.diagnostics.bottleneck
        if final is not None:
            return Bottleneck.of(final, whole_run=True)
        if self.live_bottleneck is None:
            return None
        record, t = self.live_bottleneck
        return Bottleneck.of(record, whole_run=False, t=t, ended=self.monitor.finished)

    def stacks_layout(self) -> StacksLayout | None:
        """The latest stack capture laid out side by side."""
        return None if self.capture is None else self._laid_out(self.capture)

    def _laid_out(self, capture: CaptureRecord) -> StacksLayout:
        """``capture`` laid out, once per capture (the panel asks on every refresh)."""
        if self._layout is None or self._layout[0] is not capture:
            self._layout = (capture, layout_capture(capture))
        return self._layout[1]

    def findings(self) -> list[Finding]:
        """Everything the monitors found, oldest first; the summary's record fills in what the
        events no longer hold (a long run's early events drop out of memory)."""
        found = list(self.findings_seen)
        kinds = {f.kind for f in found}
        diagnostics = self.diagnostics
        for stall in diagnostics.stalls:  # how the run's end closed a stall the events left open
            if stall.finished_after is not None:
                close_finding(found, EventKind.STALLED.value, stall.rank, RunWording.stall_outcome(stall))
        if EventKind.STALLED.value not in kinds:
            for stall in diagnostics.stalls:
                where = f"at step {stall.step}" if stall.step is not None else "before its first step"
                hung = stall.resumed_after is None and stall.finished_after is None
                found.append(Finding(EventKind.STALLED.value, stall.rank, stall.step,
                                     f"rank {stall.rank} stalled {where} (no progress for {stall.seconds:.0f} s)"
                                     f"{RunWording.stall_outcome(stall)}", hung, stall.since))
        if EventKind.STRAGGLER.value not in kinds:
            for straggler in diagnostics.stragglers:
                found.append(Finding(EventKind.STRAGGLER.value, straggler.rank, straggler.step,
                                     straggler_text(straggler, past=True), False))
        if EventKind.DIVERGENCE.value not in kinds:
            for divergence in diagnostics.divergences:
                found.append(Finding(EventKind.DIVERGENCE.value, divergence.ranks[0] if divergence.ranks else None,
                                     divergence.step, divergence_text(divergence), False,
                                     ranks=tuple(divergence.ranks)))
        stacks = diagnostics.stacks
        if EventKind.STACKS.value not in kinds and stacks is not None:
            text = f"stacks ({stacks.reason}): {stacks.verdict.message or 'captured'}"
            found.append(Finding(EventKind.STACKS.value, None, None, text, False, stacks.t))
        flight = diagnostics.flight_recorder
        if EventKind.FLIGHT_RECORDER.value not in kinds and flight is not None and flight.message:
            culprits = tuple(flight.culprits)
            found.append(Finding(EventKind.FLIGHT_RECORDER.value, culprits[0] if len(culprits) == 1 else None, None,
                                 f"collectives (Flight Recorder): {flight.message}", False, ranks=culprits))
        if EventKind.LAUNCH_MISMATCH.value not in kinds:
            for record in diagnostics.launcher:
                found.append(Finding(EventKind.LAUNCH_MISMATCH.value, None, None, record.title or record.cause,
                                     record.level != "info", ranks=tuple(record.ranks)))
        return found

    def finding_rows(self) -> list[Finding]:
        """``findings`` as the panel's table lists them: more than ``ALIKE_STALLS_SHOWN`` ranks
        stalled at one step (a hang of every rank) are one row naming them as ranges, where it
        was a row per rank; each rank's own line stays in the Events tab."""
        found = self.findings()
        alike: dict[tuple[int | None, bool], list[Finding]] = {}
        for finding in found:
            if finding.kind == EventKind.STALLED.value and finding.rank is not None:
                alike.setdefault((finding.step, finding.active), []).append(finding)
        grouped = {key: group for key, group in alike.items() if len(group) > ALIKE_STALLS_SHOWN}
        rows: list[Finding] = []
        said: set[tuple[int | None, bool]] = set()
        for finding in found:
            key = (finding.step, finding.active)
            if finding.kind != EventKind.STALLED.value or key not in grouped or finding.rank is None:
                rows.append(finding)
                continue
            if key in said:
                continue  # folded into its group's row
            said.add(key)
            ranks = tuple(sorted(member.rank for member in grouped[key] if member.rank is not None))
            where = f"at step {finding.step}" if finding.step is not None else "before their first step"
            how = "still stalled" if finding.active else "each rank's end of it in the Events tab"
            rows.append(Finding(finding.kind, None, finding.step, f"{RunWording.ranks(ranks)} stalled {where} "
                                f"({len(ranks):,} ranks; {how})", finding.active, finding.t, ranks))
        return rows

    def rank_notes(self, now: float | None = None) -> dict[int, str]:
        """Short notes for the rank table: who failed first, who stalls, straggles or diverged."""
        now = time.time() if now is None else now
        notes: dict[int, list[str]] = {}
        first = self.first_failure
        if first is not None and first.rank is not None:
            notes.setdefault(first.rank, []).append(f"failed first: {RunWording.failure_end(first)}")
        live = not self.monitor.finished
        if live:
            for rank, stall in self.stalls.items():
                where = f" at step {stall.step}" if stall.step is not None else ""
                notes.setdefault(rank, []).append(f"stalled{where} for {format_age(stall.stalled_for(now))}")
        for rank, straggler in self.stragglers.items():
            notes.setdefault(rank, []).append(straggler_note(straggler))
        for seen in self.divergences:
            for rank in seen.divergence.ranks:
                notes.setdefault(rank, []).append(f"diverged at step {seen.divergence.step}")
        capture = self.stacks_layout()
        if capture is not None and capture.level != STACKS_INFO:
            for column in capture.culprit_columns:
                frame = column.marked_frame
                for rank in column.ranks:
                    notes.setdefault(rank, []).append("culprit: " + (f"stuck at {frame.location}" if frame else
                                                                     column.what))
        return {rank: "; ".join(dict.fromkeys(texts)) for rank, texts in notes.items()}

    def rank_lines(self) -> list[RankLine]:
        """Every rank's fate: the first failure, the others triage names, and what the rank rows say.
        The first failure leads; ranks that ended alike share a line (at 1,024 ranks one failure
        is one line and one line for the 1,023 torchrun stopped after it, not a thousand)."""
        groups: dict[tuple[str, str, str], list[RankLine]] = {}
        lines: list[RankLine | list[RankLine]] = []
        for line in self._lines_per_rank():
            if line.first:
                lines.insert(0, line)  # the first failure leads, the echoes after it
                continue
            key = (line.state, line.fate, line.detail)
            if key not in groups:
                groups[key] = []
                lines.append(groups[key])
            groups[key].append(line)
        return [line if isinstance(line, RankLine) else _one_line(line) for line in lines]

    def _lines_per_rank(self) -> list[RankLine]:
        first = self.first_failure
        fates = {fate.rank: fate for fate in self.other_failures if fate.rank is not None}
        if first is not None and first.rank is not None:
            fates[first.rank] = first
        ranks = {row.rank: row for row in self.monitor.rank_rows()}
        lines = []
        for rank in sorted(set(ranks) | set(fates)):
            row = ranks.get(rank)
            fate = fates.get(rank)
            state = "" if row is None else row.state
            host = str((row.host if row is not None else None) or (fate.host if fate else "") or "")
            if fate is not None:
                how = RunWording.failure_end(fate)
                detail = fate.exception_line or ""
            else:
                exit_code = None if row is None else row.exit_code
                how = RunWording.ended_by(exit_code) if exit_code is not None else ""
                detail = ""
            is_first = first is not None and first.rank == rank
            lines.append(RankLine((rank,), host, state, ("failed first: " if is_first else "") + how, detail,
                                  is_first))
        return lines

    def banner(self, now: float | None = None) -> Banner | None:
        """The one line above the monitor: the failure, else the worst live finding."""
        now = time.time() if now is None else now
        summary = self.summary
        findings = self.findings()
        if summary is not None:
            outcome = self.outcome
            first = self.first_failure
            lost = self._lost_nodes_text()
            if outcome == Outcome.FAILED:
                text = self.headline or "the run failed"
                if lost and lost not in text:
                    text += f" · {lost}"
                return Banner(ERROR, text, "failure", first.rank if first else None,
                              more=len([f for f in findings if f.kind in (EventKind.STALLED.value, EventKind.STRAGGLER.value, EventKind.DIVERGENCE.value)]))
            interesting = [f for f in findings if f.kind in (EventKind.STALLED.value, EventKind.STRAGGLER.value, EventKind.DIVERGENCE.value)
                           or (f.kind == EventKind.LAUNCH_MISMATCH.value and f.active)]
            nothing = next((hint.key.value for hint in self.hints if hint.key in NOTHING_MEASURED), None)
            if outcome == Outcome.SUCCEEDED and nothing:
                return Banner(WARNING, self.headline, nothing)  # exit code 0, yet nothing was measured
            if outcome == Outcome.STOPPED and any(f.kind == EventKind.STALLED.value for f in interesting):
                return Banner(WARNING, self.headline, "hang", more=len(interesting) - 1)
            if outcome == Outcome.STOPPED and any(f.kind == EventKind.LAUNCH_MISMATCH.value for f in interesting):
                return Banner(WARNING, self.headline, EventKind.LAUNCH_MISMATCH.value, more=len(interesting) - 1)
            if interesting:
                parts = []
                for kind in (EventKind.STALLED.value, EventKind.STRAGGLER.value, EventKind.DIVERGENCE.value, EventKind.LAUNCH_MISMATCH.value):
                    texts = list(dict.fromkeys(f.text for f in interesting if f.kind == kind))
                    if texts:
                        parts.append(texts[0])
                lead = self.headline or (outcome.value if outcome else "the run ended")
                return Banner(WARNING, f"{lead}, but {'; '.join(parts)}", "findings",
                              more=max(0, len(interesting) - len(parts)))
            bottleneck = self.bottleneck
            if bottleneck is not None and bottleneck.problem:
                lead = self.headline or (outcome.value if outcome else "the run ended")
                return Banner(INFO, f"{lead}; {bottleneck.text}", EventKind.BOTTLENECK.value, bottleneck.rank)
            return None
        candidates: list[Banner] = []
        if self.lost_nodes:
            candidates.append(Banner(ERROR, self._lost_nodes_text(), EventKind.NODE_LOST.value))
        if self.stalls and not self.monitor.finished:
            stalls = list(self.stalls.values())
            text = _stall_line(stalls, now)
            layout = self.stacks_layout()
            if layout is not None and layout.level != STACKS_INFO and layout.verdict:
                text += f" · {layout.verdict}"
            culprits = layout.culprits if layout is not None and layout.level == STACKS_ERROR else ()
            candidates.append(Banner(WARNING, text, "stall", culprits[0] if culprits else min(self.stalls)))
        for mismatch in self.launch_mismatches.values():
            if mismatch.finding.level != "info":
                candidates.append(Banner(WARNING, f"{mismatch.finding.title or mismatch.finding.cause} (see Diagnosis)",
                                         EventKind.LAUNCH_MISMATCH.value, mismatch.rank))
        if self.early_failures and not candidates:
            failure = min(self.early_failures, key=lambda each: each.t)
            candidates.append(Banner(ERROR, f"{failure.text}; waiting for the runner's diagnosis…", "failure",
                                     failure.rank))
        # the straggler that holds the others up most first (as the bottleneck verdict names it)
        for rank, straggler in sorted(self.stragglers.items(), key=lambda item: (-(item[1].excess or 0.0), item[0])):
            candidates.append(Banner(WARNING, straggler_text(straggler), EventKind.STRAGGLER.value, rank))
        for seen in self.divergences[-1:]:
            candidates.append(Banner(WARNING, divergence_text(seen.divergence, seen.rank), EventKind.DIVERGENCE.value,
                                     seen.rank))
        bottleneck = self.bottleneck
        if (bottleneck is not None and bottleneck.problem
                and not (bottleneck.verdict == STRAGGLER_VERDICT and self.stragglers)):
            candidates.append(Banner(INFO, bottleneck.text, EventKind.BOTTLENECK.value, bottleneck.rank))
        if not candidates:
            return None
        top = candidates[0]
        return Banner(top.level, top.text, top.kind, top.rank, more=len(candidates) - 1)

    def _lost_nodes_text(self) -> str:
        texts = [lost.message or f"node {node} was lost" for node, lost in sorted(self.lost_nodes.items())]
        return "; ".join(texts)


def _one_line(alike: list[RankLine]) -> RankLine:
    """Ranks that ended alike as one line: their ranks, and their host or how many hosts."""
    hosts = list(dict.fromkeys(line.host for line in alike))
    first = alike[0]
    return RankLine(tuple(rank for line in alike for rank in line.ranks),
                    hosts[0] if len(hosts) == 1 else f"{len(hosts):,} hosts", first.state, first.fate, first.detail,
                    False)
