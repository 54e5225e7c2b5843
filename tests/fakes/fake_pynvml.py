"""A stand-in for the ``pynvml`` module (nvidia-ml-py) on machines without an NVIDIA driver.

It mirrors the real module's API as Rankwatch uses it: the same function names and
signatures, the same ``NVMLError`` class with ``.value``, the same constants and the
same result shapes (``c_nvmlMemory_t``-like objects with ``total``/``used``/``free``,
``c_nvmlUtilization_t``-like with ``gpu``/``memory``, process objects with ``pid``
and ``usedGpuMemory``; power in milliwatts; ``nvmlSystemGetCudaDriverVersion`` as
an int such as 12040). Each GPU is a dict; set a key to an ``NVMLError`` to make that
call fail for that GPU, as a real GPU that does not support a query does.
"""

from __future__ import annotations

from types import SimpleNamespace

NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18
NVML_TEMPERATURE_GPU = 0
NVML_CLOCK_SM = 1
NVML_VALUE_NOT_AVAILABLE_ulonglong = 2**64 - 1


class NVMLError(Exception):
    def __init__(self, value: int):
        super().__init__(value)
        self.value = value

    def __str__(self) -> str:
        return {12: "NVML Shared Library Not Found", 9: "Driver Not Loaded", 3: "Not Supported"}.get(
            self.value, f"NVML error {self.value}")


class FakeNvml:
    """Build one with a list of GPU dicts; use ``.module`` where pynvml is expected."""

    def __init__(self, gpus: list[dict] | None = None, init_error: int | None = None,
                 driver: str = "550.54.15", cuda: int = 12040):
        self.gpus = gpus or []
        self.init_error = init_error
        self.driver = driver
        self.cuda = cuda
        self.initialised = False
        self.calls: list[str] = []
        self.module = self._build_module()

    def _gpu(self, handle) -> dict:
        return self.gpus[handle]

    def _value(self, handle, key):
        value = self._gpu(handle)[key]
        if isinstance(value, NVMLError):
            raise value
        return value

    def _build_module(self) -> SimpleNamespace:
        fake = self

        def record(name):
            def decorator(function):
                def wrapper(*args):
                    fake.calls.append(name)
                    if name != "nvmlInit" and not fake.initialised:
                        raise NVMLError(1)  # NVML_ERROR_UNINITIALIZED
                    return function(*args)
                return wrapper
            return decorator

        @record("nvmlInit")
        def nvmlInit():
            if fake.init_error is not None:
                raise NVMLError(fake.init_error)
            fake.initialised = True

        @record("nvmlShutdown")
        def nvmlShutdown():
            fake.initialised = False

        @record("nvmlDeviceGetCount")
        def nvmlDeviceGetCount():
            return len(fake.gpus)

        @record("nvmlDeviceGetHandleByIndex")
        def nvmlDeviceGetHandleByIndex(index):
            if not 0 <= index < len(fake.gpus):
                raise NVMLError(2)  # INVALID_ARGUMENT
            return index

        @record("nvmlDeviceGetName")
        def nvmlDeviceGetName(handle):
            return fake._value(handle, "name")

        @record("nvmlDeviceGetUUID")
        def nvmlDeviceGetUUID(handle):
            return f"GPU-{handle:08d}-fake"

        @record("nvmlDeviceGetMemoryInfo")
        def nvmlDeviceGetMemoryInfo(handle):
            used, total = fake._value(handle, "memory")
            return SimpleNamespace(total=total, used=used, free=total - used)

        @record("nvmlDeviceGetUtilizationRates")
        def nvmlDeviceGetUtilizationRates(handle):
            return SimpleNamespace(gpu=fake._value(handle, "util"), memory=0)

        @record("nvmlDeviceGetPowerUsage")
        def nvmlDeviceGetPowerUsage(handle):
            return fake._value(handle, "power_mw")

        @record("nvmlDeviceGetTemperature")
        def nvmlDeviceGetTemperature(handle, sensor):
            assert sensor == NVML_TEMPERATURE_GPU
            return fake._value(handle, "temperature")

        @record("nvmlDeviceGetClockInfo")
        def nvmlDeviceGetClockInfo(handle, clock):
            assert clock == NVML_CLOCK_SM
            return fake._value(handle, "sm_clock")

        @record("nvmlDeviceGetComputeRunningProcesses")
        def nvmlDeviceGetComputeRunningProcesses(handle):
            return [SimpleNamespace(pid=pid, usedGpuMemory=memory) for pid, memory in fake._value(handle, "processes")]

        @record("nvmlDeviceGetGraphicsRunningProcesses")
        def nvmlDeviceGetGraphicsRunningProcesses(handle):
            return []

        @record("nvmlSystemGetDriverVersion")
        def nvmlSystemGetDriverVersion():
            return fake.driver

        @record("nvmlSystemGetCudaDriverVersion")
        def nvmlSystemGetCudaDriverVersion():
            return fake.cuda

        namespace = {name: value for name, value in locals().items() if name.startswith("nvml")}
        constants = {name: value for name, value in globals().items() if name.startswith("NVML_")}
        return SimpleNamespace(NVMLError=NVMLError, **namespace, **constants)


def a100(util: float = 50.0, used_gib: int = 10, processes=()) -> dict:
    return {"name": "NVIDIA A100-SXM4-40GB", "memory": (used_gib << 30, 40 << 30), "util": util,
            "power_mw": 250_000, "temperature": 61, "sm_clock": 1410, "processes": list(processes)}
