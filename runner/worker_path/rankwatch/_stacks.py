"""Stack dumps on demand: the runner sends ``STACK_SIGNAL`` to a rank to see where it hangs.

faulthandler writes every thread's Python stack from its C signal handler, so a
dump works even when the main thread is stuck inside a collective (NCCL, gloo)
and no Python code can run. The runner imports this module for the signal
number and the file name; it only signals ranks that said ``hello``, and the
handler is installed before ``hello`` is sent.

Each rank appends to ``<RANKWATCH_STACKS_DIR>/rank-<RANK>.txt`` (restarts of
the same rank append to the same file).
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
        os.makedirs(directory, exist_ok=True)
        dump_file = open(path, "a", encoding="utf-8")  # noqa: SIM115 (must stay open)
    except OSError:
        return None
    try:
        faulthandler.register(STACK_SIGNAL, file=dump_file, all_threads=True, chain=False)
    except (OSError, RuntimeError, ValueError):
        dump_file.close()
        return None
    _dump_file = dump_file
    return path
