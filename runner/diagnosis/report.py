"""Lines for the end-of-run summary: what the monitors found (``summary["diagnostics"]``).

``runner.view.terminal.render_summary`` prints these under the failure block, so
``rankwatch run``, ``attach`` and ``runs show`` all say the same thing.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from rankwatch.protocol import Bottleneck
from runner.diagnosis.bottleneck_record import BottleneckRecord
from runner.diagnosis.straggler_record import StragglerCause, StragglerRecord
from runner.format import ranks_text
from runner.rank_failure import stall_outcome
from runner.runstate.messages import JsonObject

StoredRecord = JsonObject
"""A block of a stored summary's ``diagnostics`` (a stall, the stacks, a straggler, the bottleneck...), as
this version or an earlier one wrote it: every key is read with ``.get``, a missing one is said as such."""

LABEL_WIDTH = 15


def _label(name: str) -> str:
    return f"  {(name + ':').ljust(LABEL_WIDTH)}"


def _frame(frame: StoredRecord | None, full: bool = False) -> str:
    if not frame:
        return "?"
    path = frame.get("file") or "?"
    return f"{path if full else os.path.basename(path)}:{frame.get('line', '?')} in {frame.get('function')}"




def format_diagnostics(diagnostics: StoredRecord | None, run_id: int | None = None) -> list[str]:
    """The summary lines for stalls, stacks, stragglers and parameter checks (may be empty)."""
    if not diagnostics:
        return []
    lines = []
    for stalls in _stall_groups(diagnostics.get("stalls") or []):
        stall = stalls[0]
        where = f"at step {stall['step']}" if stall.get("step") is not None else "before the first step"
        tail = stall_outcome(stall)
        seconds = min(s["seconds"] for s in stalls)
        lines.append(f"{_label('stalled')}{ranks_text(sorted(s['rank'] for s in stalls))} {where} (no progress for "
                     f"{seconds:.0f} s, threshold {stall['threshold']:.0f} s{tail})")
    stacks = diagnostics.get("stacks")
    if stacks:
        lines += _stacks_lines(stacks, run_id)
    flight = diagnostics.get("flight_recorder")
    if flight and flight.get("message"):
        lines.append(f"{_label('collectives')}{flight['message']} (Flight Recorder)")
    for stored in diagnostics.get("stragglers") or []:
        if isinstance(stored, Mapping):
            straggler = StragglerRecord.from_wire(stored)
            lines.append(f"{_label('straggler')}{straggler.message or _straggler_text(straggler)}")
    bottleneck = diagnostics.get("bottleneck")
    if isinstance(bottleneck, Mapping) and bottleneck:
        lines += bottleneck_lines(BottleneckRecord.from_wire(bottleneck))
    for divergence in diagnostics.get("divergences") or []:
        lines.append(f"{_label('divergence')}{divergence.get('message')}")
    checks = diagnostics.get("consistency_checks")
    if checks and not diagnostics.get("divergences"):
        lines.append(f"{_label('parameters')}identical on every rank at all {checks} checks")
    return lines


def _stall_groups(stalls: list[StoredRecord]) -> list[list[StoredRecord]]:
    """Stalls of several ranks at the same step that never resumed are one hang: one line."""
    groups: list[list[StoredRecord]] = []
    for stall in stalls:
        for group in groups:
            head = group[0]
            if (head.get("step"), head.get("threshold")) == (stall.get("step"), stall.get("threshold")) \
                    and head.get("resumed_after") is None and stall.get("resumed_after") is None \
                    and (head.get("finished_after") is None) == (stall.get("finished_after") is None):
                group.append(stall)
                break
        else:
            groups.append([stall])
    return groups


MAX_STACK_DETAILS = 4


def _stacks_lines(stacks: StoredRecord, run_id: int | None) -> list[str]:
    """The verdict of the last capture, where the culprit is (file:line and the line's text), where to see all."""
    verdict = stacks.get("verdict")
    texts = []
    if isinstance(verdict, dict):
        when = {"stalled": "taken when ranks stalled", "requested": "taken on request"}.get(
            str(stacks.get("reason")), f"reason: {stacks.get('reason')}")
        texts.append(f"{verdict.get('message')} ({when})")
        texts += list(verdict.get("details") or [])[:MAX_STACK_DETAILS]
    else:  # a summary written by an earlier version
        outlier = stacks.get("outlier") or {}
        texts.append(f"{ranks_text(outlier['ranks'])} differs at {_frame(outlier.get('frame'), full=True)}"
                     if outlier.get("ranks") else f"captured ({stacks.get('reason')})")
    for item in stacks.get("missing") or []:
        texts.append(f"rank {item.get('rank')}: no stack ({item.get('why')})")
    if stacks.get("path"):
        again = f"; again: rankwatch stacks {run_id}" if run_id is not None else ""
        texts.append(f"(every thread: {stacks['path']}{again})")
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
