"""Where is every rank, and who holds up the others? One stack capture, analysed and put in words.

The standard way to find the rank that holds up a hung job is to dump every rank's
stack and look for the one that is not where the others are (py-spy on every
process, allenai/OLMo#709). Rankwatch gets the dumps without ptrace (each worker
registers faulthandler on ``STACK_SIGNAL``, ``rankwatch._stacks``;
``runner.diagnosis.stack_capture`` sends the signal and parses the text with
``stack_dumps``). This module is the pure part: main-thread frames in, analysis
out. Where each rank is comes from ``stack_places``; who holds up whom from
``hang_verdict``.

The analysis (``analyse``) is a ``StackAnalysis``; its JSON (``to_json``) is what the
``stacks`` event carries, what ``run_dir/stacks/capture-N.json`` holds and what
the CLI and the GUI render::

    {
      "reason": "stalled" | "requested",   # why the capture was taken
      "t": 1763770000.0,                     # when the signal was sent
      "ranks": [0, 1],                       # ranks whose main-thread stack was read
      "missing": [{"rank": 3, "why": "no dump within 2 s"}],  # asked but not read
      "progress": [{"rank": 0, "step": 7, "idle_seconds": 6.1, "stalled": true,
                    "progressing": false}],  # progressing: null when unknown (no step yet)
      "places": [{"rank": 0, "kind": "collective", "op": "barrier", "what": "waits in barrier",
                  "frame": {"file", "line", "function", "code"} | null,   # deepest user frame
                  "chain": ["<module>", "main"], "innermost": {...}}],
      "verdict": {...},                      # hang_verdict.judge: kind, level, message, culprits, ...
      "groups": [                            # identical main-thread stacks with the same role
        {"ranks": [1],
         "frames": [{"file": "/abs/train.py", "line": 40, "function": "<module>", "code": "..."}, ...],
                                             # oldest call first, like a traceback
         "role": "culprit" | "waiting" | "progressing" | "stuck",
         "what": "is in its own code",       # the place, in words
         "mark": 1}                          # index of the deepest user frame (null: none)
      ],
      "identical": false                     # every read rank has the same stack
    }

Captures stored by earlier versions (``reference``/``outlier``, no ``verdict``) are
re-analysed from their frames by ``ensure_verdict``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from rankwatch.protocol import as_float
from runner.diagnosis.hang_verdict import HangVerdict, judge
from runner.diagnosis.progress import RankProgress
from runner.diagnosis.stack_dumps import Frame
from runner.diagnosis.stack_places import Place, place_of, plural, source_line
from runner.format import ranks_text
from runner.runstate.messages import JsonObject

CULPRIT, WAITING, PROGRESSING, STUCK = "culprit", "waiting", "progressing", "stuck"

StackCaptureJson = JsonObject
"""A capture as its ``stacks`` event or ``capture-N.json`` holds it (``StackAnalysis.to_json``), possibly
stored by an earlier version: read leniently, with ``.get`` (or typed: ``CaptureRecord.from_wire``)."""


def int_list(value: object) -> list[int]:
    """The integers of a JSON list (ranks); what is not one is left out."""
    return [item for item in value if type(item) is int] if isinstance(value, list) else []


@dataclass(frozen=True)
class MissingStack:
    """A rank asked for its stack that gave none, and why (``missing``)."""

    rank: int
    why: str

    def to_json(self) -> JsonObject:
        return {"rank": self.rank, "why": self.why}

    @classmethod
    def from_wire(cls, data: Mapping[str, object]) -> MissingStack | None:
        """None without a rank."""
        rank = data.get("rank")
        return cls(rank, str(data.get("why") or "no stack")) if type(rank) is int else None


@dataclass(frozen=True)
class SourceFrame:
    """A frame of a group's stack with its source line, as a capture keeps it (``groups[].frames``)."""

    file: str
    line: int | None
    function: str
    code: str | None = None
    """The source line, as read when the capture was taken (None: not readable)."""

    @classmethod
    def from_wire(cls, data: Mapping[str, object]) -> SourceFrame:
        line, code = data.get("line"), data.get("code")
        return cls(str(data.get("file") or "?"), line if type(line) is int else None,
                   str(data.get("function") or "?"), code if isinstance(code, str) else None)


@dataclass(frozen=True)
class StackGroup:
    """Ranks with the same main-thread stack and the same role (``groups``)."""

    ranks: list[int]
    role: str
    """``CULPRIT``, ``WAITING``, ``PROGRESSING`` or ``STUCK``."""
    what: str
    mark: int | None
    """The index in ``frames`` of the deepest frame of the user's own code."""
    frames: list[JsonObject]
    """``Frame.to_json`` with its source line (``code``), oldest call first."""

    def to_json(self) -> JsonObject:
        return {"ranks": self.ranks, "role": self.role, "what": self.what, "mark": self.mark, "frames": self.frames}

    @classmethod
    def from_wire(cls, data: Mapping[str, object]) -> StackGroup:
        """A group as a capture keeps it; one of an earlier version without a role is ``stuck``."""
        mark, frames = data.get("mark"), data.get("frames")
        return cls(ranks=int_list(data.get("ranks")), role=str(data.get("role") or STUCK),
                   what=str(data.get("what") or ""), mark=mark if type(mark) is int else None,
                   frames=[dict(frame) for frame in frames if isinstance(frame, Mapping)]
                   if isinstance(frames, list) else [])

    def source_frames(self) -> list[SourceFrame]:
        """``frames``, typed, oldest call first."""
        return [SourceFrame.from_wire(frame) for frame in self.frames]


@dataclass(frozen=True)
class CaptureFiles:
    """Where ``StackCapture`` wrote a capture; None: it could not."""

    path: str | None
    """``capture-N.json``."""
    text_path: str | None
    """``capture-N.txt``."""


@dataclass
class StackAnalysis:
    """``analyse``'s answer (module docstring); ``hosts`` and ``files`` are added by ``StackCapture``."""

    reason: str
    t: float
    ranks: list[int]
    missing: list[MissingStack]
    progress: dict[int, RankProgress]
    places: dict[int, Place]
    verdict: HangVerdict
    groups: list[StackGroup]
    identical: bool
    hosts: dict[str, str] | None = None
    """rank (as text) -> its host, for ranks on other nodes."""
    files: CaptureFiles | None = field(default=None)

    def to_json(self) -> StackCaptureJson:
        data: JsonObject = {
            "reason": self.reason,
            "t": self.t,
            "ranks": self.ranks,
            "missing": [item.to_json() for item in self.missing],
            "progress": [{"rank": rank, **self.progress[rank].to_json()} for rank in sorted(self.progress)],
            "places": [{"rank": rank, **self.places[rank].to_json()} for rank in sorted(self.places)],
            "verdict": self.verdict.to_json(),
            "groups": [group.to_json() for group in self.groups],
            "identical": self.identical,
        }
        if self.hosts is not None:
            data["hosts"] = self.hosts
        if self.files is not None:
            data["path"] = self.files.path
            data["text_path"] = self.files.text_path
        return data


@dataclass(frozen=True)
class CaptureRecord:
    """A capture read back from its ``stacks`` event or its ``capture-N.json`` (``StackAnalysis.to_json``;
    what the GUI's stacks view lays out). One stored by an earlier version is judged again first
    (``ensure_verdict``); ``verdict`` is None only for one without frames to judge."""

    reason: str
    t: float | None
    ranks: list[int]
    missing: list[MissingStack]
    verdict: HangVerdict | None
    groups: list[StackGroup]
    identical: bool
    path: str | None = None
    text_path: str | None = None

    @classmethod
    def from_wire(cls, data: Mapping[str, object]) -> CaptureRecord:
        data = ensure_verdict(dict(data))
        verdict, groups, missing = data.get("verdict"), data.get("groups"), data.get("missing")
        read_missing = (MissingStack.from_wire(item) for item in missing if isinstance(item, Mapping)) \
            if isinstance(missing, list) else ()
        return cls(reason=str(data.get("reason") or ""), t=as_float(data.get("t")), ranks=int_list(data.get("ranks")),
                   missing=[item for item in read_missing if item is not None],
                   verdict=HangVerdict.from_wire(verdict) if isinstance(verdict, Mapping) else None,
                   groups=[StackGroup.from_wire(group) for group in groups if isinstance(group, Mapping)]
                   if isinstance(groups, list) else [],
                   identical=bool(data.get("identical")),
                   path=_text(data.get("path")), text_path=_text(data.get("text_path")))


def is_capture(fields: Mapping[str, object]) -> bool:
    """Whether a ``stacks`` event's fields are a cross-rank analysis (groups), not a per-rank "dump written"."""
    return isinstance(fields.get("groups"), list)


def _role(rank: int, verdict: HangVerdict) -> str:
    if rank in verdict.culprits:
        return CULPRIT
    if rank in verdict.progressing:
        return PROGRESSING
    if rank in verdict.waiting:
        return WAITING
    return STUCK


def analyse(stacks: dict[int, list[Frame]], reason: str, t: float, missing: Iterable[MissingStack] = (),
            progress: dict[int, RankProgress] | None = None) -> StackAnalysis:
    """Where each rank is, who holds up whom, and the ranks grouped by identical stacks.

    ``stacks``: rank -> main-thread frames (oldest first, launcher frames removed);
    ``progress``: rank -> how it moves, as the runner saw it.
    """
    missing = list(missing)
    places: dict[int, Place] = {rank: place_of(frames) for rank, frames in stacks.items()}
    verdict = judge(places, progress, [item.rank for item in missing])
    by_stack: dict[tuple[tuple[Frame, ...], str], list[int]] = {}
    for rank in sorted(stacks):
        by_stack.setdefault((tuple(stacks[rank]), _role(rank, verdict)), []).append(rank)
    order = {CULPRIT: 0, WAITING: 1, STUCK: 2, PROGRESSING: 3}
    groups = []
    for (frames, role), ranks in sorted(by_stack.items(), key=lambda item: (order[item[0][1]], -len(item[1]),
                                                                            item[1][0])):
        place = places[ranks[0]]
        mark = None
        if place.frame is not None:
            mark = max(index for index, frame in enumerate(frames) if frame == place.frame)
        groups.append(StackGroup(ranks=ranks, role=role, what=place.what, mark=mark,
                                 frames=[{**frame.to_json(), "code": source_line(frame.file, frame.line)}
                                         for frame in frames]))
    return StackAnalysis(reason=reason, t=t, ranks=sorted(stacks), missing=missing, progress=dict(progress or {}),
                         places=places, verdict=verdict, groups=groups,
                         identical=len({frames for frames, _role in by_stack}) == 1)


def ensure_verdict(capture: StackCaptureJson) -> StackCaptureJson:
    """A capture with a ``verdict``: one stored by an earlier version is re-analysed from its frames."""
    groups = capture.get("groups")
    if isinstance(capture.get("verdict"), dict) or not isinstance(groups, list):
        return capture
    stacks: dict[int, list[Frame]] = {}
    for group in _objects(groups):
        frames = [Frame(str(f.get("file") or "?"), _line(f.get("line")), str(f.get("function") or "?"))
                  for f in _objects(group.get("frames"))]
        for rank in _items(group.get("ranks")):
            if isinstance(rank, int):
                stacks[rank] = frames
    if not stacks:
        return capture
    stored_missing = capture.get("missing") or []
    read_missing = (MissingStack.from_wire(item) for item in _objects(stored_missing))
    missing = [item for item in read_missing if item is not None]
    redone = analyse(stacks, str(capture.get("reason") or ""), as_float(capture.get("t")) or 0.0, missing)
    return {**capture, **redone.to_json(), "missing": stored_missing, "t": capture.get("t")}


def describe(result: StackCaptureJson) -> str:
    """One line for an event message or a summary: the verdict."""
    verdict = ensure_verdict(result).get("verdict")
    said = verdict.get("message") if isinstance(verdict, Mapping) else None
    message = str(said) if said else "no rank's stack could be read"
    missing = _items(result.get("missing"))
    if missing and "no stack" not in message and "gave no stack" not in message:
        message += f" ({len(missing)} rank(s) without a stack)"
    return message


def _short(frame: Mapping[str, object]) -> str:
    line = frame.get("line")
    return f"{os.path.basename(str(frame.get('file') or '?'))}:{line if line is not None else '?'} in {frame.get('function')}"


def _items(value: object) -> list[object]:
    """A JSON array's items; none for anything else (a capture is read, never trusted)."""
    return list(value) if isinstance(value, (list, tuple)) else []


def _objects(value: object) -> list[Mapping[str, object]]:
    """The objects of a JSON array (other items skipped)."""
    return [item for item in _items(value) if isinstance(item, Mapping)]


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _line(value: object) -> int | None:
    return value if isinstance(value, int) else None


MARK = "<<"
COLUMN_MIN = 34
TITLES = {CULPRIT: "  <- culprit", PROGRESSING: "  (progressing)"}


def group_title(group: Mapping[str, object]) -> str:
    """``rank 1  <- culprit``, ``rank 0  (waits in barrier)``, ``ranks 2, 3  (progressing)``."""
    role, ranks = group.get("role"), group["ranks"]
    title = ranks_text(ranks)
    if role in TITLES:
        return title + TITLES[role]
    what = str(group.get("what") or "")
    if len(_items(ranks)) > 1 and what:
        what = plural(what)
    return f"{title}  ({what})" if what else title


def format_stacks(result: StackCaptureJson, width: int = 120) -> str:
    """The side-by-side view: one column per group of identical stacks, oldest call at the top.

    A culprit's deepest frame of its own code is marked ``<<``; the verdict and its
    details (file:line and the source line) follow the columns. Falls back to one
    group after another when the columns would not fit in ``width``.
    """
    result = ensure_verdict(result)
    groups = _objects(result.get("groups"))
    lines = [f"stacks of {len(_items(result.get('ranks')))} rank(s), main thread, oldest call first "
             f"(reason: {result.get('reason')})"]
    if groups:
        columns = []
        for group in groups:
            title = group_title(group)
            cells = [title, "-" * min(len(title), 30)]
            for index, frame in enumerate(_objects(group.get("frames"))):
                marker = f" {MARK}" if group.get("role") == CULPRIT and group.get("mark") == index else ""
                cells.append(_short(frame) + marker)
            if not group.get("frames"):
                cells.append("(no Python frame)")
            columns.append(cells)
        column_width = max(COLUMN_MIN, max(len(cell) for cells in columns for cell in cells) + 2)
        if column_width * len(columns) + 3 * (len(columns) - 1) <= width:
            height = max(len(cells) for cells in columns)
            for row in range(height):
                parts = [(cells[row] if row < len(cells) else "").ljust(column_width) for cells in columns]
                lines.append(" | ".join(parts).rstrip())
        else:
            for cells in columns:
                lines.append("")
                lines.extend([cells[0], *("  " + cell for cell in cells[2:])])
    verdict = result.get("verdict")
    lines.append("")
    lines.append(describe(result))
    for detail in _items(verdict.get("details") if isinstance(verdict, Mapping) else None):
        lines.append(f"  {detail}")
    for item in _objects(result.get("missing")):
        lines.append(f"  rank {item.get('rank')}: no stack ({item.get('why')})")
    return "\n".join(lines) + "\n"
