"""Explaining a worker's failure without changing how it fails.

* ``trim_traceback`` removes Rankwatch's own frames from a traceback: the
  bootstrap's at the front, and the wrappers in between (a timed collective,
  ``backward``, a spawned rank's function) that only passed the call on to the
  user's or torch's code. What is printed and reported is then what
  ``python script.py`` (or ``python -m module``) would have shown. A frame of
  ours where the exception arose is kept: that is a Rankwatch bug, and says so.
* ``hide_own_frames`` gives an exception (and those chained to it) the trimmed
  traceback, so whoever prints it later shows it trimmed too: Python's
  ``sys.excepthook``, ``torch.multiprocessing.spawn`` (a spawned rank's traceback,
  printed by its parent), ``threading.excepthook``.
* ``install_trimming_excepthook`` makes the interpreter's final print of an
  uncaught exception use the trimmed traceback, whatever ``sys.excepthook`` the
  user installed.
* ``write_error_file`` writes torchrun's error file in the format of
  ``torch.distributed.elastic.multiprocessing.errors.ErrorHandler`` so that
  torchrun's failure summary shows the traceback even without ``@record``.
* ``install_thread_excepthook`` reports exceptions that end other threads.
"""

from __future__ import annotations

import json
import os
import runpy
import sys
import threading
import time
import traceback
from collections.abc import Callable
from functools import partial
from types import CodeType, FunctionType, MethodType, TracebackType

_PACKAGE_DIRECTORY = os.path.dirname(os.path.abspath(__file__)) + os.sep
_RUNPY_FILES = {runpy.__file__, runpy.run_path.__code__.co_filename}


def trim_traceback(tb: TracebackType | None) -> TracebackType | None:
    """``tb`` without Rankwatch's own frames: the leading ones of ``python -m rankwatch._bootstrap``
    and the wrappers of ours that passed the call on.

    The leading frames are runpy's (which ran the bootstrap) and this package's;
    everything after the last of ours is kept, including runpy's frames of a
    user's ``-m module``, which ``python -m module`` shows too. None when every
    frame is ours: a ``SyntaxError`` in the script, which Python prints without
    a traceback. Further in, a frame of ours is left out when it only passed the
    call on (``_passes_call_on``); ``tb`` itself is unchanged (a new chain is made).
    """
    entries = _entries(tb)
    start = 0
    for index, entry in enumerate(entries):
        filename = entry.tb_frame.f_code.co_filename
        if _is_own(filename):
            start = index + 1
        elif filename not in _RUNPY_FILES:
            break
    if start == len(entries) and entries:
        return None
    kept = [entry for index, entry in enumerate(entries[start:], start)
            if not (index + 1 < len(entries) and _passes_call_on(entry, entries[index + 1]))]
    if len(kept) == len(entries) - start:
        return entries[start] if start < len(entries) else tb
    trimmed = None
    for entry in reversed(kept):
        trimmed = TracebackType(trimmed, entry.tb_frame, entry.tb_lasti, entry.tb_lineno)
    return trimmed


def _entries(tb: TracebackType | None) -> list[TracebackType]:
    entries = []
    while tb is not None:
        entries.append(tb)
        tb = tb.tb_next
    return entries


def _is_own(filename: str) -> bool:
    return filename.startswith(_PACKAGE_DIRECTORY)


def _passes_call_on(entry: TracebackType, callee: TracebackType) -> bool:
    """Whether a frame of ours only called on what it wraps: the frame below it runs a function
    the frame holds (a local or closure variable, such as ``original`` or the spawned ``fn``, or
    an attribute of its ``self``), and that function is not ours. A frame of ours that failed
    while doing its own work (calling its own helpers, or the standard library) is kept."""
    frame = entry.tb_frame
    code = callee.tb_frame.f_code
    if not _is_own(frame.f_code.co_filename) or _is_own(code.co_filename):
        return False
    try:
        held = list(frame.f_locals.values())
        owner = frame.f_locals.get("self")
        if owner is not None and isinstance(getattr(owner, "__dict__", None), dict):
            held.extend(vars(owner).values())
        return any(_code_of(value) is code for value in held)
    except Exception:  # a frame we cannot look into: shown, never lost
        return False


def _code_of(value: object) -> CodeType | None:
    """The code a call of ``value`` runs first, when it is Python code."""
    for _ in range(4):  # a partial of a bound method of ...
        if isinstance(value, FunctionType):
            return value.__code__
        if isinstance(value, MethodType):
            value = value.__func__
        elif isinstance(value, partial):
            value = value.func
        else:
            call = type(value).__dict__.get("__call__")
            return call.__code__ if isinstance(call, FunctionType) else None
    return None


def hide_own_frames(exc: BaseException) -> BaseException:
    """Give ``exc``, and every exception chained to it, its traceback without our frames.

    In place, because the ones who print it later read ``exc.__traceback__``: Python's
    final print, ``torch.multiprocessing.spawn`` formatting a spawned rank's failure for
    its parent. Returns ``exc``.
    """
    seen: set[int] = set()
    pending = [exc]
    while pending:
        current = pending.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        trimmed = trim_traceback(current.__traceback__)
        if trimmed is not current.__traceback__:
            current.__traceback__ = trimmed
        pending.extend(chained for chained in (current.__cause__, current.__context__) if chained is not None)
        pending.extend(getattr(current, "exceptions", None) or ())  # an ExceptionGroup's
    return exc


def format_exception(exc: BaseException) -> str:
    """The text Python prints for ``exc`` when it ends the program, without our frames.

    ``exc`` keeps that trimmed traceback (``hide_own_frames``), so the print that
    follows matches what was reported.
    """
    hide_own_frames(exc)
    return "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))


def install_trimming_excepthook() -> None:
    """Trim our frames from the uncaught exception the interpreter is about to print.

    Wraps the current ``sys.excepthook`` (the default or the user's). The
    traceback is set on the exception itself because the default hook prints
    ``exc.__traceback__``, not its ``tb`` argument (and the chained exceptions' own).
    """
    previous = sys.excepthook

    def excepthook(exc_type, exc, tb):
        if exc is None:
            previous(exc_type, exc, trim_traceback(tb))
            return
        try:
            exc.__traceback__ = tb
            hide_own_frames(exc)
        except Exception:  # the exception as it is, rather than none
            pass
        previous(exc_type, exc, exc.__traceback__)

    sys.excepthook = excepthook


def write_error_file(path: str | None, exc: BaseException, traceback_text: str) -> bool:
    """Write torchrun's error file unless it exists already (``@record`` wrote it first).

    Same JSON shape as torch's ``ErrorHandler.record_exception``. Returns True when
    written; an unwritable path is ignored (torchrun then says ``<N/A>`` as usual).
    One that ``@record`` wrote for this very exception gets ``traceback_text`` in
    place of its own (which holds our frames); any other is left alone.
    """
    if not path:
        return False
    message = f"{type(exc).__name__}: {exc}"
    data = {
        "message": {
            "message": message,
            "extraInfo": {"py_callstack": traceback_text, "timestamp": str(int(time.time()))},
        }
    }
    try:
        with open(path, "x", encoding="utf-8") as error_file:
            json.dump(data, error_file)
    except FileExistsError:
        return _replace_recorded_traceback(path, message, traceback_text)
    except OSError:
        return False
    return True


def _replace_recorded_traceback(path: str, message: str, traceback_text: str) -> bool:
    """Put ``traceback_text`` in the error file ``@record`` wrote, if it recorded ``message``."""
    try:
        with open(path, encoding="utf-8") as error_file:
            data = json.load(error_file)
        body = data["message"]
        extra = body["extraInfo"]
        if body["message"] != message or not isinstance(extra.get("py_callstack"), str):
            return False
        if extra["py_callstack"] == traceback_text:
            return True
        extra["py_callstack"] = traceback_text
        replacement = f"{path}.rankwatch-{os.getpid()}"
        with open(replacement, "w", encoding="utf-8") as error_file:
            json.dump(data, error_file)
        os.replace(replacement, path)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return False
    return True


def install_thread_excepthook(report: Callable[[threading.ExceptHookArgs], None]) -> None:
    """Call ``report(args)`` for an exception that ends a thread, then the previous hook,
    both with the traceback trimmed of our frames (a collective of ours in the thread).

    ``SystemExit`` in a thread is not a failure (the default hook ignores it too).
    """
    previous = threading.excepthook

    def excepthook(args: threading.ExceptHookArgs) -> None:
        args = _trimmed_thread_args(args)
        if args.exc_type is not SystemExit:
            try:
                report(args)
            except Exception:
                pass
        previous(args)

    threading.excepthook = excepthook


def _trimmed_thread_args(args: threading.ExceptHookArgs) -> threading.ExceptHookArgs:
    exc = args.exc_value
    if exc is None:
        return args
    try:
        exc.__traceback__ = args.exc_traceback
        hide_own_frames(exc)
        return threading.ExceptHookArgs([args.exc_type, exc, exc.__traceback__, args.thread])
    except Exception:  # the exception as it is, rather than none
        return args
