"""faulthandler's text, parsed: every thread's frames, the main thread, the last of several dumps.

Each worker registers faulthandler on ``STACK_SIGNAL`` (``rankwatch._stacks``) and
appends a dump of every thread to its rank's file when signalled. This module
turns that text into frames, oldest call first, as a traceback reads. Only the
*main* thread matters for where a rank is; the bootstrap's own frames (runpy,
``rankwatch._bootstrap``) are dropped from the bottom, so a stack starts at the
user's script.

Raises nothing: unknown lines are skipped, an empty or foreign text parses as no threads.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

from runner.runstate.messages import JsonObject

THREAD_HEADER = re.compile(
    r"^(?P<current>Current thread|Thread) (?P<ident>0x[0-9a-fA-F]+)(?: \[(?P<name>[^\]]*)\])?"
    r" \(most recent call first\):\s*$"
)
SINGLE_HEADER = re.compile(r"^Stack \(most recent call first\):\s*$")
FRAME = re.compile(r'^\s+File "(?P<file>.*)", line (?P<line>\d+|\?\?\?) in (?P<function>.*?)\s*$')

BOOTSTRAP_FILES = ("rankwatch/_bootstrap.py", "rankwatch/_script.py")
"""Frames of the worker-side launcher, below the user's script."""
WORKER_MODULES = frozenset(
    name for name in os.listdir(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                             "worker_path", "rankwatch"))
    if name.startswith("_") and not name.startswith("__") and name.endswith(".py"))
"""Rankwatch's worker-side modules (``rankwatch/_*.py``): their frames inside a stack are our
own wrappers (the timed collectives, backward, DataLoader), not the user's code; a stack
is shown as it would be without Rankwatch."""
MAX_FRAMES = 80
"""faulthandler itself stops at 100 frames; the event keeps the innermost ones beyond this."""


@dataclass(frozen=True)
class Frame:
    file: str
    line: int | None
    function: str

    def to_json(self) -> JsonObject:
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

    def to_json(self) -> JsonObject:
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
    starts: list[int] = []
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


def _is_rankwatch_wrapper(frame: Frame) -> bool:
    head, name = os.path.split(frame.file.replace(os.sep, "/"))
    return name in WORKER_MODULES and head.endswith("rankwatch")


def user_frames(frames: list[Frame]) -> list[Frame]:
    """``frames`` without the launcher's frames at the bottom (runpy, the bootstrap) and
    without Rankwatch's own wrappers in between (see ``WORKER_MODULES``)."""
    start = 0
    while start < len(frames) and _is_bootstrap(frames[start]):
        start += 1
    kept = [frame for frame in frames[start:] if not _is_rankwatch_wrapper(frame)] or frames[start:] or frames
    return kept[-MAX_FRAMES:] if len(kept) > MAX_FRAMES else kept
