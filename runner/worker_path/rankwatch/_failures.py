"""Explaining a worker's failure without changing how it fails.

* ``trim_traceback`` removes the bootstrap's own frames from the front of a
  traceback, so what is printed and reported is what ``python script.py`` (or
  ``python -m module``) would have shown.
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
from types import TracebackType

_PACKAGE_DIRECTORY = os.path.dirname(os.path.abspath(__file__)) + os.sep
_RUNPY_FILES = {runpy.__file__, runpy.run_path.__code__.co_filename}


def trim_traceback(tb: TracebackType | None) -> TracebackType | None:
    """``tb`` without the leading frames of ``python -m rankwatch._bootstrap`` itself.

    The leading frames are runpy's (which ran the bootstrap) and this package's;
    everything after the last of ours is kept, including runpy's frames of a
    user's ``-m module``, which ``python -m module`` shows too. None when every
    frame is ours: a ``SyntaxError`` in the script, which Python prints without
    a traceback.
    """
    last_own = None
    cursor = tb
    while cursor is not None:
        filename = cursor.tb_frame.f_code.co_filename
        if filename.startswith(_PACKAGE_DIRECTORY):
            last_own = cursor
        elif filename not in _RUNPY_FILES:
            break
        cursor = cursor.tb_next
    if last_own is None:
        return tb
    return last_own.tb_next


def format_exception(exc: BaseException) -> str:
    """The text Python prints for ``exc`` when it ends the program, trimmed of our frames."""
    trimmed = trim_traceback(exc.__traceback__)
    return "".join(traceback.format_exception(type(exc), exc, trimmed))


def install_trimming_excepthook() -> None:
    """Trim our frames from the uncaught exception the interpreter is about to print.

    Wraps the current ``sys.excepthook`` (the default or the user's). The
    traceback is set on the exception itself because the default hook prints
    ``exc.__traceback__``, not its ``tb`` argument.
    """
    previous = sys.excepthook

    def excepthook(exc_type, exc, tb):
        trimmed = trim_traceback(tb)
        if exc is not None and trimmed is not tb:
            exc = exc.with_traceback(trimmed)
        previous(exc_type, exc, trimmed)

    sys.excepthook = excepthook


def write_error_file(path: str | None, exc: BaseException, traceback_text: str) -> bool:
    """Write torchrun's error file unless it exists already (``@record`` wrote it first).

    Same JSON shape as torch's ``ErrorHandler.record_exception``. Returns True when
    written; an unwritable path is ignored (torchrun then says ``<N/A>`` as usual).
    """
    if not path:
        return False
    data = {
        "message": {
            "message": f"{type(exc).__name__}: {exc}",
            "extraInfo": {"py_callstack": traceback_text, "timestamp": str(int(time.time()))},
        }
    }
    try:
        with open(path, "x", encoding="utf-8") as error_file:
            json.dump(data, error_file)
    except OSError:
        return False
    return True


def install_thread_excepthook(report: Callable[[threading.ExceptHookArgs], None]) -> None:
    """Call ``report(args)`` for an exception that ends a thread, then the previous hook.

    ``SystemExit`` in a thread is not a failure (the default hook ignores it too).
    """
    previous = threading.excepthook

    def excepthook(args: threading.ExceptHookArgs) -> None:
        if args.exc_type is not SystemExit:
            try:
                report(args)
            except Exception:
                pass
        previous(args)

    threading.excepthook = excepthook
