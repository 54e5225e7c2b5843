"""Every rank's stack side by side: the layout of one ``stacks`` capture, Qt-free.

A capture is the ``stacks`` event (``runner.diagnosis.stacks.analyse``): groups of
ranks with identical main-thread stacks, largest first, frames oldest call first;
the group that differs from the majority carries ``differs_at`` (its first frame
that is not in the reference stack). :func:`layout_capture` turns it into what the
Stacks view draws: one :class:`StackColumn` per group, titled with its ranks, rows
aligned by call depth (identical stacks share their top frames, so row ``i`` of
every column is the same depth), the differing group and its first differing
frame marked, and the ranks that gave no stack with the reason.

Raises nothing: a capture without groups (no rank answered, or an older runner
that sent one event per rank) lays out as no columns and says so.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, replace
from typing import Any


@dataclass(frozen=True)
class StackFrame:
    file: str
    line: int | None
    function: str
    differs: bool = False
    """At or below the group's first differing frame (only in a differing group)."""
    first_difference: bool = False
    """The group's first frame that is not in the reference stack: where to look."""

    @property
    def location(self) -> str:
        """``train.py:36`` (the file's base name)."""
        return f"{os.path.basename(self.file) or self.file}:{'?' if self.line is None else self.line}"

    @property
    def full_location(self) -> str:
        """``/abs/train.py:36``."""
        return f"{self.file}:{'?' if self.line is None else self.line}"

    @property
    def text(self) -> str:
        return f"{self.location} in {self.function}"


@dataclass(frozen=True)
class StackColumn:
    ranks: tuple[int, ...]
    frames: tuple[StackFrame, ...]
    """Oldest call first (the script's ``<module>`` at the top), like a traceback."""
    role: str
    """``majority`` (the reference group), ``differs`` (not the reference), ``same`` (all identical)
    or ``tie`` (no strict majority: every group differs from the largest other one)."""

    @property
    def differs(self) -> bool:
        return self.role in ("differs", "tie") and any(frame.first_difference for frame in self.frames)

    @property
    def title(self) -> str:
        """``ranks 1, 2  (majority)`` or ``rank 0  ← differs``."""
        suffix = {"majority": "  (majority)", "differs": "  ← differs", "same": "  (all ranks)",
                  "tie": "  ← differs" if self.differs else ""}[self.role]
        return ranks_text(self.ranks) + suffix

    @property
    def first_difference(self) -> StackFrame | None:
        return next((frame for frame in self.frames if frame.first_difference), None)


@dataclass(frozen=True)
class StacksLayout:
    columns: tuple[StackColumn, ...]
    missing: tuple[tuple[int, str], ...]
    """(rank, why) for ranks that were asked but gave no stack."""
    reason: str
    """``stalled`` (taken when a stall began) or ``requested`` (Dump stacks)."""
    t: float | None
    identical: bool
    verdict: str
    """One line: who differs and where, or that all stacks are the same."""

    @property
    def row_count(self) -> int:
        return max((len(column.frames) for column in self.columns), default=0)

    @property
    def outlier(self) -> StackColumn | None:
        """The one group that differs from the majority, when there is one."""
        differing = [column for column in self.columns if column.role == "differs"]
        return differing[0] if len(differing) == 1 else None

    @property
    def heading(self) -> str:
        """``3 ranks · main thread · oldest call first · taken 12:03:04 (stalled)``."""
        count = sum(len(column.ranks) for column in self.columns)
        when = "" if self.t is None else f" at {time.strftime('%H:%M:%S', time.localtime(self.t))}"
        why = {"stalled": "when ranks stalled", "requested": "on request"}.get(self.reason, self.reason or "")
        return f"{count} rank{'s' if count != 1 else ''} · main thread · oldest call first · taken{when} {why}".strip()


def ranks_text(ranks: tuple[int, ...] | list[int]) -> str:
    ranks = list(ranks)
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    return "ranks " + ", ".join(str(rank) for rank in ranks)


def is_capture(event: dict[str, Any]) -> bool:
    """A ``stacks`` event with the cross-rank analysis (not a per-rank "dump written" notice)."""
    return event.get("kind") == "stacks" and isinstance(event.get("groups"), list)


def _frame(data: dict[str, Any]) -> tuple[str, int | None, str]:
    line = data.get("line")
    return str(data.get("file") or "?"), (int(line) if isinstance(line, int) else None), str(data.get("function") or "?")


def layout_capture(capture: dict[str, Any]) -> StacksLayout:
    groups = [g for g in capture.get("groups") or [] if isinstance(g, dict)]
    identical = bool(capture.get("identical")) or len(groups) == 1
    reference = capture.get("reference")
    reference_ranks = tuple(reference) if isinstance(reference, list) else None
    columns = []
    for group in groups:
        ranks = tuple(int(r) for r in group.get("ranks") or [])
        differs_at = group.get("differs_at") if isinstance(group.get("differs_at"), dict) else None
        first_index = differs_at.get("index") if differs_at else None
        if identical:
            role = "same"
        elif reference_ranks is None:
            role = "tie"
        elif ranks == reference_ranks:
            role = "majority"
        else:
            role = "differs"
        frames = []
        for index, data in enumerate(group.get("frames") or []):
            file, line, function = _frame(data)
            differs = first_index is not None and index >= first_index
            frames.append(StackFrame(file, line, function, differs=differs,
                                     first_difference=first_index is not None and index == first_index))
        columns.append(StackColumn(ranks=ranks, frames=tuple(frames), role=role))
    missing = tuple((int(m.get("rank")), str(m.get("why") or "no stack"))
                    for m in capture.get("missing") or [] if isinstance(m, dict) and m.get("rank") is not None)
    layout = StacksLayout(columns=tuple(columns), missing=missing, reason=str(capture.get("reason") or ""),
                          t=capture.get("t"), identical=identical and bool(columns), verdict="")
    return replace(layout, verdict=_verdict(layout))


def _verdict(layout: StacksLayout) -> str:
    if not layout.columns:
        return "No rank's stack could be read."
    if layout.identical:
        count = len(layout.columns[0].ranks)
        innermost = layout.columns[0].frames[-1].text if layout.columns[0].frames else "?"
        return f"All {count} ranks are at the same place: {innermost}."
    outlier = layout.outlier
    if outlier is not None and outlier.first_difference is not None:
        frame = outlier.first_difference
        verb = "differs" if len(outlier.ranks) == 1 else "differ"
        return (f"{ranks_text(outlier.ranks)} {verb} at {frame.full_location} in {frame.function}; "
                "the other ranks are elsewhere.")
    parts = []
    for column in layout.columns:
        frame = column.first_difference or (column.frames[-1] if column.frames else None)
        parts.append(f"{ranks_text(column.ranks)} at {frame.text if frame else '?'}")
    return "The ranks disagree with no majority: " + "; ".join(parts) + "."
