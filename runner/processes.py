"""Facts about this machine's processes that every layer of the runner asks.

Whether a pid is a live process (and why a signal to it failed), and the marker every process of a job carries in its
environment (``RANKWATCH_RUN_KEY=<job key>``, inherited from the runner's launch): how
``runner.launch.process_tree`` finds and ends a job's processes, how the store tells a
live runner from a lost one (``runner.store.liveness``) and a run's process from a
stranger's (``runner.store.rank_processes``).

Standard library only: the sentinel imports it in a bare interpreter that must start fast.
"""

from __future__ import annotations

import os
from collections.abc import Callable

MARKER_VARIABLE = "RANKWATCH_RUN_KEY"


def marker_bytes(run_key: str) -> bytes:
    return f"{MARKER_VARIABLE}={run_key}".encode()


def is_zombie(pid: int) -> bool:
    """Whether ``pid`` has ended and only waits to be reaped (or cannot be read: gone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read()
    except OSError:
        return True
    # The state letter follows the command name, which is in parentheses and may hold spaces.
    return stat[stat.rfind(b")") + 2: stat.rfind(b")") + 3] in (b"Z", b"X")


def pid_alive(pid: int) -> bool:
    """Whether ``pid`` exists and is not a zombie (another user's process counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return not is_zombie(pid)


def why_not_signalled(pid: int, signal_it: Callable[[int], object]) -> str | None:
    """Why ``signal_it(pid)`` failed, in words for a report (``os.kill`` with a signal, or 0 to check
    that it could be signalled); None when it did not fail."""
    try:
        signal_it(pid)
    except ProcessLookupError:
        return f"process {pid} is gone"
    except PermissionError:
        return f"not allowed to signal process {pid}"
    except OSError as error:
        return f"cannot signal process {pid}: {error.strerror or error}"
    return None
