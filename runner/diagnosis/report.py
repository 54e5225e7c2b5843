"""Lines for the end-of-run summary: what the monitors found (``RunSummary.diagnostics``, read back
typed by ``StoredDiagnostics``, whatever version stored it).

``runner.view.terminal.render_summary`` prints these under the failure block, so
``rankwatch run``, ``attach`` and ``runs show`` all say the same thing.
"""

from __future__ import annotations

from rankwatch.protocol import Bottleneck
from runner.diagnosis.bottleneck_record import BottleneckRecord
from runner.diagnosis.findings import StacksFinding, StallFinding, StoredDiagnostics
from runner.diagnosis.stacks import SourceFrame
from runner.diagnosis.straggler_record import StragglerCause, StragglerRecord
from runner.format import ranks_text
from runner.rank_failure import stall_end_words

LABEL_WIDTH = 15


def _label(name: str) -> str:
    return f"  {(name + ':').ljust(LABEL_WIDTH)}"


def _frame(frame: SourceFrame | None) -> str:
    if frame is None:
        return "?"
    return f"{frame.file}:{'?' if frame.line is None else frame.line} in {frame.function}"


def format_diagnostics(diagnostics: StoredDiagnostics | None, run_id: int | None = None) -> list[str]:
    """The summary lines for stalls, stacks, stragglers and parameter checks (may be empty)."""
    if diagnostics is None:
        return []
    lines = []
    for stalls in _stall_groups(diagnostics.stalls):
        stall = stalls[0]
        where = f"at step {stall.step}" if stall.step is not None else "before the first step"
        tail = stall_end_words(stall.resumed_after, stall.finished_after)
        seconds = min(s.seconds for s in stalls)
        lines.append(f"{_label('stalled')}{ranks_text(sorted(s.rank for s in stalls))} {where} (no progress for "
                     f"{seconds:.0f} s, threshold {stall.threshold:.0f} s{tail})")
    if diagnostics.stacks is not None:
        lines += _stacks_lines(diagnostics.stacks, run_id)
    flight = diagnostics.flight_recorder
    if flight is not None and flight.message:
        lines.append(f"{_label('collectives')}{flight.message} (Flight Recorder)")
    for straggler in diagnostics.stragglers:
        lines.append(f"{_label('straggler')}{straggler.message or _straggler_text(straggler)}")
    if diagnostics.bottleneck is not None:
        lines += bottleneck_lines(diagnostics.bottleneck)
    for divergence in diagnostics.divergences:
        lines.append(f"{_label('divergence')}{divergence.message}")
    if diagnostics.consistency_checks and not diagnostics.divergences:
        lines.append(f"{_label('parameters')}identical on every rank at all {diagnostics.consistency_checks} checks")
    return lines


def _stall_groups(stalls: tuple[StallFinding, ...]) -> list[list[StallFinding]]:
    """Stalls of several ranks at the same step that never resumed are one hang: one line."""
    groups: list[list[StallFinding]] = []
    for stall in stalls:
        for group in groups:
            head = group[0]
            if (head.step, head.threshold) == (stall.step, stall.threshold) \
                    and head.resumed_after is None and stall.resumed_after is None \
                    and (head.finished_after is None) == (stall.finished_after is None):
                group.append(stall)
                break
        else:
            groups.append([stall])
    return groups


MAX_STACK_DETAILS = 4
CAPTURE_REASONS = {"stalled": "taken when ranks stalled", "requested": "taken on request"}


def _stacks_lines(stacks: StacksFinding, run_id: int | None) -> list[str]:
    """The verdict of the last capture, where the culprit is (file:line and the line's text), where to see all."""
    texts = []
    if stacks.verdict.message:
        texts.append(f"{stacks.verdict.message} ({CAPTURE_REASONS.get(stacks.reason, f'reason: {stacks.reason}')})")
        texts += stacks.verdict.details[:MAX_STACK_DETAILS]
    else:  # a summary written by an earlier version: no verdict
        outlier = stacks.outlier
        texts.append(f"{ranks_text(outlier.ranks)} differs at {_frame(outlier.frame)}"
                     if outlier is not None and outlier.ranks else f"captured ({stacks.reason})")
    for item in stacks.missing:
        texts.append(f"rank {item.rank}: no stack ({item.why})")
    if stacks.path:
        again = f"; again: rankwatch stacks {run_id}" if run_id is not None else ""
        texts.append(f"(every thread: {stacks.path}{again})")
    indent = " " * (LABEL_WIDTH + 2)
    return [(_label("stacks") if index == 0 else indent) + text for index, text in enumerate(texts)]


def bottleneck_lines(bottleneck: BottleneckRecord) -> list[str]:
    """``bottleneck: input-bound: waiting for data 62 % of the GPU's time`` and what to do about it.
    A straggler is already said on its own line: then only what to do."""
    verdict = bottleneck.verdict
    indent = " " * (LABEL_WIDTH + 2)
    if verdict.kind is None:  # the evidence says why, its first words "not measured" or "not determined"
        return [f"{_label('bottleneck')}{verdict.evidence}"]
    lines = []
    if verdict.kind is not Bottleneck.STRAGGLER:
        lines.append(f"{_label('bottleneck')}{verdict.kind.value}: {verdict.evidence}")
    else:
        lines.append(f"{_label('bottleneck')}a straggler: rank {verdict.rank}"
                     + (f" ({verdict.phase})" if verdict.phase else ""))
    if verdict.action:
        lines.append(f"{indent}→ {verdict.action}")
    return lines


def _straggler_text(straggler: StragglerRecord) -> str:
    cause = "waits for data" if straggler.cause == StragglerCause.DATA else "computes longer"
    return f"rank {straggler.rank} {cause}"
