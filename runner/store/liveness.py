"""Is a recorded run still going? One answer for the CLI and the GUI.

A run is live when the store has no end for it and its runner process still
exists (with its socket). A run without an end whose runner is gone was *lost*:
the runner died before it could record the end (the sentinel usually records it;
this covers the rest).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from runner.launch.process_tree import pid_alive
from runner.state import RunStatus


def runner_alive(run: dict[str, Any]) -> bool:
    """No end recorded and the runner's pid exists (on this host)."""
    pid = run.get("runner_pid")
    return run.get("ended") is None and isinstance(pid, int) and pid > 0 and pid_alive(pid)


def is_live(run: dict[str, Any]) -> bool:
    """Live and reachable: the runner is alive and its socket is there to subscribe to."""
    socket = run.get("socket")
    return runner_alive(run) and isinstance(socket, str) and bool(socket) and Path(socket).exists()


def effective_status(run: dict[str, Any]) -> str:
    """The stored status, or ``lost`` for a run whose runner vanished without ending it."""
    if run.get("ended") is None and not runner_alive(run):
        return RunStatus.LOST.value
    return run["status"]
