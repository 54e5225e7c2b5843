"""Background threads that stay out of the training thread's way (Linux; elsewhere a no-op).

``settle_background_thread`` is called by a background thread on itself when it
starts (the reporter here; the runner's samplers reuse it):

* ``SCHED_BATCH`` for that thread only: a waking batch thread does not preempt the
  running one, so the reporter runs when the training thread blocks (an all-reduce,
  a data wait) or its time slice ends, not in the middle of a step. The nice value is
  unchanged, so the thread keeps its fair share of the CPU and is never starved while
  it holds the GIL. Threads and processes started by other threads are not affected.
* its kernel name (``/proc/<pid>/task/<tid>/comm``, 15 characters), so ``top -H``,
  ``ps -L`` and ``tests/bench/bench_job_overhead.py`` can tell it from torch's threads.

Anything refused (not Linux, a seccomp filter, a read-only /proc) leaves the thread as
it was: telemetry must never fail because of this.
"""

from __future__ import annotations

import os
import threading

KERNEL_NAME_LENGTH = 15


def settle_background_thread(name: str) -> None:
    """Lower the calling thread to ``SCHED_BATCH`` and give it ``name`` in the kernel."""
    try:
        if os.sched_getscheduler(0) == os.SCHED_OTHER:
            os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))
    except (AttributeError, OSError):
        pass
    try:
        with open(f"/proc/self/task/{threading.get_native_id()}/comm", "w") as comm:
            comm.write(name[:KERNEL_NAME_LENGTH])
    except (AttributeError, OSError):
        pass
