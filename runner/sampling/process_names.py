"""The name of a process NVML lists on a GPU, where NVML gives none: this machine's ``/proc``.

NVML names a process (``nvmlSystemGetProcessName``) where its driver can; where it cannot
(seen: none in a VM), the name is read here, as ``nvidia-smi`` shows it: the program the
process runs (``argv[0]`` of ``/proc/<pid>/cmdline``), else the kernel's short name
(``/proc/<pid>/comm``; torch renames its main thread, so that one reads ``pt_main_thread``).

NVML's pids are the driver's, in the machine's first pid namespace. Inside a container of
its own pid namespace, ``/proc/<pid>`` is another process, or none, so a name is read only
where the pid is surely the same process: this machine's first pid namespace, or a process
that has an NVIDIA device open (as every CUDA process does).
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from runner.sampling.gpu_report import GpuReport

INITIAL_PID_NAMESPACE = "pid:[4026531836]"
"""``/proc/self/ns/pid`` in the machine's first pid namespace (the kernel's ``PROC_PID_INIT_INO``)."""
PROC = Path("/proc")


def in_initial_pid_namespace(proc: Path = PROC) -> bool:
    """Whether this process sees the machine's own pids (not a container's)."""
    try:
        return os.readlink(proc / "self" / "ns" / "pid") == INITIAL_PID_NAMESPACE
    except OSError:
        return False


def uses_nvidia_device(pid: int, proc: Path = PROC) -> bool:
    """Whether process ``pid`` here has an NVIDIA device open (``/dev/nvidia*``); False when its
    descriptors cannot be read (another user's process)."""
    try:
        descriptors = list((proc / str(pid) / "fd").iterdir())
    except OSError:
        return False
    for descriptor in descriptors:
        try:
            if os.readlink(descriptor).startswith("/dev/nvidia"):
                return True
        except OSError:
            continue
    return False


def local_process_name(pid: int, proc: Path = PROC, same_pids: bool | None = None) -> str | None:
    """Process ``pid``'s program as this machine's ``/proc`` tells it; None when it is gone, cannot
    be read, or may not be the process NVML meant (``same_pids``: whether this process sees the
    machine's own pids; read from ``proc`` when None)."""
    if same_pids is None:
        same_pids = in_initial_pid_namespace(proc)
    if not same_pids and not uses_nvidia_device(pid, proc):
        return None
    try:
        program = (proc / str(pid) / "cmdline").read_bytes().split(b"\0", 1)[0]
        if not program:  # a kernel thread, a zombie
            program = (proc / str(pid) / "comm").read_bytes().strip()
    except OSError:
        return None
    return program.decode(errors="replace") or None


def with_local_names(report: GpuReport, proc: Path = PROC) -> GpuReport:
    """``report`` with each process NVML gave no name named from ``/proc`` where that can be told."""
    same_pids = in_initial_pid_namespace(proc)
    gpus = []
    for gpu in report.gpus:
        processes = tuple(process if process.name is not None
                          else dataclasses.replace(process, name=local_process_name(process.pid, proc, same_pids))
                          for process in gpu.processes)
        gpus.append(dataclasses.replace(gpu, processes=processes))
    return dataclasses.replace(report, gpus=tuple(gpus))
