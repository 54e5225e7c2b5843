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

Raises nothing: a capture from an earlier Rankwatch (no verdict) is judged again
from its frames (``ensure_verdict``); one without groups lays out as no columns.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

from gui.gateway.runner_rules import ensure_verdict, plural, ranks_text

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
            return ranks_text(self.ranks) + "  ← culprit"
        if self.role == PROGRESSING:
            return ranks_text(self.ranks) + " · progressing"
        what = self.what if len(self.ranks) == 1 else plural(self.what)
        return ranks_text(self.ranks) + (f" · {what}" if what else "")

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


def is_capture(event: dict[str, Any]) -> bool:
    """A ``stacks`` event with the cross-rank analysis (not a per-rank "dump written" notice)."""
    return event.get("kind") == "stacks" and isinstance(event.get("groups"), list)


def _frame(data: dict[str, Any], marked: bool) -> StackFrame:
    line = data.get("line")
    code = data.get("code")
    return StackFrame(str(data.get("file") or "?"), int(line) if isinstance(line, int) else None,
                      str(data.get("function") or "?"), code if isinstance(code, str) else None, marked)


def layout_capture(capture: dict[str, Any]) -> StacksLayout:
    capture = ensure_verdict(capture)
    groups = [g for g in capture.get("groups") or [] if isinstance(g, dict)]
    columns = []
    for group in groups:
        mark = group.get("mark") if isinstance(group.get("mark"), int) else None
        frames = tuple(_frame(data, index == mark) for index, data in enumerate(group.get("frames") or [])
                       if isinstance(data, dict))
        columns.append(StackColumn(ranks=tuple(int(r) for r in group.get("ranks") or [] if isinstance(r, int)),
                                   frames=frames, role=str(group.get("role") or STUCK),
                                   what=str(group.get("what") or "")))
    missing = tuple((int(m["rank"]), str(m.get("why") or "no stack"))
                    for m in capture.get("missing") or [] if isinstance(m, dict) and isinstance(m.get("rank"), int))
    found_verdict = capture.get("verdict")
    verdict: dict[str, Any] = found_verdict if isinstance(found_verdict, dict) else {}
    message = str(verdict.get("message") or ("No rank's stack could be read." if not columns else ""))
    return StacksLayout(
        columns=tuple(columns), missing=missing, reason=str(capture.get("reason") or ""), t=capture.get("t"),
        identical=bool(capture.get("identical")) and bool(columns),
        verdict=message,
        level=str(verdict.get("level") or INFO),
        details=tuple(str(detail) for detail in verdict.get("details") or []),
        culprits=tuple(int(r) for r in verdict.get("culprits") or [] if isinstance(r, int)))
