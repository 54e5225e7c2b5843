"""The runner's scheduling: below the ranks while they train, never passed on to them.

On a machine whose cores are all busy (DataLoader workers, other jobs), every wake-up
of the runner (the hub taking a batch, a sampler, the monitors) preempts whatever runs
on that core, often a rank, and the all-reduce makes every other rank wait for it. So
the runner puts its own threads under ``SCHED_BATCH``: a waking batch thread does not
preempt the running one, it waits for the end of that task's time slice (a few ms on
a loaded core, nothing on an idle one). Its nice value is unchanged, so it keeps its
fair share of the CPU: freshness under load loses those few ms at most, and the hub
keeps up with the ranks (it is not starved behind them, which a raised nice value could
do, with the ranks' records piling up in their buffers).

Why not ``os.nice``: a process cannot lower its nice value again without privileges,
so the keeper, torchrun and the ranks it starts would all inherit the runner's lower
priority. ``SCHED_BATCH`` can be undone by an unprivileged child: the keeper's
``preexec_fn`` (``for_child``) gives back the user's own policy before ``exec``, so
torchrun and the ranks run exactly as the user started ``rankwatch run``
(``nice -n 5 rankwatch run`` keeps its nice 5 everywhere).

Linux only; elsewhere, or when the runner does not run under the normal policy (a
user who chose ``SCHED_IDLE`` or a real-time one), nothing changes.
"""

from __future__ import annotations

import os
from collections.abc import Callable

_user_policy: int | None = None
"""The policy the runner had before ``lower_runner_priority`` changed it; None: unchanged."""


def lower_runner_priority() -> bool:
    """Put every thread of this process (and the threads they start later) under
    ``SCHED_BATCH``. Returns True when it did.

    Never raises: a refusal (a seccomp filter, not Linux) leaves the runner as it was.
    """
    global _user_policy
    try:
        if os.sched_getscheduler(0) != os.SCHED_OTHER:
            return False
        batch, param = os.SCHED_BATCH, os.sched_param(0)
        for thread_id in _own_threads():
            try:
                os.sched_setscheduler(thread_id, batch, param)
            except (ProcessLookupError, PermissionError):
                pass  # a thread that ended meanwhile
    except (AttributeError, OSError):
        return False
    _user_policy = os.SCHED_OTHER
    return True


def restore_user_priority() -> None:
    """In a child between fork and exec: the policy the user started the runner with.

    A syscall only (safe in a ``preexec_fn``); a refusal leaves the child as it was.
    """
    if _user_policy is None:
        return
    try:
        os.sched_setscheduler(0, _user_policy, os.sched_param(0))
    except OSError:
        pass


def for_child(preexec: Callable[[], None] | None = None) -> Callable[[], None]:
    """A ``preexec_fn`` that gives the child the user's scheduling back, then runs ``preexec``."""

    def prepare() -> None:
        restore_user_priority()
        if preexec is not None:
            preexec()

    return prepare


def _own_threads() -> list[int]:
    """This process's thread ids (``/proc/self/task``); the calling thread when unreadable."""
    try:
        return [int(name) for name in os.listdir("/proc/self/task")]
    except OSError:
        return [0]
