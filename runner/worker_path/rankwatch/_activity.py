"""Is the training thread working while no step completes? Evaluation is not a hang.

A rank that makes no step for a while is either stuck (a collective its peers
never join, a lock, a dead data loader, a sleep) or busy with work that is not a
training step: an evaluation pass, a long checkpoint, a first compile. The stall
monitor used to flag both alike: PyTorch's word language model example, which
evaluates for over a minute after its last step, ended "succeeded" with rank 0
"stalled ... never resumed". This tells them apart from inside the rank, at each
heartbeat once the rank has gone ``STEPLESS_SECONDS`` without a step:

* **CUDA in use**: the caching allocator served allocations since the previous
  heartbeat (every kernel's output is one). An evaluation allocates; a rank stuck
  in a collective or a synchronisation does not, even though its CPU thread may
  spin at 100 % inside ``cudaStreamSynchronize`` and the waiting NCCL kernel keeps
  the GPU "100 % utilised": that is why neither CPU time nor GPU utilisation can
  say it. Work replayed from CUDA graphs allocates nothing and reads as idle, as
  everything did before.
* **Batches**: any DataLoader gave a batch since the previous heartbeat (an
  evaluation loop whose thread mostly waits for its loader's workers).
* **No CUDA**: the training thread's own CPU time (``/proc/self/task/<id>/schedstat``)
  grew by at least ``WORKING_CPU_SHARE`` of the wall time. A rank blocked in gloo,
  a queue or a sleep uses next to none; DataLoader workers and torch's intra-op
  threads are other threads and do not count.

``sample`` returns None when it does not judge: within ``STEPLESS_SECONDS`` of a
step (and nothing is read within ``BASELINE_SECONDS``: a training rank pays
nothing), at its first reading (no baseline yet) and where the clocks cannot be
read. It runs on the reporter thread, once per heartbeat (every second).
"""

from __future__ import annotations

import sys
import threading
import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

BASELINE_SECONDS = 1.0
"""Nothing is read closer than this to the last step: a training rank costs nothing."""
STEPLESS_SECONDS = 2.0
"""No judgement closer than this to the last step (stall thresholds are 30 s by default)."""
WORKING_CPU_SHARE = 0.5
"""A thread that computes for half of the time between two heartbeats is working."""


class TrainingActivity:
    """Judges, heartbeat by heartbeat, whether the training thread did work (module docstring)."""

    __slots__ = ("_thread", "_batches", "_last")

    def __init__(self, thread: Callable[[], int | None] | None = None,
                 batches: Callable[[], int | None] | None = None) -> None:
        """``thread`` gives the kernel id of the thread that trains (None, or no ``thread``: the main
        thread); ``batches`` the number of DataLoader batches fetched so far (None: not counted)."""
        self._thread = thread or _uncounted
        self._batches = batches or _uncounted
        self._last: tuple[float, float | None, int | None, int | None] | None = None
        """(monotonic time, thread CPU seconds, CUDA allocations, batches) of the previous reading."""

    def sample(self, stepless_seconds: float) -> bool | None:
        """Whether the training thread worked since the previous call; None when not judged."""
        if stepless_seconds < BASELINE_SECONDS:
            self._last = None
            return None
        now = time.monotonic()
        allocations = cuda_allocations()
        cpu = thread_cpu_seconds(self._thread() or threading.main_thread().native_id) if allocations is None else None
        batches = self._batches()
        last, self._last = self._last, (now, cpu, allocations, batches)
        if last is None or stepless_seconds < STEPLESS_SECONDS:
            return None
        then, last_cpu, last_allocations, last_batches = last
        if batches is not None and last_batches is not None and batches > last_batches:
            return True
        if allocations is not None:
            return None if last_allocations is None else allocations > last_allocations
        if cpu is None or last_cpu is None or now <= then:
            return None
        return cpu - last_cpu >= WORKING_CPU_SHARE * (now - then)


def thread_cpu_seconds(native_id: int | None) -> float | None:
    """CPU seconds the thread ``native_id`` (its kernel id) has used, or None where it cannot be read.

    Read from ``/proc/self/task/<id>/schedstat`` (field 1, nanoseconds on a CPU), not with
    ``pthread_getcpuclockid``: that one takes a ``pthread_t`` and crashes the process when
    the thread has ended, where a file of a thread gone is simply missing.
    """
    if native_id is None:
        return None
    try:
        with open(f"/proc/self/task/{native_id}/schedstat", "rb") as file:
            return int(file.read(128).split()[0]) / 1e9
    except (OSError, ValueError, IndexError):
        return None


def cuda_allocations() -> int | None:
    """Allocations the CUDA caching allocator served so far on every device, or None without CUDA in use.

    Never initialises CUDA: a process that has not used it reads None.
    """
    torch: Any = sys.modules.get("torch")
    cuda = getattr(torch, "cuda", None)
    try:
        if cuda is None or not cuda.is_initialized():
            return None
        return sum(cuda.memory_stats(device).get("allocation.all.allocated", 0)
                   for device in range(cuda.device_count()))
    except Exception:  # a torch without these functions, a device gone
        return None


def _uncounted() -> int | None:
    return None

