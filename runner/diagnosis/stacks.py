"""Where is every rank? Parse faulthandler dumps, group identical stacks, find the odd one.

The standard way to find the rank that holds up a hung job is to dump every rank's
stack and look for the one that differs (py-spy on every process, allenai/OLMo#709).
Rankwatch gets the dumps without ptrace: each worker registers faulthandler on
``STACK_SIGNAL`` (``rankwatch._stacks``) and ``runner.diagnosis.stack_capture``
sends the signal. This module is the pure part: text in, analysis out.

Only the *main* thread is compared: that is where the training loop runs (the
reporter, DataLoader pin-memory and NCCL watchdog threads look alike everywhere).
The bootstrap's own frames (runpy, ``rankwatch._bootstrap``) are dropped from the
bottom, so a stack starts at the user's script as a traceback would.

The analysis (``analyse``) is a JSON object; this exact shape is what the
``stacks`` event carries, what ``run_dir/stacks/capture-N.json`` holds and what
the GUI renders::

    {
      "reason": "stalled" | "requested",   # why the capture was taken
      "t": 1763770000.0,                     # when the signal was sent
      "ranks": [0, 1, 2],                    # ranks whose main-thread stack was read
      "missing": [{"rank": 3, "why": "no dump within 2 s"}],  # asked but not read
      "groups": [                            # identical main-thread stacks, largest group first
        {"ranks": [1, 2],
         "frames": [{"file": "/abs/train.py", "line": 40, "function": "<module>"}, ...],
                                             # oldest call first, like a traceback
         "differs_at": null},                # null for the reference group
        {"ranks": [0],
         "frames": [...],
         "differs_at": {"file": "/abs/train.py", "line": 36, "function": "<module>",
                        "index": 0}}         # this group's first frame that is not in the
      ],                                     # reference stack (index into its frames)
      "reference": [1, 2],                   # the majority group's ranks, or null (no
                                             # strict majority: a tie, or all different)
      "outlier": {"rank": 0, "ranks": [0],   # the one minority group, when there is one
                  "frame": {"file": ..., "line": 36, "function": "<module>", "index": 0}}
                 or null,
      "identical": false                     # every read rank has the same stack
    }

A group's ``differs_at`` is relative to the reference group; when there is no
reference (a tie), each group's is relative to the largest other group.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

THREAD_HEADER = re.compile(
    r"^(?P<current>Current thread|Thread) (?P<ident>0x[0-9a-fA-F]+)(?: \[(?P<name>[^\]]*)\])?"
    r" \(most recent call first\):\s*$"
)
SINGLE_HEADER = re.compile(r"^Stack \(most recent call first\):\s*$")
FRAME = re.compile(r'^\s+File "(?P<file>.*)", line (?P<line>\d+|\?\?\?) in (?P<function>.*?)\s*$')

BOOTSTRAP_FILES = ("rankwatch/_bootstrap.py", "rankwatch/_script.py")
"""Frames of the worker-side launcher, below the user's script."""
MAX_FRAMES = 80
"""faulthandler itself stops at 100 frames; the event keeps the innermost ones beyond this."""


@dataclass(frozen=True)
class Frame:
    file: str
    line: int | None
    function: str

    def to_json(self) -> dict[str, Any]:
        return {"file": self.file, "line": self.line, "function": self.function}

    def short(self) -> str:
        return f"{os.path.basename(self.file)}:{self.line if self.line is not None else '?'} in {self.function}"

    def long(self) -> str:
        return f"{self.file}:{self.line if self.line is not None else '?'} in {self.function}"


@dataclass
class ThreadStack:
    ident: str
    current: bool
    name: str | None = None
    frames: list[Frame] = field(default_factory=list)
    """Oldest call first (faulthandler prints the most recent first; we reverse)."""

    def to_json(self) -> dict[str, Any]:
        return {"ident": self.ident, "current": self.current, "name": self.name,
                "frames": [f.to_json() for f in self.frames]}


def parse_dump(text: str) -> list[ThreadStack]:
    """Every thread of one faulthandler dump (``all_threads=True`` or not), oldest frame first.

    Unknown lines (``<no Python frame>``, ``...`` for truncated stacks, C stack
    traces of newer Pythons) are skipped. An empty or foreign text gives ``[]``.
    """
    threads: list[ThreadStack] = []
    current: ThreadStack | None = None
    for line in text.splitlines():
        header = THREAD_HEADER.match(line)
        if header:
            current = ThreadStack(ident=header.group("ident"), current=header.group("current") == "Current thread",
                                  name=header.group("name"))
            threads.append(current)
            continue
        if SINGLE_HEADER.match(line):
            current = ThreadStack(ident="", current=True)
            threads.append(current)
            continue
        frame = FRAME.match(line)
        if frame and current is not None:
            number = frame.group("line")
            current.frames.append(Frame(frame.group("file"), int(number) if number.isdigit() else None,
                                        frame.group("function")))
        elif not line.strip():
            current = None  # a blank line ends a thread's block
    for thread in threads:
        thread.frames.reverse()
    return [t for t in threads if t.frames or t.current]


def last_dump(text: str) -> str:
    """The last complete dump in ``text`` (a rank's file may hold several appended dumps).

    A dump starts at the first thread header after a gap; faulthandler lists the
    current thread or the newest thread first, so a new dump starts at any header
    that follows a block of a thread already seen in the same dump.
    """
    starts = []
    seen: set[str] = set()
    lines = text.splitlines(keepends=True)
    offset = 0
    for line in lines:
        header = THREAD_HEADER.match(line.rstrip("\n")) or SINGLE_HEADER.match(line.rstrip("\n"))
        if header:
            ident = header.group("ident") if header.re is THREAD_HEADER else ""
            if not starts or ident in seen:
                starts.append(offset)
                seen = set()
            seen.add(ident)
        offset += len(line)
    return text[starts[-1]:] if starts else text


def is_main_thread(thread: ThreadStack) -> bool:
    """The thread that runs the script: its oldest frame is a module body, not ``threading``."""
    if not thread.frames:
        return False
    oldest = thread.frames[0]
    return oldest.function in ("<module>", "_run_module_as_main") and not oldest.file.endswith("threading.py")


def main_thread(threads: list[ThreadStack]) -> ThreadStack | None:
    """The main thread of a dump; faulthandler lists it last (newest threads come first)."""
    for thread in threads:
        if is_main_thread(thread):
            return thread
    return threads[-1] if threads else None


def _is_bootstrap(frame: Frame) -> bool:
    path = frame.file.replace(os.sep, "/")
    return (path == "<frozen runpy>" or path.endswith("/runpy.py")
            or any(path.endswith(name) for name in BOOTSTRAP_FILES))


def user_frames(frames: list[Frame]) -> list[Frame]:
    """``frames`` without the launcher's frames at the bottom (runpy, the bootstrap)."""
    start = 0
    while start < len(frames) and _is_bootstrap(frames[start]):
        start += 1
    kept = frames[start:] or frames
    return kept[-MAX_FRAMES:] if len(kept) > MAX_FRAMES else kept


def first_difference(frames: list[Frame], reference: list[Frame]) -> tuple[int, Frame] | None:
    """This stack's first frame (oldest first) that the reference does not share, with its index.

    When ``frames`` is a strict prefix of ``reference`` (it returned from a call the
    reference is still in), its innermost frame is where it differs.
    """
    for index, frame in enumerate(frames):
        if index >= len(reference) or frame != reference[index]:
            return index, frame
    if len(frames) < len(reference) and frames:
        return len(frames) - 1, frames[-1]
    return None


def _frame_json(found: tuple[int, Frame] | None) -> dict[str, Any] | None:
    if found is None:
        return None
    index, frame = found
    return {**frame.to_json(), "index": index}


def analyse(stacks: dict[int, list[Frame]], reason: str, t: float,
            missing: Iterable[dict[str, Any]] = ()) -> dict[str, Any]:
    """Group ranks by identical main-thread stacks and name the rank(s) that differ.

    ``stacks``: rank -> main-thread frames (oldest first, launcher frames removed).
    Returns the JSON object described in the module docstring.
    """
    by_stack: dict[tuple[Frame, ...], list[int]] = {}
    for rank in sorted(stacks):
        by_stack.setdefault(tuple(stacks[rank]), []).append(rank)
    ordered = sorted(by_stack.items(), key=lambda item: (-len(item[1]), item[1][0]))
    reference_index = 0 if ordered and (len(ordered) == 1 or len(ordered[0][1]) > len(ordered[1][1])) else None
    groups = []
    for index, (frames, ranks) in enumerate(ordered):
        if index == reference_index:
            differs = None
        else:
            other = ordered[reference_index if reference_index is not None else (1 if index == 0 else 0)][0]
            differs = _frame_json(first_difference(list(frames), list(other)))
        groups.append({"ranks": ranks, "frames": [f.to_json() for f in frames], "differs_at": differs})
    outlier = None
    if reference_index is not None and len(groups) > 1:
        minority = groups[1:]
        sizes = sorted(len(g["ranks"]) for g in minority)
        if len(minority) == 1 or sizes[0] < sizes[1]:
            chosen = min(minority, key=lambda g: (len(g["ranks"]), g["ranks"][0]))
            outlier = {"rank": chosen["ranks"][0], "ranks": chosen["ranks"], "frame": chosen["differs_at"]}
    return {
        "reason": reason,
        "t": t,
        "ranks": sorted(stacks),
        "missing": list(missing),
        "groups": groups,
        "reference": groups[reference_index]["ranks"] if reference_index is not None and len(groups) > 1 else None,
        "outlier": outlier,
        "identical": len(groups) == 1,
    }


def describe(result: dict[str, Any]) -> str:
    """One line for an event message or a summary: who differs, and where."""
    ranks = result.get("ranks") or []
    if not ranks:
        return "no stacks could be read" + _missing_suffix(result)
    if result.get("identical"):
        return f"all {len(ranks)} ranks have the same stack" + _missing_suffix(result)
    outlier = result.get("outlier")
    if outlier and outlier.get("frame"):
        who = _ranks_text(outlier["ranks"])
        return (f"{who} differs at {_frame_text(outlier['frame'])}, the other ranks are elsewhere"
                + _missing_suffix(result))
    parts = []
    for group in result.get("groups") or []:
        where = group.get("differs_at") or (group.get("frames") or [None])[-1] or group.get("innermost")
        parts.append(f"{_ranks_text(group['ranks'])} at {_frame_text(where) if where else '?'}")
    return "ranks disagree with no majority: " + "; ".join(parts) + _missing_suffix(result)


def _missing_suffix(result: dict[str, Any]) -> str:
    missing = result.get("missing") or []
    return f" ({len(missing)} rank(s) without a stack)" if missing else ""


def _ranks_text(ranks: list[int]) -> str:
    return f"rank {ranks[0]}" if len(ranks) == 1 else "ranks " + ", ".join(str(r) for r in ranks)


def _frame_text(frame: dict[str, Any]) -> str:
    line = frame.get("line")
    return f"{frame.get('file')}:{line if line is not None else '?'} in {frame.get('function')}"


def _short(frame: dict[str, Any]) -> str:
    line = frame.get("line")
    return f"{os.path.basename(frame.get('file') or '?')}:{line if line is not None else '?'} in {frame.get('function')}"


MARK = "<<"
COLUMN_MIN = 34


def format_stacks(result: dict[str, Any], width: int = 120) -> str:
    """The side-by-side view: one column per group of identical stacks, oldest call at the top.

    The frame where a group first differs from the majority is marked ``<<`` and
    spelled out in full (file:line) under the columns. Falls back to one group
    after another when the columns would not fit in ``width``.
    """
    groups = result.get("groups") or []
    lines = [f"stacks of {len(result.get('ranks') or [])} rank(s), main thread, oldest call first "
             f"(reason: {result.get('reason')})"]
    if groups:
        columns = []
        for group in groups:
            differs = group.get("differs_at")
            title = _ranks_text(group["ranks"])
            if differs is not None:
                title += "  <- differs"
            elif len(groups) > 1 and result.get("reference"):
                title += "  (majority)"
            cells = [title, "-" * min(len(title), 30)]
            for index, frame in enumerate(group["frames"]):
                marker = f" {MARK}" if differs is not None and differs.get("index") == index else ""
                cells.append(_short(frame) + marker)
            if not group["frames"]:
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
    lines.append("")
    lines.append(describe(result))
    for group in groups:
        if group.get("differs_at"):
            lines.append(f"  {_ranks_text(group['ranks'])}: first different frame {_frame_text(group['differs_at'])}")
    for item in result.get("missing") or []:
        lines.append(f"  rank {item.get('rank')}: no stack ({item.get('why')})")
    return "\n".join(lines) + "\n"
