"""Stack dumps on demand: the runner sends ``STACK_SIGNAL`` to a rank to see where it hangs.

faulthandler writes every thread's Python stack from its C signal handler, so a
dump works even when the main thread is stuck inside a collective (NCCL, gloo)
and no Python code can run. The runner imports this module for the signal
number and the file name; it only signals ranks that said ``hello``, and the
handler is installed before ``hello`` is sent.

A known risk, not solved here: faulthandler walks every thread's frames from the signal
handler without the GIL, and a thread that runs Python meanwhile can free a frame under it.
CPython 3.11+ then crashes the process with SIGSEGV (python/cpython#116008); seen once in CI
(``tests/worker/test_reporter.py``, a rank signalled while its reporter thread was busy). The
way out is to ask first through the hub connection, where the reporter thread dumps with the
GIL held (no other thread's frames move), and to keep the signal for a rank that holds the GIL
in C and cannot answer.

Each rank appends to ``<RANKWATCH_STACKS_DIR>/rank-<RANK>.txt`` (restarts of
the same rank append to the same file). The file is created 0600 (and the folder,
if missing, 0700) with explicit modes: the worker runs with the user's own umask,
which Rankwatch leaves alone so that checkpoints keep their usual permissions, but a
stack dump is the run's private data.
"""

from __future__ import annotations

import faulthandler
import os
import signal
from typing import IO

STACK_SIGNAL = signal.SIGUSR2
"""Send this to a worker (``os.kill(pid, STACK_SIGNAL)``) to dump all its threads' stacks."""

_dump_file: IO[str] | None = None
"""Kept open for the life of the process: faulthandler writes to its file descriptor."""


def stacks_file_path(directory: str, rank: int) -> str:
    """Where rank ``rank`` writes its stack dumps."""
    return os.path.join(directory, f"rank-{rank}.txt")


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
