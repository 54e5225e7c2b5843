"""NVML, wrapped once: the only module that touches ``pynvml``.

Every call that can fail turns into a value: a missing driver becomes
``GpuReport(available=False, reason=...)``, a metric a GPU does not support
becomes ``None``. Nothing here raises to the caller.

NVML calls can block for tens of milliseconds (and much longer on a wedged GPU),
so they run only on the sampler's own thread or in one-shot CLI commands, never on
the hub's event loop or a GUI thread.

The module under ``pynvml`` is injectable (``Nvml(module=...)``): tests pass a fake
that mirrors the real library's function names and error classes, because there
is no NVIDIA driver on the CI machines.
"""

from __future__ import annotations

import threading
from types import ModuleType
from typing import Any

from runner.sampling.gpu_report import GpuProcess, GpuReport, GpuSnapshot


def _import_pynvml() -> ModuleType | None:
    try:
        import pynvml
    except Exception:  # pragma: no cover - nvidia-ml-py is a dependency
        return None
    return pynvml


def _explain(error: Exception, module: ModuleType) -> str:
    value = getattr(error, "value", None)
    reasons = {
        getattr(module, "NVML_ERROR_LIBRARY_NOT_FOUND", object()): "NVIDIA driver not installed: libnvidia-ml.so not found",
        getattr(module, "NVML_ERROR_DRIVER_NOT_LOADED", object()): "NVIDIA driver not loaded",
        getattr(module, "NVML_ERROR_NO_PERMISSION", object()): "no permission to query the NVIDIA driver",
        getattr(module, "NVML_ERROR_LIB_RM_VERSION_MISMATCH", object()): "driver/library version mismatch; a reboot usually fixes it",
    }
    return reasons.get(value, f"NVML error: {error}")


def _text(value: Any) -> str | None:
    if value is None:
        return None
    return value.decode() if isinstance(value, bytes) else str(value)


class Nvml:
    """A lazily initialised NVML session. Thread-safe; calls are serialised."""

    def __init__(self, module: ModuleType | None = None):
        self._module = module
        self._lock = threading.Lock()
        self._initialised = False
        self._failure: str | None = None

    def _ensure(self) -> ModuleType | None:
        if self._initialised:
            return self._module
        if self._failure is not None:
            return None
        if self._module is None:
            self._module = _import_pynvml()
            if self._module is None:
                self._failure = "nvidia-ml-py is not installed"
                return None
        try:
            self._module.nvmlInit()
        except Exception as error:  # NVMLError subclasses and OSError from a broken lib
            self._failure = _explain(error, self._module)
            return None
        self._initialised = True
        return self._module

    def _call(self, name: str, *args: Any) -> Any:
        try:
            return getattr(self._module, name)(*args)
        except Exception:
            return None

    def report(self, with_processes: bool = True, with_names: bool = True) -> GpuReport:
        """A full snapshot of every GPU; never raises. ``with_names``: ask NVML each process's name
        (``nvmlSystemGetProcessName``; None where it cannot tell, see ``process_names``); the
        sampler, which only matches pids, does not."""
        with self._lock:
            module = self._ensure()
            if module is None:
                return GpuReport(available=False, reason=self._failure)
            count = self._call("nvmlDeviceGetCount")
            if not count:
                return GpuReport(available=False, reason="the NVIDIA driver reports 0 GPUs",
                                 driver_version=_text(self._call("nvmlSystemGetDriverVersion")))
            gpus = tuple(self._snapshot(index, with_processes, with_names) for index in range(count))
            cuda = self._call("nvmlSystemGetCudaDriverVersion")
            return GpuReport(
                available=True,
                driver_version=_text(self._call("nvmlSystemGetDriverVersion")),
                cuda_driver_version=f"{cuda // 1000}.{cuda % 1000 // 10}" if isinstance(cuda, int) else None,
                gpus=gpus,
            )

    def _snapshot(self, index: int, with_processes: bool, with_names: bool = False) -> GpuSnapshot:
        module = self._module
        handle = self._call("nvmlDeviceGetHandleByIndex", index)
        if handle is None:
            return GpuSnapshot(index, None, None, None, None, None, None, None, None)
        memory = self._call("nvmlDeviceGetMemoryInfo", handle)
        rates = self._call("nvmlDeviceGetUtilizationRates", handle)
        power = self._call("nvmlDeviceGetPowerUsage", handle)
        temperature = self._call("nvmlDeviceGetTemperature", handle, getattr(module, "NVML_TEMPERATURE_GPU", 0))
        clock = self._call("nvmlDeviceGetClockInfo", handle, getattr(module, "NVML_CLOCK_SM", 1))
        processes: tuple[GpuProcess, ...] = ()
        if with_processes:
            found: dict[int, GpuProcess] = {}
            for getter in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses"):
                for proc in self._call(getter, handle) or ():
                    used = getattr(proc, "usedGpuMemory", None)
                    # NVML reports "not available" as a huge sentinel value.
                    if used is not None and used >= 2**63:
                        used = None
                    if proc.pid not in found:
                        name = _text(self._call("nvmlSystemGetProcessName", proc.pid)) if with_names else None
                        found[proc.pid] = GpuProcess(pid=proc.pid, used_memory=used, name=name or None)
            processes = tuple(found.values())
        return GpuSnapshot(
            index=index,
            name=_text(self._call("nvmlDeviceGetName", handle)),
            uuid=_text(self._call("nvmlDeviceGetUUID", handle)),
            memory_used=getattr(memory, "used", None),
            memory_total=getattr(memory, "total", None),
            utilization=float(rates.gpu) if rates is not None else None,
            power_watts=power / 1000.0 if isinstance(power, (int, float)) else None,
            temperature_c=float(temperature) if isinstance(temperature, (int, float)) else None,
            sm_clock_mhz=float(clock) if isinstance(clock, (int, float)) else None,
            processes=processes,
        )

    def close(self) -> None:
        with self._lock:
            if self._initialised:
                self._call("nvmlShutdown")
                self._initialised = False


_shared: Nvml | None = None
_shared_lock = threading.Lock()


def shared_nvml() -> Nvml:
    """The process-wide NVML session (initialising NVML is slow; do it once)."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = Nvml()
        return _shared
