"""Open ``file:line`` in the person's editor: the one choice, made in one place.

The log view's traceback lines and the stacks view's frames are clickable; both ask this
module to open the place they name. Which program, in this order:

1. ``$VISUAL``, else ``$EDITOR`` (the shell's choice, arguments allowed: ``code -w``), with the
   line in the form that editor understands: ``+N FILE`` for vi/vim/emacs/nano-style editors,
   ``--goto FILE:N`` for VS Code and its forks, ``FILE:N`` for Sublime/Helix/Zed, ``--line N``
   for Kate, just ``FILE`` for an editor we do not know (it still opens the file). A
   terminal-only editor (vim, nano, ...) gets a terminal window (``$TERMINAL``,
   ``x-terminal-emulator`` or ``xterm``) when one is found, since the GUI has no terminal.
2. VS Code's ``code --goto FILE:N`` when ``code`` is on ``PATH``.
3. Nothing here: the caller hands the file to the system opener (``QDesktopServices``), which
   opens it but cannot go to the line.

:func:`editor_command` only builds the command (tested without starting anything);
:func:`open_location` runs it.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

PLUS_LINE_EDITORS = frozenset({"vi", "vim", "nvim", "gvim", "mvim", "view", "ex", "emacs", "emacsclient", "nano",
                               "pico", "micro", "kak", "joe", "jed", "mg", "ne", "gedit", "mousepad", "pluma", "xed"})
"""Editors that read ``+N FILE`` as "open FILE at line N"."""
GOTO_EDITORS = frozenset({"code", "code-insiders", "codium", "vscodium", "cursor", "windsurf"})
"""VS Code and its forks: ``--goto FILE:N``."""
COLON_EDITORS = frozenset({"subl", "sublime_text", "hx", "helix", "zed", "atom", "lapce"})
"""Editors that read ``FILE:N``."""
LINE_FLAG_EDITORS = frozenset({"kate", "kwrite"})
"""KDE's editors: ``--line N FILE``."""
TERMINAL_EDITORS = frozenset({"vi", "vim", "nvim", "view", "ex", "nano", "pico", "micro", "kak", "joe", "jed",
                              "mg", "ne", "hx", "helix"})
"""Editors that need a terminal: started from the GUI they get a terminal window."""
FALLBACK_TERMINALS = ("x-terminal-emulator", "xterm")

TRACEBACK_LOCATION = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+)')
"""Python's traceback line: ``  File "/work/train.py", line 36, in main``."""

Which = Callable[[str], "str | None"]


@dataclass(frozen=True)
class SourceLocation:
    """A place in a source file; ``line`` is 1-based, ``None`` when not known."""

    file: str
    line: int | None = None


@dataclass(frozen=True)
class LocationSpan:
    """Where in a line of text a location is written (``start``/``end``: character offsets)."""

    location: SourceLocation
    start: int
    end: int


def traceback_locations(text: str) -> list[LocationSpan]:
    """Every ``File "x.py", line N`` in ``text``, with where it is written."""
    return [LocationSpan(SourceLocation(found["file"], int(found["line"])), found.start(), found.end())
            for found in TRACEBACK_LOCATION.finditer(text)]


def editor_command(location: SourceLocation, environ: Mapping[str, str] | None = None,
                   which: Which = shutil.which) -> list[str] | None:
    """The command that opens ``location`` in the person's editor; ``None``: use the system opener.

    ``environ`` and ``which`` are the process's own unless given (tests give theirs).
    """
    environ = os.environ if environ is None else environ
    chosen = (environ.get("VISUAL") or "").strip() or (environ.get("EDITOR") or "").strip()
    if chosen:
        try:
            argv = shlex.split(chosen)
        except ValueError:
            argv = [chosen]
        if argv:
            command = argv + _location_arguments(Path(argv[0]).name, location)
            return _in_terminal(command, environ, which) if Path(argv[0]).name in TERMINAL_EDITORS else command
    code = which("code")
    if code:
        return [code, *_location_arguments("code", location)]
    return None


def _location_arguments(editor: str, location: SourceLocation) -> list[str]:
    line = location.line
    if line is None:
        return [location.file]
    if editor in GOTO_EDITORS:
        return ["--goto", f"{location.file}:{line}"]
    if editor in COLON_EDITORS:
        return [f"{location.file}:{line}"]
    if editor in LINE_FLAG_EDITORS:
        return ["--line", str(line), location.file]
    if editor in PLUS_LINE_EDITORS:
        return [f"+{line}", location.file]
    return [location.file]


def _in_terminal(command: list[str], environ: Mapping[str, str], which: Which) -> list[str]:
    """``command`` in a terminal window when one is found; as it is otherwise."""
    for terminal in ((environ.get("TERMINAL") or "").strip(), *FALLBACK_TERMINALS):
        if terminal and which(terminal):
            return [terminal, "-e", *command]
    return command


def open_location(location: SourceLocation, open_file: Callable[[str], bool]) -> bool:
    """Open ``location`` in the editor :func:`editor_command` picks, else with ``open_file``
    (the system opener, which cannot go to the line). ``False`` when nothing could start."""
    command = editor_command(location)
    if command is None:
        return open_file(location.file)
    try:
        subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         start_new_session=True)
    except OSError:
        return open_file(location.file)
    return True
