"""Background samplers: GPUs through NVML, rank processes through psutil.

Both have the same shape: a named daemon thread with a stop event that takes a
snapshot every ``interval`` seconds and hands it to a callback (the runner passes
one that hops onto its event loop). NVML and /proc reads can block, so they never
run on the event loop.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable

import psutil

from rankwatch._threads import settle_background_thread
from rankwatch.protocol import GpuSample, ProcessSample
from runner.sampling.gpu_report import GpuReport
from runner.sampling.nvml import Nvml, shared_nvml

log = logging.getLogger(__name__)


class PeriodicSampler:
    """A named daemon thread calling ``sample()`` every ``interval`` seconds until stopped."""

    thread_name = "rankwatch-sampler"

    def __init__(self, interval: float):
        self.interval = max(0.25, float(interval))
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=self.thread_name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 2.0) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def _loop(self) -> None:
        settle_background_thread(self.thread_name)  # runs when the ranks pause, not in their steps
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                self.sample()
            except Exception:  # a sampler must never take the runner down
                log.exception("%s failed", self.thread_name)
            self._stop.wait(max(0.0, self.interval - (time.monotonic() - started)))

    def sample(self) -> None:  # pragma: no cover - overridden
        pass


class ProcessSampler(PeriodicSampler):
    """CPU %, RSS and threads of each rank's process tree (the rank and its children,
    e.g. DataLoader workers)."""

    thread_name = "rankwatch-process-sampler"

    def __init__(self, interval: float, pids: Callable[[], dict[int, int]],
                 emit: Callable[[list[ProcessSample]], None]):
        super().__init__(interval)
        self._pids = pids
        self._emit = emit
        self._processes: dict[int, psutil.Process] = {}
        self._told: set[tuple[int, object]] = set()
        """(rank, pid) pairs already logged as unusable: once each, never a traceback per sample."""

    def _unusable(self, rank: int, pid: object, error: Exception) -> None:
        if (rank, pid) not in self._told:
            self._told.add((rank, pid))
            log.warning("rank %s: cannot sample process %r (%s); its CPU and memory are not measured", rank, pid, error)

    def _tree(self, pid: int) -> tuple[list[psutil.Process], bool]:
        """The process tree of ``pid``, and whether its root is new: a counter primed just now
        has no interval behind it yet."""
        root = self._processes.get(pid)
        new = root is None
        if root is None:
            root = self._processes[pid] = psutil.Process(pid)
            root.cpu_percent(None)  # prime the counter
        members = [root]
        for child_pid in _descendants(root):
            cached = self._processes.get(child_pid)
            if cached is None:
                try:
                    cached = self._processes[child_pid] = psutil.Process(child_pid)
                except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                    continue
                cached.cpu_percent(None)
            members.append(cached)
        return members, new

    def sample(self) -> None:
        """One row per rank. Ranks that share a process (several ranks' threads in one, or
        a test's fake ranks) get that process's one reading: read again at once, psutil's
        CPU figure covered the instant since the first reading and said 0 %."""
        now = time.time()
        rows = []
        readings: dict[int, tuple[float | None, int, int] | None] = {}
        for rank, pid in self._pids().items():
            if pid not in readings:
                try:
                    readings[pid] = self._read_tree(pid)
                except (ValueError, TypeError, OverflowError) as error:  # not a pid: costs only its own rank
                    self._unusable(rank, pid, error)
                    continue
            reading = readings[pid]
            if reading is not None:
                cpu, rss, threads = reading
                rows.append(ProcessSample(now, rank, pid, cpu, rss, threads))
        if rows:
            self._emit(rows)

    def _read_tree(self, pid: int) -> tuple[float | None, int, int] | None:
        """CPU %, RSS and threads of ``pid``'s tree; None when it is gone (no figures, not zeros:
        its last sample stands).

        Raises:
            ValueError, TypeError, OverflowError: ``pid`` is not a pid.
        """
        try:
            tree, new = self._tree(pid)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            self._processes.pop(pid, None)
            return None
        cpu = rss = threads = 0.0
        measured = 0
        for process in tree:
            try:
                with process.oneshot():
                    cpu += process.cpu_percent(None)
                    rss += process.memory_info().rss
                    threads += process.num_threads()
                measured += 1
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                self._processes.pop(process.pid, None)
        if not measured:
            self._processes.pop(pid, None)
            return None
        # A rank's first sample has no CPU figure: psutil's first reading of a process is 0.0
        # whatever it does (it needs two readings), and it was drawn as a climb from 0 %.
        return None if new else round(cpu, 1), int(rss), int(threads)


_CHILDREN_FILES = os.path.exists(f"/proc/self/task/{threading.get_native_id()}/children")
"""The kernel lists each thread's children (``CONFIG_PROC_CHILDREN``, on in common distributions)."""


def _descendants(root: psutil.Process) -> list[int]:
    """Pids of every process under ``root``, from ``/proc/<pid>/task/<tid>/children``.

    Reads a few small files per process of the tree, where psutil's ``children()``
    reads the status of every process on the machine (one full /proc scan per rank per
    sample: thousands of files on a busy GPU server). Falls back to psutil where the
    kernel has no ``children`` files. A thread or process that ends meanwhile is skipped.

    Raises:
        psutil.NoSuchProcess: ``root`` is gone (from the fallback).
    """
    if not _CHILDREN_FILES:
        return [child.pid for child in root.children(recursive=True)]
    found: list[int] = []
    pending = [root.pid]
    while pending:
        pid = pending.pop()
        try:
            threads = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for thread in threads:
            try:
                with open(f"/proc/{pid}/task/{thread}/children") as children:
                    pids = [int(child) for child in children.read().split()]
            except OSError:
                continue
            found.extend(pids)
            pending.extend(pids)
    return found


class GpuSampler(PeriodicSampler):
    """Every GPU's utilisation, memory, power, temperature and clock, plus which rank
    pids use which GPU (NVML's per-process list maps each rank to its GPU)."""

    thread_name = "rankwatch-gpu-sampler"

    def __init__(self, interval: float, emit: Callable[[GpuReport], None], nvml: Nvml | None = None):
        super().__init__(interval)
        self._emit = emit
        self._nvml = nvml or shared_nvml()

    def sample(self) -> None:
        report = self._nvml.report(with_processes=True, with_names=False)  # pids are all it matches
        self._emit(report)
        if not report.available:
            self._stop.set()  # no driver now means no driver for this run: stop polling


def gpu_rows(report: GpuReport, t: float) -> list[GpuSample]:
    """The GPU samples of one report."""
    return [GpuSample(t, g.index, g.utilization, g.memory_used, g.memory_total, g.power_watts, g.temperature_c,
             g.sm_clock_mhz) for g in report.gpus]


def rank_gpu_usage(report: GpuReport, rank_pids: dict[int, int]) -> dict[int, tuple[int, float | None, int | None]]:
    """rank -> (gpu index, that GPU's utilisation, the rank's own GPU memory) by pid."""
    by_pid = {pid: rank for rank, pid in rank_pids.items()}
    usage = {}
    for gpu in report.gpus:
        for process in gpu.processes:
            rank = by_pid.get(process.pid)
            if rank is not None and rank not in usage:
                usage[rank] = (gpu.index, gpu.utilization, process.used_memory)
    return usage
