"""Every rank's stack side by side, and who holds up the others: one ``stacks`` capture, Qt-free.

A capture is the ``stacks`` event (``runner.diagnosis.stacks.analyse``): groups of
ranks with identical main-thread stacks, frames oldest call first, each group with
its role in the verdict -- the *culprit* (stuck outside the collective the others
wait in), *waiting* (in that collective), *progressing* (never blamed) or *stuck*
(no collective involved) -- and the index of its deepest frame of the user's own
code. :func:`layout_capture` turns it into what the Stacks view draws: one
:class:`StackColumn` per group, the culprit's line marked, the verdict with its
level (``error`` only when a culprit or a mismatch is named: a snapshot of ranks
that progress is never red), its details (file:line and the source line) and the
ranks that gave no stack.

The capture is read through the runner's own type (``CaptureRecord``, from the
gateway), never by string key. Raises nothing: a capture from an earlier Rankwatch
(no verdict) is judged again from its frames (``ensure_verdict``); one without groups
lays out as no columns.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from dataclasses import dataclass

from gui.gateway.findings import CaptureRecord, SourceFrame
from gui.gateway.wording import RunWording

CULPRIT, WAITING, PROGRESSING, STUCK = "culprit", "waiting", "progressing", "stuck"
ERROR, WARNING, INFO = "error", "warning", "info"


@dataclass(frozen=True)
class StackFrame:
    file: str
    line: int | None
    function: str
    code: str | None = None
    """The source line, as read when the capture was taken (None: not readable)."""
    marked: bool = False
    """The group's deepest frame of the user's own code: where a culprit is stuck, where a waiter called in."""

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
    """``culprit``, ``waiting``, ``progressing`` or ``stuck`` (see the module docstring)."""
    what: str = ""
    """Where the group is, in words: ``waits in barrier``, ``is in its own code``."""

    @property
    def title(self) -> str:
        """``rank 1  ← culprit``, ``rank 0 · waits in barrier``, ``ranks 2, 3 · progressing``."""
        if self.role == CULPRIT:
            return RunWording.ranks(self.ranks) + "  ← culprit"
        if self.role == PROGRESSING:
            return RunWording.ranks(self.ranks) + " · progressing"
        what = self.what if len(self.ranks) == 1 else RunWording.for_several_ranks(self.what)
        return RunWording.ranks(self.ranks) + (f" · {what}" if what else "")

    @property
    def marked_frame(self) -> StackFrame | None:
        return next((frame for frame in self.frames if frame.marked), None)


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
    """One line: who holds up whom, or that the ranks progress (lower case: it also goes mid-sentence)."""
    level: str = INFO
    """``error`` (a culprit or mismatch named), ``warning`` (stuck, nobody to blame) or ``info``."""
    details: tuple[str, ...] = ()
    """Where each rank is: file:line, the functions that led there, the source line."""
    culprits: tuple[int, ...] = ()

    @property
    def row_count(self) -> int:
        return max((len(column.frames) for column in self.columns), default=0)

    @property
    def culprit_columns(self) -> tuple[StackColumn, ...]:
        return tuple(column for column in self.columns if column.role == CULPRIT)

    def column_of(self, rank: int) -> StackColumn | None:
        return next((column for column in self.columns if rank in column.ranks), None)

    @property
    def heading(self) -> str:
        """``3 ranks · main thread · oldest call first · taken 12:03:04 (stalled)``."""
        count = sum(len(column.ranks) for column in self.columns)
        when = "" if self.t is None else f" at {time.strftime('%H:%M:%S', time.localtime(self.t))}"
        why = {"stalled": "when ranks stalled", "requested": "on request"}.get(self.reason, self.reason or "")
        return f"{count} rank{'s' if count != 1 else ''} · main thread · oldest call first · taken{when} {why}".strip()


def _frame(source: SourceFrame, marked: bool) -> StackFrame:
    return StackFrame(source.file, source.line, source.function, source.code, marked)


def layout_capture(capture: CaptureRecord | Mapping[str, object]) -> StacksLayout:
    """The capture as the stacks view draws it; a capture's JSON is read as a ``CaptureRecord`` first."""
    if not isinstance(capture, CaptureRecord):
        capture = CaptureRecord.from_wire(capture)
    columns = []
    for group in capture.groups:
        frames = tuple(_frame(frame, index == group.mark) for index, frame in enumerate(group.source_frames()))
        columns.append(StackColumn(ranks=tuple(group.ranks), frames=frames, role=group.role, what=group.what))
    missing = tuple((item.rank, item.why) for item in capture.missing)
    verdict = capture.verdict
    message = (verdict.message if verdict is not None else "") or ("No rank's stack could be read." if not columns
                                                                    else "")
    return StacksLayout(
        columns=tuple(columns), missing=missing, reason=capture.reason, t=capture.t,
        identical=capture.identical and bool(columns),
        verdict=message,
        level=INFO if verdict is None else verdict.level.value,
        details=() if verdict is None else tuple(verdict.details),
        culprits=() if verdict is None else tuple(verdict.culprits))
