"""Find and end every process of a job, wherever it ended up in the process tree.

torchrun starts each worker in a session of its own, and workers start DataLoader
workers and helpers of their own, so "kill torchrun's process group" misses most
of a job. Instead every process of a job carries an environment marker
(``RANKWATCH_RUN_KEY=<job key>``, inherited from the runner's launch), and cleanup scans
``/proc/*/environ`` for it. The runner itself never carries the marker.

Standard library only (and ``runner.processes``, the marker and whether a pid is alive): the
sentinel (``runner.launch.sentinel``) uses it in a bare interpreter that must start fast.
"""

from __future__ import annotations

import ctypes
import functools
import os
import signal
import time
from collections.abc import Iterable

from runner.processes import is_zombie, marker_bytes, pid_alive

NODE_VARIABLE = "RANKWATCH_NODE_RANK"
PR_SET_PDEATHSIG = 1


def _has_entry(environ: bytes, entry: bytes) -> bool:
    """Whether ``entry`` (``NAME=value``) is one of the NUL-separated entries of ``environ``."""
    return (environ.startswith(entry + b"\0") or b"\0" + entry + b"\0" in environ or environ == entry
            or environ.endswith(b"\0" + entry))


def find_job_pids(run_key: str, node_rank: str | None = None) -> list[int]:
    """Pids of live processes whose environment carries this job's marker (ours only).

    ``node_rank``: only those of that node (``RANKWATCH_NODE_RANK``, which every node's torchrun
    and all it starts inherit): several nodes of a run can share a machine, and one node's end
    is not another's."""
    needle = marker_bytes(run_key)
    node_entry = f"{NODE_VARIABLE}={node_rank}".encode() if node_rank is not None else None
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
        if (needle + b"\0" in environ or environ.endswith(needle)) and not is_zombie(pid) and (
                node_entry is None or _has_entry(environ, node_entry)):
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
    return (needle + b"\0" in environ or environ.endswith(needle)) and not is_zombie(pid)


def signal_pids(pids: Iterable[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def end_job(run_key: str, grace: float = 5.0, also: Iterable[int] = (), poll: float = 0.1,
            terminate: bool = False, node_rank: str | None = None) -> list[int]:
    """Give the job ``grace`` seconds to end, then SIGKILL every process still carrying its marker.

    Nothing here sends SIGTERM unless ``terminate``: while torchrun lives, the job has been
    asked to stop already, through torchrun (the runner's SIGTERM, or torchrun's parent-death
    signal when the runner died), and torchrun passes it on to each worker's process group
    exactly once, as on a Ctrl-C. A second SIGTERM to torchrun would abort its orderly
    shutdown halfway (its handler raises again inside the first one's clean-up) and leave
    behind what it had not ended yet; a second one to a worker would run a user's SIGTERM
    handler twice. ``terminate``: torchrun has ended already, so what is left (a rank's
    child, a helper it started in a session of its own, ranks torchrun never stopped because
    it was killed) was never asked by anyone: SIGTERM it once first.

    ``also`` adds pids that might not carry the marker (e.g. torchrun when it was started
    with a clean environment); ``node_rank`` limits it to one node's processes
    (``find_job_pids``). Returns the pids that needed SIGKILL.
    """
    also = list(also)
    if terminate:
        signal_pids(find_job_pids(run_key, node_rank) + [p for p in also if pid_alive(p)], signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        alive = find_job_pids(run_key, node_rank) + [p for p in also if pid_alive(p)]
        if not alive:
            return []
        time.sleep(poll)
    stubborn = sorted(set(find_job_pids(run_key, node_rank)) | {p for p in also if pid_alive(p)})
    signal_pids(stubborn, signal.SIGKILL)
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline and find_job_pids(run_key, node_rank):
        time.sleep(poll)
    return stubborn


def set_parent_death_signal(sig: int = signal.SIGTERM, parent: int | None = None) -> None:
    """Ask the kernel to send ``sig`` to this process when its parent dies (Linux only).

    Used as ``preexec_fn`` for torchrun: if the runner is SIGKILLed, torchrun gets
    SIGTERM and stops its workers the way it does on Ctrl-C. ``parent`` is the pid the
    parent had before it forked: if the parent died in the moment between the fork and
    the ``prctl`` (no signal will ever come), the process sends ``sig`` to itself at once.
    """
    if _prctl is None:
        return
    _prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
    if parent is not None and os.getppid() != parent:
        os.kill(os.getpid(), sig)


def _find_prctl():
    """libc's ``prctl``, looked up once in the parent: a ``preexec_fn`` runs between fork and
    exec, where loading a library could deadlock on a lock another thread held at the fork."""
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


_prctl = _find_prctl()


def parent_death_signal_for(parent: int, sig: int = signal.SIGTERM):
    """A ``preexec_fn`` that sets ``sig`` as the parent-death signal of a child of ``parent``."""
    return functools.partial(set_parent_death_signal, sig, parent)
