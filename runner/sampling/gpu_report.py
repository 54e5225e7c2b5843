"""What is known about the GPUs: plain data, no NVML.

Kept apart from ``runner.sampling.nvml`` (the only module that touches pynvml) so
that the GUI and the spec code can use these types without importing NVML.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class GpuProcess:
    pid: int
    used_memory: int | None
    """Bytes, or ``None`` when the driver does not say (e.g. inside containers)."""
    name: str | None = None


@dataclass(frozen=True)
class GpuSnapshot:
    """One GPU at one moment. Missing readings are ``None``."""

    index: int
    name: str | None
    uuid: str | None
    memory_used: int | None
    memory_total: int | None
    utilization: float | None
    """Percent of time a kernel ran over the last sample period."""
    power_watts: float | None
    temperature_c: float | None
    sm_clock_mhz: float | None
    processes: tuple[GpuProcess, ...] = ()

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["processes"] = [asdict(p) for p in self.processes]
        return data


@dataclass(frozen=True)
class GpuReport:
    """What ``rankwatch gpus`` and the GUI's GPU picker show."""

    available: bool
    reason: str | None = None
    """Why there is no GPU, in words a person can act on."""
    driver_version: str | None = None
    cuda_driver_version: str | None = None
    gpus: tuple[GpuSnapshot, ...] = field(default_factory=tuple)

    @property
    def indices(self) -> tuple[int, ...]:
        return tuple(g.index for g in self.gpus)

    def describe_unavailable(self) -> str:
        return f"no NVIDIA GPU ({self.reason})" if self.reason else "no NVIDIA GPU"
