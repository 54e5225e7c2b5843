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
odd input (a field that is missing is shown as unknown).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from gui.gateway.runner_rules import (
    Hint,
    HintKey,
    Outcome,
    RankFailure,
    RunSummary,
    ended_by,
    failure_end_words,
    stall_outcome,
)
from gui.models import Event
from gui.models.monitor import MonitorModel, format_age
from gui.models.stacks import ERROR as STACKS_ERROR
from gui.models.stacks import INFO as STACKS_INFO
from gui.models.stacks import StacksLayout, is_capture, layout_capture, ranks_text
from rankwatch.protocol import Bottleneck as Verdicts
from rankwatch.protocol import EventKind
from rankwatch.protocol import as_float as _float
from rankwatch.protocol import as_int as _int

ERROR, WARNING, INFO = "error", "warning", "info"
"""Banner levels."""


NOTHING_MEASURED = (HintKey.NO_RANK_REPORTED, HintKey.NO_STEP_MEASURED)
"""The summary hints of a job that exited 0 and measured nothing: no rank ever reported, or none made
a training step (``runner.diagnosis.hints``)."""

CAUSE_WORDS = {"data": "waiting for data", "compute": "computing"}
"""A straggler's cause, as the banner and the rank table say it."""
STRAGGLER_VERDICT = Verdicts.STRAGGLER.value
HEALTHY_VERDICTS = frozenset({Verdicts.COMPUTE.value})
"""Bottleneck verdicts that are no problem to point at (the device computes)."""


def clock(t: float | None) -> str:
    """``12:03:04`` (local time), or empty."""
    return "" if t is None else time.strftime("%H:%M:%S", time.localtime(float(t)))


def _ms(seconds: Any) -> str:
    value = _float(seconds)
    return "?" if value is None else f"{1000.0 * value:.0f} ms"


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
    """One row of the diagnosis panel's "every rank" table."""

    rank: int
    host: str
    state: str
    fate: str
    detail: str
    first: bool


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
    def from_record(cls, record: dict[str, Any], whole_run: bool, rank: int | None = None,
                    ended: bool = False) -> Bottleneck:
        verdict = record.get("verdict")
        found_ranks = record.get("ranks")
        ranks: dict[str, Any] = found_ranks if isinstance(found_ranks, dict) else {}
        per_rank = []
        for key, value in ranks.items():  # JSON object keys: "0", "1", ...
            if str(key).isdigit() and isinstance(value, dict):
                per_rank.append((int(key), value.get("verdict") if isinstance(value.get("verdict"), str) else None))
        return cls(verdict if isinstance(verdict, str) else None, str(record.get("evidence") or ""),
                   str(record["action"]) if record.get("action") else None,
                   _int(record.get("rank")) if record.get("rank") is not None else rank,
                   str(record["phase"]) if record.get("phase") else None,
                   str(record["clock"]) if record.get("clock") else None, _int(record.get("steps")) or 0,
                   whole_run, _float(record.get("t")), tuple(sorted(per_rank)), ended)

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


def straggler_text(event: dict[str, Any], past: bool = False) -> str:
    """``rank 1 is a straggler at step 6: it waits for data (161 ms of its 167 ms step in the data loader; ...)``.

    The runner's message says it (``runner.diagnosis.stragglers``: the phase, on the step's
    clock); only the step is added, and the tense once it is over. Events without a message
    (older stores) are worded from their fields.
    """
    rank = event.get("rank")
    message = event.get("message")
    if isinstance(message, str) and message:
        verb = "was" if past else "is"
        lead = f"rank {rank} is a straggler"
        if message.startswith(lead):
            step = event.get("step")
            where = f" at step {step}" if step is not None else ""
            return f"rank {rank} {verb} a straggler{where}{message[len(lead):]}"
        return message
    cause = CAUSE_WORDS.get(str(event.get("cause")), str(event.get("cause") or "cause unknown"))
    step = event.get("step")
    where = f" at step {step}" if step is not None else ""
    if event.get("cause") == "data":
        detail = (f"{_ms(event.get('data_wait'))} of its {_ms(event.get('step_time'))} step in the data loader; "
                  f"the other ranks wait {_ms(event.get('others_data_wait'))}")
    elif event.get("compute_time") is not None and event.get("others_compute_time") is not None:
        # under DDP every rank's step time is the same: the compute times are the evidence
        detail = (f"{_ms(event.get('compute_time'))} of its {_ms(event.get('step_time'))} step vs "
                  f"{_ms(event.get('others_compute_time'))} on the other ranks, which wait for it in collectives")
    else:
        detail = (f"{_ms(event.get('step_time'))} per step against {_ms(event.get('others_step_time'))} "
                  "on the other ranks, not explained by data wait")
    verb = "was" if past else "is"
    return f"rank {rank} {verb} a straggler{where}: {cause} ({detail})"


def straggler_note(event: dict[str, Any]) -> str:
    """The rank table's note: ``straggler: waiting for data``, ``straggler: computing (forward)``."""
    cause = str(event.get("cause"))
    note = f"straggler: {CAUSE_WORDS.get(cause, '?')}"
    phase = event.get("phase")
    if cause != "data" and isinstance(phase, str) and phase:
        note += f" ({phase})"
    return note


def divergence_text(event: dict[str, Any]) -> str:
    """``parameters diverged at step 14: rank 1 disagrees with rank 0``."""
    ranks = [r for r in (event.get("ranks") or []) if isinstance(r, int)] or (
        [event["rank"]] if isinstance(event.get("rank"), int) else [])
    reference = [r for r in (event.get("reference") or []) if isinstance(r, int)]
    who = ranks_text(ranks) if ranks else "a rank"
    verb = "disagrees" if len(ranks) == 1 else "disagree"
    against = f" with {ranks_text(reference)}" if reference else ""
    return f"parameters diverged at step {event.get('step')}: {who} {verb}{against}"


def _early_failure_text(event: dict[str, Any]) -> str:
    """``rank 1 raised ValueError: ...``, ``rank 0 failed (exit code 1)``, ``rank 1 disconnected ...``."""
    rank = event.get("rank")
    if event.get("kind") == EventKind.EXCEPTION.value:
        return f"rank {rank} raised {event.get('message') or event.get('exc_type') or 'an exception'}"
    if event.get("kind") == EventKind.CONNECTION_LOST.value:
        return f"rank {rank} disconnected without an exit message (killed?)"
    code = _int(event.get("exit_code"))
    return f"rank {rank} failed" + (f" ({ended_by(code)})" if code is not None else "")


def _stall_line(stalls: list[dict[str, Any]], now: float) -> str:
    """``rank 0 stalled at step 7 for 12 s`` (several ranks at one step in one line)."""
    by_step: dict[Any, list[dict[str, Any]]] = {}
    for event in stalls:
        by_step.setdefault(event.get("step"), []).append(event)
    parts = []
    for step, events in sorted(by_step.items(), key=lambda item: (item[0] is None, item[0] or 0)):
        ranks = sorted(e["rank"] for e in events if isinstance(e.get("rank"), int))
        seconds = min(_stall_seconds(e, now) for e in events)
        where = f"at step {step}" if step is not None else "before its first step"
        verb = "stalled"
        parts.append(f"{ranks_text(ranks)} {verb} {where} for {format_age(seconds)}")
    return "; ".join(parts)


def _stall_seconds(event: dict[str, Any], now: float) -> float:
    since = _float(event.get("last_progress"))
    if since is not None:
        return max(0.0, now - since)
    seconds = _float(event.get("seconds")) or 0.0
    t = _float(event.get("t"))
    return seconds + (max(0.0, now - t) if t is not None else 0.0)


class DiagnosisModel:
    """The diagnosis of the run a :class:`MonitorModel` holds.

    Events (``gui.models.Event``):
        changed: the summary or a finding changed (redraw the banner and the panel).
        stacks_received(dict): a new stack capture (the ``stacks`` event's analysis).
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
        self._summary_seen: Any = None
        self._finished_summary: dict[str, Any] | None = None
        self.stalls: dict[int, dict[str, Any]] = {}
        """rank -> its open ``stalled`` event (removed on ``resumed``)."""
        self.findings_seen: list[Finding] = []
        self.stragglers: dict[int, dict[str, Any]] = {}
        """rank -> its active ``straggler`` event."""
        self.divergences: list[dict[str, Any]] = []
        self.lost_nodes: dict[int, dict[str, Any]] = {}
        self.launch_mismatches: dict[str, dict[str, Any]] = {}
        """key -> the ``launch_mismatch`` event (the first rank that showed it)."""
        self._decoded: tuple[dict[str, Any], RunSummary] | None = None
        """The summary last decoded, and the dict it was decoded from."""
        self.early_failures: list[dict[str, Any]] = []
        """``exception``, ``rank_failed`` and ``connection_lost`` events: what is known of a
        failure before the runner's triage names the first one (at the end of the run)."""
        self._stopping = False
        self.live_bottleneck: dict[str, Any] | None = None
        """The latest ``bottleneck`` event: the run's live verdict."""
        self.capture: dict[str, Any] | None = None
        self.captures = 0
        self._layout: tuple[dict[str, Any], StacksLayout] | None = None

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
        stacks = self.diagnostics.get("stacks")
        path = stacks.get("json_path") if isinstance(stacks, dict) else None
        if not isinstance(path, str) or not path:
            return
        try:
            with open(path, encoding="utf-8") as handle:
                capture = json.load(handle)
        except (OSError, ValueError):
            return  # moved or deleted: the summary's verdict is still shown in the findings
        if isinstance(capture, dict) and isinstance(capture.get("groups"), list):
            capture.pop("threads", None)
            self.capture = {**capture, "kind": EventKind.STACKS.value}
            self.captures += 1
            self.stacks_received.emit(self.capture)

    def _take_events(self, events: list[dict[str, Any]]) -> bool:
        """Apply events in order; True when anything the diagnosis shows changed."""
        changed = False
        for event in events:
            kind = event.get("kind")
            rank = event.get("rank")
            if kind == EventKind.STALLED.value and isinstance(rank, int):
                self.stalls[rank] = event
                self._note(Finding(EventKind.STALLED.value, rank, _int(event.get("step")), str(event.get("message") or
                                   _stall_line([event], _float(event.get("t")) or time.time())), True,
                                   _float(event.get("t"))))
            elif kind == EventKind.RESUMED.value and isinstance(rank, int):
                self.stalls.pop(rank, None)
                self._close(EventKind.STALLED.value, rank, f"resumed at step {event.get('step')}")
            elif kind == EventKind.STRAGGLER.value and isinstance(rank, int):
                if event.get("active", True):
                    self.stragglers[rank] = event
                    self._note(Finding(EventKind.STRAGGLER.value, rank, _int(event.get("step")), straggler_text(event), True,
                                       _float(event.get("t"))))
                else:
                    self.stragglers.pop(rank, None)
                    self._close(EventKind.STRAGGLER.value, rank, f"no longer a straggler at step {event.get('step')}")
            elif kind == EventKind.DIVERGENCE.value:
                self.divergences.append(event)
                ranks = tuple(r for r in event.get("ranks") or [] if isinstance(r, int))
                self._note(Finding(EventKind.DIVERGENCE.value, _int(rank), _int(event.get("step")), divergence_text(event), True,
                                   _float(event.get("t")), ranks))
            elif kind == EventKind.STACKS.value and is_capture(event):
                self.capture = event
                self.captures += 1
                layout = self._laid_out(event)
                self._note(Finding(EventKind.STACKS.value, None, None, f"stacks ({layout.reason}): {layout.verdict}", False,
                                   _float(event.get("t"))))
                self.stacks_received.emit(event)
            elif kind == EventKind.FLIGHT_RECORDER.value:  # the ranks' collectives compared after a capture
                culprits = tuple(r for r in event.get("culprits") or [] if isinstance(r, int))
                self._note(Finding(EventKind.FLIGHT_RECORDER.value, culprits[0] if len(culprits) == 1 else None, None,
                                   f"collectives (Flight Recorder): {event.get('message')}", bool(culprits),
                                   _float(event.get("t")), culprits))
            elif kind == EventKind.LAUNCH_MISMATCH.value and isinstance(event.get("key"), str):
                self.launch_mismatches[event["key"]] = event
                self._note(Finding(EventKind.LAUNCH_MISMATCH.value, _int(rank), None,
                                   str(event.get("title") or event.get("cause") or event.get("message") or ""),
                                   event.get("level") != "info", _float(event.get("t"))))
            elif kind == EventKind.NODE_LOST.value:
                node_rank = _int(event.get("node_rank"))
                self.lost_nodes[node_rank if node_rank is not None else -1] = event
                self._note(Finding(EventKind.NODE_LOST.value, None, None, str(event.get("message") or "a node was lost"), True,
                                   _float(event.get("t"))))
            elif kind in (EventKind.RANK_FAILED.value, EventKind.EXCEPTION.value) and isinstance(rank, int):
                if kind == EventKind.RANK_FAILED.value or event.get("fatal", True):
                    self.early_failures.append(event)
            elif kind == EventKind.CONNECTION_LOST.value and isinstance(rank, int):
                if not self._stopping:  # ranks stopped on request drop their connections too
                    self.early_failures.append(event)
            elif kind == EventKind.STOPPING.value:
                self._stopping = True
            elif kind == EventKind.BOTTLENECK.value:
                self.live_bottleneck = event
            elif kind == EventKind.RUN_FINISHED.value and isinstance(event.get("summary"), dict):
                self._finished_summary = event["summary"]
            else:
                continue
            changed = True
        return changed

    def _note(self, finding: Finding) -> None:
        self.findings_seen.append(finding)
        del self.findings_seen[:-500]

    def _close(self, kind: str, rank: int, how: str) -> None:
        close_finding(self.findings_seen, kind, rank, f"; {how}")

    # ---- what the views read ----------------------------------------------------------

    @property
    def summary(self) -> dict[str, Any] | None:
        summary = None if self.monitor.run is None else self.monitor.run.summary
        if summary is not None:
            return summary
        return self._finished_summary

    @property
    def run_summary(self) -> RunSummary | None:
        """The summary decoded once (the runner's ``RunSummary``), while the run's row holds it."""
        summary = self.summary
        if summary is None:
            return None
        if self._decoded is None or self._decoded[0] is not summary:
            self._decoded = (summary, RunSummary.from_wire(summary))
        return self._decoded[1]

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
    def diagnostics(self) -> dict[str, Any]:
        found = (self.summary or {}).get("diagnostics")
        return found if isinstance(found, dict) else {}

    @property
    def bottleneck(self) -> Bottleneck | None:
        """The run's bottleneck verdict: over the whole run once the summary has it, else the
        live one (the latest ``bottleneck`` event); None before either."""
        final = self.diagnostics.get("bottleneck")
        if isinstance(final, dict):
            return Bottleneck.from_record(final, whole_run=True)
        event = self.live_bottleneck
        if event is None:
            return None
        return Bottleneck.from_record(event, whole_run=False, rank=_int(event.get("rank")),
                                      ended=self.monitor.finished)

    def stacks_layout(self) -> StacksLayout | None:
        """The latest stack capture laid out side by side."""
        return None if self.capture is None else self._laid_out(self.capture)

    def _laid_out(self, capture: dict[str, Any]) -> StacksLayout:
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
        for stall in diagnostics.get("stalls") or []:  # how the run's end closed a stall the events left open
            if stall.get("finished_after") is not None:
                close_finding(found, EventKind.STALLED.value, _int(stall.get("rank")), stall_outcome(stall))
        if EventKind.STALLED.value not in kinds:
            for stall in diagnostics.get("stalls") or []:
                after = stall.get("resumed_after")
                where = f"at step {stall.get('step')}" if stall.get("step") is not None else "before its first step"
                hung = after is None and stall.get("finished_after") is None
                found.append(Finding(EventKind.STALLED.value, _int(stall.get("rank")), _int(stall.get("step")),
                                     f"rank {stall.get('rank')} stalled {where} (no progress for "
                                     f"{_float(stall.get('seconds')) or 0:.0f} s){stall_outcome(stall)}", hung,
                                     _float(stall.get("since"))))
        if EventKind.STRAGGLER.value not in kinds:
            for straggler in diagnostics.get("stragglers") or []:
                found.append(Finding(EventKind.STRAGGLER.value, _int(straggler.get("rank")), _int(straggler.get("step")),
                                     straggler_text(straggler, past=True), False))
        if EventKind.DIVERGENCE.value not in kinds:
            for divergence in diagnostics.get("divergences") or []:
                found.append(Finding(EventKind.DIVERGENCE.value, _int((divergence.get("ranks") or [None])[0]),
                                     _int(divergence.get("step")), divergence_text(divergence), False,
                                     ranks=tuple(divergence.get("ranks") or ())))
        if EventKind.STACKS.value not in kinds and isinstance(diagnostics.get("stacks"), dict):
            stacks = diagnostics["stacks"]
            verdict = stacks.get("verdict") if isinstance(stacks.get("verdict"), dict) else {}
            text = f"stacks ({stacks.get('reason')}): {verdict.get('message') or 'captured'}"
            found.append(Finding(EventKind.STACKS.value, None, None, text, False, _float(stacks.get("t"))))
        flight = diagnostics.get("flight_recorder")
        if EventKind.FLIGHT_RECORDER.value not in kinds and isinstance(flight, dict) and flight.get("message"):
            culprits = tuple(r for r in flight.get("culprits") or [] if isinstance(r, int))
            found.append(Finding(EventKind.FLIGHT_RECORDER.value, culprits[0] if len(culprits) == 1 else None, None,
                                 f"collectives (Flight Recorder): {flight['message']}", False, ranks=culprits))
        if EventKind.LAUNCH_MISMATCH.value not in kinds:
            for record in diagnostics.get("launcher") or []:
                if isinstance(record, dict):
                    found.append(Finding(EventKind.LAUNCH_MISMATCH.value, None, None, str(record.get("title") or record.get("cause")),
                                         record.get("level") != "info",
                                         ranks=tuple(r for r in record.get("ranks") or [] if isinstance(r, int))))
        return found

    def rank_notes(self, now: float | None = None) -> dict[int, str]:
        """Short notes for the rank table: who failed first, who stalls, straggles or diverged."""
        now = time.time() if now is None else now
        notes: dict[int, list[str]] = {}
        first = self.first_failure
        if first is not None and first.rank is not None:
            notes.setdefault(first.rank, []).append(f"failed first: {failure_end_words(first)}")
        live = not self.monitor.finished
        if live:
            for rank, event in self.stalls.items():
                step = event.get("step")
                where = f" at step {step}" if step is not None else ""
                notes.setdefault(rank, []).append(f"stalled{where} for {format_age(_stall_seconds(event, now))}")
        for rank, event in self.stragglers.items():
            notes.setdefault(rank, []).append(straggler_note(event))
        for event in self.divergences:
            for rank in event.get("ranks") or []:
                if isinstance(rank, int):
                    notes.setdefault(rank, []).append(f"diverged at step {event.get('step')}")
        capture = self.stacks_layout()
        if capture is not None and capture.level != STACKS_INFO:
            for column in capture.culprit_columns:
                frame = column.marked_frame
                for rank in column.ranks:
                    notes.setdefault(rank, []).append("culprit: " + (f"stuck at {frame.location}" if frame else
                                                                     column.what))
        return {rank: "; ".join(dict.fromkeys(texts)) for rank, texts in notes.items()}

    def rank_lines(self) -> list[RankLine]:
        """Every rank's fate: the first failure, the others triage names, and what the rank rows say."""
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
                how = failure_end_words(fate)
                detail = fate.exception_line or ""
            else:
                exit_code = None if row is None else row.exit_code
                how = ended_by(exit_code) if exit_code is not None else ""
                detail = ""
            is_first = first is not None and first.rank == rank
            lines.append(RankLine(rank, host, state, ("failed first: " if is_first else "") + how, detail, is_first))
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
        for event in self.launch_mismatches.values():
            if event.get("level") != "info":
                candidates.append(Banner(WARNING, f"{event.get('title') or event.get('cause')} (see Diagnosis)",
                                         EventKind.LAUNCH_MISMATCH.value, _int(event.get("rank"))))
        if self.early_failures and not candidates:
            event = min(self.early_failures, key=lambda e: _float(e.get("t")) or 0.0)
            candidates.append(Banner(ERROR, f"{_early_failure_text(event)}; waiting for the runner's diagnosis…",
                                     "failure", _int(event.get("rank"))))
        # the straggler that holds the others up most first (as the bottleneck verdict names it)
        for rank, event in sorted(self.stragglers.items(), key=lambda item: (-(_float(item[1].get("excess")) or 0.0),
                                                                            item[0])):
            candidates.append(Banner(WARNING, straggler_text(event), EventKind.STRAGGLER.value, rank))
        for event in self.divergences[-1:]:
            candidates.append(Banner(WARNING, divergence_text(event), EventKind.DIVERGENCE.value, _int(event.get("rank"))))
        bottleneck = self.bottleneck
        if (bottleneck is not None and bottleneck.problem
                and not (bottleneck.verdict == STRAGGLER_VERDICT and self.stragglers)):
            candidates.append(Banner(INFO, bottleneck.text, EventKind.BOTTLENECK.value, bottleneck.rank))
        if not candidates:
            return None
        top = candidates[0]
        return Banner(top.level, top.text, top.kind, top.rank, more=len(candidates) - 1)

    def _lost_nodes_text(self) -> str:
        texts = [str(event.get("message") or f"node {node} was lost") for node, event in sorted(self.lost_nodes.items())]
        return "; ".join(texts)
