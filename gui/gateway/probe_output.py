"""What the runner's probe says about an interpreter and the GPUs, as typed values.

The GUI never imports torch or NVML: it runs ``python -m runner probe --json
[--interpreter PATH | --gpus-only]`` (``gui.gateway.probe``) and parses the one
JSON object it prints here (Qt-free). Parsing is tolerant: a missing or mistyped reading is
``None`` (shown as "n/a"), never an exception, so a newer or older runner still
works. Only output that is not a JSON object at all is a ``ProbeError``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, ClassVar

from runner.sampling.gpu_report import GpuProcess, GpuReport, GpuSnapshot

__all__ = ["InterpreterInfo", "ProbeError", "parse_probe_output", "unavailable_report"]


class ProbeError(ValueError):
    """The probe printed something that is not its JSON object."""


@dataclass(frozen=True)
class BackendInfo:
    available: bool
    reason: str | None = None
    """Why it is unavailable, in words (``None`` when available)."""


@dataclass(frozen=True)
class InterpreterInfo:
    """One interpreter as the runner probed it (torch imported in that interpreter)."""

    BACKEND_NAMES: ClassVar[tuple[str, ...]] = ("nccl", "gloo", "mpi")
    """The backends the probe reports on (``backend`` answers for these)."""

    python: str
    ok: bool
    error: str | None = None
    python_version: str | None = None
    torch: str | None = None
    """torch's version, ``None`` when torch is not installed there."""
    cuda_available: bool = False
    cuda_version: str | None = None
    device_count: int = 0
    backends: dict[str, BackendInfo] = field(default_factory=dict)

    @property
    def has_torch(self) -> bool:
        return self.ok and self.torch is not None

    @property
    def ran(self) -> bool:
        """The interpreter started and answered (even if torch then failed to import)."""
        return self.ok or self.python_version is not None

    @property
    def torch_missing(self) -> bool:
        """torch is not installed there (as opposed to installed but failing to import)."""
        return self.torch is None and (self.error is None or "No module named 'torch'" in self.error)

    def backend(self, name: str) -> BackendInfo | None:
        """``None`` when the probe did not say (treat as unknown, not unavailable)."""
        return self.backends.get(name)

    def summary(self) -> str:
        """One line for the form, e.g. ``Python 3.11.7 · torch 2.4.1 · CUDA 12.1 (2 devices)``."""
        if not self.ran:
            return f"cannot run: {self.error or 'unknown error'}"
        parts = [f"Python {self.python_version}" if self.python_version else "Python"]
        if self.torch is None:
            parts.append("torch not installed" if self.torch_missing else f"torch fails to import ({self.error})")
            return " · ".join(parts)
        parts.append(f"torch {self.torch}")
        if self.cuda_available:
            devices = f"{self.device_count} device{'s' if self.device_count != 1 else ''}"
            parts.append(f"CUDA {self.cuda_version or ''} ({devices})".replace("  ", " "))
        else:
            parts.append("CUDA not available")
        return " · ".join(parts)


@dataclass(frozen=True)
class ProbeResult:
    interpreter: InterpreterInfo | None
    """``None`` for a ``--gpus-only`` probe."""
    gpus: GpuReport


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def _integer(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def parse_gpu_report(data: Any) -> GpuReport:
    """The ``gpus`` object of the probe's output as the runner's own ``GpuReport``."""
    data = _mapping(data)
    gpus = []
    for position, row in enumerate(data.get("gpus") or []):
        row = _mapping(row)
        processes = tuple(
            GpuProcess(pid=_integer(proc.get("pid")) or 0, used_memory=_integer(proc.get("used_memory")),
                       name=_text(proc.get("name")))
            for proc in map(_mapping, row.get("processes") or [])
        )
        index = _integer(row.get("index"))
        gpus.append(GpuSnapshot(
            index=position if index is None else index,
            name=_text(row.get("name")),
            uuid=_text(row.get("uuid")),
            memory_used=_integer(row.get("memory_used")),
            memory_total=_integer(row.get("memory_total")),
            utilization=_number(row.get("utilization")),
            power_watts=_number(row.get("power_watts")),
            temperature_c=_number(row.get("temperature_c")),
            sm_clock_mhz=_number(row.get("sm_clock_mhz")),
            processes=processes,
        ))
    available = bool(data.get("available")) and bool(gpus)
    reason = _text(data.get("reason"))
    if not available and reason is None:
        reason = "the probe found no GPU"
    return GpuReport(available=available, reason=reason, driver_version=_text(data.get("driver_version")),
                     cuda_driver_version=_text(data.get("cuda_driver_version")), gpus=tuple(gpus))


def parse_interpreter(data: Any, requested: str | None = None) -> InterpreterInfo | None:
    if not isinstance(data, dict):
        return None
    backends = {}
    for name, entry in _mapping(data.get("backends")).items():
        entry = _mapping(entry)
        backends[name] = BackendInfo(available=bool(entry.get("available")), reason=_text(entry.get("reason")))
    return InterpreterInfo(
        python=_text(data.get("python")) or requested or "",
        ok=bool(data.get("ok")),
        error=_text(data.get("error")),
        python_version=_text(data.get("python_version")),
        torch=_text(data.get("torch")),
        cuda_available=bool(data.get("cuda_available")),
        cuda_version=_text(data.get("cuda_version")),
        device_count=_integer(data.get("device_count")) or 0,
        backends=backends,
    )


def parse_probe_output(text: str, requested: str | None = None) -> ProbeResult:
    """Parse what ``python -m runner probe --json`` printed.

    Args:
        requested: the interpreter that was asked for (used when the output omits it).

    Raises:
        ProbeError: the output holds no JSON object.
    """
    stripped = text.strip()
    # Be forgiving about stray lines printed before the object (e.g. warnings on stdout).
    start = stripped.find("{")
    try:
        data = json.loads(stripped[start:]) if start >= 0 else None
    except json.JSONDecodeError as exc:
        raise ProbeError(f"the probe printed invalid JSON ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(data, dict):
        raise ProbeError("the probe printed no JSON object")
    return ProbeResult(interpreter=parse_interpreter(data.get("interpreter"), requested),
                       gpus=parse_gpu_report(data.get("gpus")))


def unavailable_report(reason: str) -> GpuReport:
    """What to assume when the probe itself failed: no GPU, and why."""
    return GpuReport(available=False, reason=reason)
