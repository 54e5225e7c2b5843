"""The GPUs as the launch form's picker shows them, from the probe's report (Qt-free)."""

from __future__ import annotations

from dataclasses import dataclass

from gui.gateway.runner_rules import GpuReport

BUSY_UTILIZATION = 10.0
"""Percent: a GPU this busy (or with any process on it) is flagged busy in the picker."""
GIB = 1024 ** 3


@dataclass(frozen=True)
class GpuRow:
    """One row of the GPU picker, already in words."""

    index: int
    name: str
    memory: str
    utilization: str
    busy: bool
    processes: str
    """``pid 4242 python (3.1 GiB), ...`` or empty."""

    @property
    def busy_text(self) -> str:
        return "busy" if self.busy else "free"


def _gib(value: int | None) -> str:
    return "n/a" if value is None else f"{value / GIB:.1f}"


def gpu_rows(report: GpuReport) -> list[GpuRow]:
    rows = []
    for gpu in report.gpus:
        if gpu.memory_total is None and gpu.memory_used is None:
            memory = "n/a"
        else:
            memory = f"{_gib(gpu.memory_used)} / {_gib(gpu.memory_total)} GiB"
        utilization = "n/a" if gpu.utilization is None else f"{gpu.utilization:.0f} %"
        processes = []
        for proc in gpu.processes:
            label = f"pid {proc.pid}"
            if proc.name:
                label += f" {proc.name}"
            if proc.used_memory is not None:
                label += f" ({_gib(proc.used_memory)} GiB)"
            processes.append(label)
        busy = bool(gpu.processes) or (gpu.utilization or 0.0) >= BUSY_UTILIZATION
        rows.append(GpuRow(index=gpu.index, name=gpu.name or f"GPU {gpu.index}", memory=memory,
                           utilization=utilization, busy=busy, processes=", ".join(processes)))
    return rows


def describe_gpus(report: GpuReport | None) -> str:
    """The picker's headline: ``2 GPUs · driver 550.54`` or ``No NVIDIA GPU (...): CPU mode``."""
    if report is None:
        return "Checking GPUs…"
    if not report.available:
        return f"No NVIDIA GPU ({report.reason}): CPU mode" if report.reason else "No NVIDIA GPU: CPU mode"
    count = len(report.gpus)
    text = f"{count} GPU{'s' if count != 1 else ''}"
    if report.driver_version:
        text += f" · driver {report.driver_version}"
    if report.cuda_driver_version:
        text += f" · CUDA {report.cuda_driver_version}"
    return text
