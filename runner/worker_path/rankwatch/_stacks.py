"""Stack dumps on demand: the runner asks a rank (or signals it) to see where it hangs.

faulthandler writes every thread's Python stack, from the reporter thread when asked
or from its C signal handler on ``STACK_SIGNAL``, so a dump works even when the main
thread is stuck inside a collective (NCCL, gloo). The runner imports this module for
the signal number, the file names and its half of the ask (``ask_for_dump``,
``signal_unless_answered``); it only asks ranks that said ``hello``, and the handler
is installed before ``hello`` is sent.

**Asked first, signalled only when it cannot answer.** faulthandler's signal handler walks
every thread's frames without the GIL, and a thread that runs Python meanwhile can free a frame
under it: CPython 3.11+ then crashes the rank with SIGSEGV (python/cpython#116008; seen in CI,
a rank signalled while it ran its bootstrap). So a capture first leaves an *ask file*
(``rank-<RANK>.ask``, beside the stack file); the rank's reporter thread looks for it at every
heartbeat (each second) and, when it is there, dumps every thread from Python with the GIL held
(``answer_ask``): no other thread's frames can move then. A rank that does not take the ask in
time gets ``STACK_SIGNAL``: its main thread holds the GIL in C code (then no other thread runs
Python either, and the signal's dump is safe) or its reporter is gone. Whoever removes the ask
file owns the request: the rank dumps, or the runner signals, never both.

Each rank appends to ``<RANKWATCH_STACKS_DIR>/rank-<RANK>.txt`` (restarts of
the same rank append to the same file). The file is created 0600 (and the folder,
if missing, 0700) with explicit modes: the worker runs with the user's own umask,
which Rankwatch leaves alone so that checkpoints keep their usual permissions, but a
stack dump is the run's private data.
"""

from __future__ import annotations

import contextlib
import faulthandler
import os
import signal
from typing import IO

STACK_SIGNAL = signal.SIGUSR2
"""Send this to a worker (``os.kill(pid, STACK_SIGNAL)``) to dump all its threads' stacks."""

ASK_SECONDS = 1.5
"""How long the runner leaves an ask to the rank's reporter (a heartbeat and a half) before it signals."""

_dump_file: IO[str] | None = None
"""Kept open for the life of the process: faulthandler writes to its file descriptor."""


def stacks_file_path(directory: str, rank: int) -> str:
    """Where rank ``rank`` writes its stack dumps."""
    return os.path.join(directory, f"rank-{rank}.txt")


def ask_file_path(stacks_path: str) -> str:
    """The file that asks the rank writing ``stacks_path`` for a dump (see the module)."""
    return os.path.splitext(stacks_path)[0] + ".ask"


def answer_ask(stacks_path: str) -> None:
    """Dump every thread's stack if the runner asked for it (its ask file is there).

    Called by the reporter thread, from Python: the GIL is held for the whole dump."""
    try:
        os.unlink(ask_file_path(stacks_path))
    except OSError:
        return  # nothing asked, or the runner took the ask back to signal instead
    if _dump_file is not None:
        with contextlib.suppress(OSError, RuntimeError, ValueError):
            faulthandler.dump_traceback(file=_dump_file, all_threads=True)


def ask_for_dump(stacks_path: str) -> None:
    """The runner's half: leave the ask file for the rank writing ``stacks_path``.

    Raises:
        OSError: the file cannot be made (then signal at once).
    """
    os.close(os.open(ask_file_path(stacks_path), os.O_WRONLY | os.O_CREAT, 0o600))


def signal_unless_answered(pid: int, stacks_path: str) -> bool:
    """Take the ask back and send ``STACK_SIGNAL`` to ``pid``; False when the rank had taken it
    already (its dump is on the way, and a signal now would dump twice).

    Raises:
        ProcessLookupError, PermissionError: from ``os.kill``.
    """
    try:
        os.unlink(ask_file_path(stacks_path))
    except FileNotFoundError:
        return False
    os.kill(pid, STACK_SIGNAL)
    return True


def install_stack_dumps(directory: str, rank: int) -> str | None:
    """Dump all threads' stacks to this rank's file on ``STACK_SIGNAL``.

    Returns the file's path, or None when the folder cannot be written (the
    signal then keeps its default action, as without Rankwatch).
    """
    global _dump_file
    path = stacks_file_path(directory, rank)
    try:
        os.makedirs(directory, mode=0o700, exist_ok=True)
        descriptor = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    except OSError:
        return None
    dump_file = os.fdopen(descriptor, "a", encoding="utf-8")
    try:
        faulthandler.register(STACK_SIGNAL, file=dump_file, all_threads=True, chain=False)
    except (OSError, RuntimeError, ValueError):
        dump_file.close()
        return None
    _dump_file = dump_file
    return path
