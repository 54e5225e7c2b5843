"""Is a recorded run still going? One answer for the CLI and the GUI.

A run is live when the store has no end for it and its runner process still
exists (with its socket). A run without an end whose runner is gone was *lost*:
the runner died before it could record the end (the sentinel usually records it;
this covers the rest).

"Its runner process still exists" is more than "a process has its pid": once the
runner is gone the kernel may give the pid to any later process. The store keeps
the runner's identity (``process_identity``: boot and start time), read when the run
was recorded; a process with that pid and another identity is not the runner.
"""

from __future__ import annotations

from pathlib import Path

import psutil

from runner.processes import pid_alive
from runner.rows import StoredRun
from runner.state import RunStatus

BOOT_ID_PATH = Path("/proc/sys/kernel/random/boot_id")
START_TIME_FIELD = 22
"""``starttime`` in ``/proc/<pid>/stat`` (man 5 proc): clock ticks after boot; fixed for a process's life."""
START_TIME_SLACK_SECONDS = 0.5
"""Without a stored identity (runs recorded before it was kept, or no /proc): a runner process that
started later than its run was created (by more than this) is another process. A runner starts well
before it records its run (imports, checks); psutil's start time can read up to 1 s early (boot time
in whole seconds), never late, so a small slack suffices."""


def process_identity(pid: int) -> str | None:
    """``"<boot id>:<start time in clock ticks>"`` of process ``pid``, or None when it does not
    exist or this system has no /proc. Two processes given the same pid one after the other
    never share it: the later one started after the earlier one ended (the whole pid range
    would have to wrap within a tick of 10 ms to fool it), across reboots neither."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
        boot = BOOT_ID_PATH.read_text().strip()
    except OSError:
        return None
    # The fields after the command name, which is in parentheses and may hold spaces or ")".
    fields = stat[stat.rfind(b")") + 2:].split()
    start_index = START_TIME_FIELD - 3  # the list starts at field 3 (state)
    if len(fields) <= start_index:
        return None
    return f"{boot}:{int(fields[start_index])}"


def is_runner_process(run: StoredRun) -> bool:
    """Whether the run's ``runner_pid`` is (still) the process that recorded the run, not a
    later process the pid was given to."""
    pid = run.runner_pid
    if not (pid is not None and pid > 0 and pid_alive(pid)):
        return False
    recorded, current = run.runner_identity, process_identity(pid)
    if recorded and current:
        return current == recorded
    try:
        started = psutil.Process(pid).create_time()
    except psutil.Error:
        return False
    created = run.created
    return created is not None and started <= created + START_TIME_SLACK_SECONDS


def runner_alive(run: StoredRun) -> bool:
    """No end recorded and the run's runner process still exists (on this host)."""
    return run.ended is None and is_runner_process(run)


def is_live(run: StoredRun) -> bool:
    """Live and reachable: the runner is alive and its socket is there to subscribe to."""
    socket = run.socket
    return runner_alive(run) and bool(socket) and Path(str(socket)).exists()


def effective_status(run: StoredRun) -> str:
    """The stored status, or ``lost`` for a run whose runner vanished without ending it."""
    if run.ended is None and not runner_alive(run):
        return RunStatus.LOST.value
    return str(run.status)
