"""Find and end every process of a job, wherever it ended up in the process tree.

torchrun starts each worker in a session of its own, and workers start DataLoader
workers and helpers of their own, so "kill torchrun's process group" misses most
of a job. Instead every process of a job carries an environment marker
(``RANKWATCH_RUN_KEY=<job key>``, inherited from the runner's launch), and cleanup scans
``/proc/*/environ`` for it. The runner itself never carries the marker.

Standard library only: the sentinel (``runner.launch.sentinel``) uses it in a bare
interpreter that must start fast.
"""

from __future__ import annotations

import ctypes
import os
import signal
import time
from collections.abc import Iterable

MARKER_VARIABLE = "RANKWATCH_RUN_KEY"
PR_SET_PDEATHSIG = 1


def marker_bytes(run_key: str) -> bytes:
    return f"{MARKER_VARIABLE}={run_key}".encode()


def find_job_pids(run_key: str) -> list[int]:
    """Pids of live processes whose environment carries this job's marker (ours only)."""
    needle = marker_bytes(run_key)
    own = os.getpid()
    found = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for entry in entries:
        if not entry.isdigit():
            continue
        pid = int(entry)
        if pid == own:
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as handle:
                environ = handle.read()
        except OSError:
            continue  # gone, or another user's
        if (needle + b"\0" in environ or environ.endswith(needle)) and not _is_zombie(pid):
            found.append(pid)
    return found


def carries_marker(pid: int, run_key: str) -> bool:
    """Whether process ``pid`` (of this user) carries the run's marker: the run started it."""
    needle = marker_bytes(run_key)
    try:
        with open(f"/proc/{pid}/environ", "rb") as handle:
            environ = handle.read()
    except OSError:
        return False
    return (needle + b"\0" in environ or environ.endswith(needle)) and not _is_zombie(pid)


def _is_zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read()
    except OSError:
        return True
    # The state letter follows the command name, which is in parentheses and may hold spaces.
    return stat[stat.rfind(b")") + 2: stat.rfind(b")") + 3] in (b"Z", b"X")


def signal_pids(pids: Iterable[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def end_job(run_key: str, grace: float = 5.0, also: Iterable[int] = (), poll: float = 0.1) -> list[int]:
    """SIGTERM every process of the job, then SIGKILL what is left after ``grace`` seconds.

    ``also`` adds pids that might not carry the marker (e.g. torchrun when it was
    started with a clean environment). Returns the pids that needed SIGKILL.
    """
    targets = set(find_job_pids(run_key)) | set(also)
    signal_pids(targets, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        alive = [p for p in find_job_pids(run_key) if p not in (os.getpid(),)]
        alive += [p for p in also if pid_alive(p)]
        if not alive:
            return []
        time.sleep(poll)
    stubborn = sorted(set(find_job_pids(run_key)) | {p for p in also if pid_alive(p)})
    signal_pids(stubborn, signal.SIGKILL)
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline and find_job_pids(run_key):
        time.sleep(poll)
    return stubborn


def pid_alive(pid: int) -> bool:
    """Whether ``pid`` exists and is not a zombie (another user's process counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return not _is_zombie(pid)


def set_parent_death_signal(sig: int = signal.SIGTERM) -> None:
    """Ask the kernel to send ``sig`` to this process when its parent dies (Linux only).

    Used as ``preexec_fn`` for torchrun: if the runner is SIGKILLed, torchrun gets
    SIGTERM and stops its workers the way it does on Ctrl-C.
    """
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
    except (OSError, AttributeError):
        pass
