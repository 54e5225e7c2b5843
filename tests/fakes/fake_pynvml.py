"""A stand-in for the ``pynvml`` module (nvidia-ml-py) on machines without an NVIDIA driver.

It mirrors the real module (nvidia-ml-py 13.x) as Rankwatch uses it: the same function
names and signatures, the same ``NVMLError`` whose constructor gives the subclass of its
code (``NVMLError(3)`` is an ``NVMLError_NotSupported``, ``str()`` is "Not Supported"), the
same constants and the same result shapes: handles are opaque objects, not indices;
``nvmlDeviceGetMemoryInfo`` gives ``total``/``free``/``used`` (and ``version``/``reserved``
when a version is asked for); ``nvmlDeviceGetUtilizationRates`` ``gpu``/``memory``; process
objects ``pid``, ``usedGpuMemory`` (``None`` where NVML says "not available", as pynvml
turns its sentinel into ``None``), ``gpuInstanceId``, ``computeInstanceId``; power in
milliwatts; names, UUIDs and the driver version as ``str``;
``nvmlSystemGetCudaDriverVersion`` as an int such as 13000 (CUDA 13.0).

Each GPU is a dict; set a key to an ``NVMLError`` to make that call fail for that GPU, as a
real GPU that does not support a query does. ``h200_idle``/``h200_training`` and
``gpu_reference_nvml`` are the one H200 that Rankwatch was run on (../shared/gpu-reference,
copied to ``tests/fakes/gpu_reference``): the readings it printed there come back from
the fake.
"""

from __future__ import annotations

import functools
import uuid
from types import SimpleNamespace
from typing import ClassVar

NVML_SUCCESS = 0
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_ALREADY_INITIALIZED = 5
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_INSUFFICIENT_SIZE = 7
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_TIMEOUT = 10
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18
NVML_ERROR_UNKNOWN = 999
NVML_TEMPERATURE_GPU = 0
NVML_CLOCK_GRAPHICS = 0
NVML_CLOCK_SM = 1
NVML_CLOCK_MEM = 2
NVML_VALUE_NOT_AVAILABLE_ulonglong = 2**64 - 1
"""The real module's is ``c_ulonglong(-1)``; its process getters turn it into ``None``."""
NVML_VALUE_NOT_AVAILABLE_uint = 2**32 - 1
"""``gpuInstanceId`` / ``computeInstanceId`` of a process on a GPU without MIG."""

_ERROR_WORDS = {
    NVML_ERROR_UNINITIALIZED: "Uninitialized",
    NVML_ERROR_INVALID_ARGUMENT: "Invalid Argument",
    NVML_ERROR_NOT_SUPPORTED: "Not Supported",
    NVML_ERROR_NO_PERMISSION: "Insufficient Permissions",
    NVML_ERROR_ALREADY_INITIALIZED: "Already Initialized",
    NVML_ERROR_NOT_FOUND: "Not Found",
    NVML_ERROR_INSUFFICIENT_SIZE: "Insufficient Size",
    NVML_ERROR_DRIVER_NOT_LOADED: "Driver Not Loaded",
    NVML_ERROR_TIMEOUT: "Timeout",
    NVML_ERROR_LIBRARY_NOT_FOUND: "NVML Shared Library Not Found",
    NVML_ERROR_FUNCTION_NOT_FOUND: "Function Not Found",
    NVML_ERROR_GPU_IS_LOST: "GPU is lost",
    NVML_ERROR_LIB_RM_VERSION_MISMATCH: "RM has detected an NVML/RM version mismatch.",
    NVML_ERROR_UNKNOWN: "Unknown Error",
}


class NVMLError(Exception):
    """As pynvml's: ``NVMLError(code)`` is an instance of that code's subclass, with ``.value``;
    a subclass needs no code (``NVMLError_NotFound()``)."""

    _code: ClassVar[int | None] = None
    _value_class: ClassVar[dict[int, type[NVMLError]]] = {}

    def __new__(cls, value: int | None = None):
        if value is None:
            value = cls._code
        if cls is NVMLError:
            cls = NVMLError._value_class.get(value, cls)
        error = Exception.__new__(cls)
        error.value = value
        return error

    def __init__(self, value: int | None = None):
        super().__init__(self.value)

    def __str__(self) -> str:
        return _ERROR_WORDS.get(self.value, f"NVML Error with code {self.value}")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, NVMLError) and self.value == other.value

    __hash__ = None  # type: ignore[assignment]  # as pynvml's: __eq__ without __hash__


def _error_classes() -> dict[str, type[NVMLError]]:
    """``NVMLError_NotSupported`` and the rest, named as pynvml names them."""
    classes = {}
    for name, value in list(globals().items()):
        if name.startswith("NVML_ERROR_"):
            words = name.removeprefix("NVML_ERROR_").title().replace("_", "")
            error_class = type(f"NVMLError_{words}", (NVMLError,), {"_code": value})
            NVMLError._value_class[value] = error_class
            classes[error_class.__name__] = error_class
    return classes


globals().update(_error_classes())


class c_nvmlDevice_t:  # noqa: N801 (pynvml's name)
    """An opaque handle, as the real one (a ctypes pointer) is: code must not treat it as an index."""

    def __init__(self, index: int):
        self._index = index

    def __repr__(self) -> str:
        return f"<c_nvmlDevice_t {self._index}>"


def fake_uuid(index: int) -> str:
    """A UUID in NVML's format, ``GPU-`` and 8-4-4-4-12 hex digits."""
    return f"GPU-{uuid.UUID(int=0xFA4E << 96 | index)}"


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

    def _gpu(self, handle: c_nvmlDevice_t) -> dict:
        if not isinstance(handle, c_nvmlDevice_t):
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return self.gpus[handle._index]

    def _value(self, handle, key, default=None):
        gpu = self._gpu(handle)
        value = gpu[key] if default is None else gpu.get(key, default)
        if isinstance(value, NVMLError):
            raise value
        return value

    def _processes(self, handle) -> list[SimpleNamespace]:
        """pynvml's ``nvmlFriendlyObject``s of ``c_nvmlProcessInfo_v3_t``."""
        found = []
        for pid, memory, *_name in self._value(handle, "processes"):
            found.append(SimpleNamespace(
                pid=pid, usedGpuMemory=None if memory == NVML_VALUE_NOT_AVAILABLE_ulonglong else memory,
                gpuInstanceId=NVML_VALUE_NOT_AVAILABLE_uint, computeInstanceId=NVML_VALUE_NOT_AVAILABLE_uint))
        return found

    def _build_module(self) -> SimpleNamespace:
        fake = self

        def record(name):
            def decorator(function):
                @functools.wraps(function)
                def wrapper(*args, **kwargs):
                    fake.calls.append(name)
                    if name != "nvmlInit" and not fake.initialised:
                        raise NVMLError(NVML_ERROR_UNINITIALIZED)
                    return function(*args, **kwargs)
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
                raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
            return c_nvmlDevice_t(index)

        @record("nvmlDeviceGetName")
        def nvmlDeviceGetName(handle):
            return fake._value(handle, "name")

        @record("nvmlDeviceGetUUID")
        def nvmlDeviceGetUUID(handle):
            return fake._value(handle, "uuid", fake_uuid(handle._index))

        @record("nvmlDeviceGetMemoryInfo")
        def nvmlDeviceGetMemoryInfo(handle, version=None):
            used, total = fake._value(handle, "memory")
            if not version:
                return SimpleNamespace(total=total, free=total - used, used=used)
            return SimpleNamespace(version=version, total=total, reserved=0, free=total - used, used=used)

        @record("nvmlDeviceGetUtilizationRates")
        def nvmlDeviceGetUtilizationRates(handle):
            return SimpleNamespace(gpu=fake._value(handle, "util"), memory=fake._value(handle, "memory_util", 0))

        @record("nvmlDeviceGetPowerUsage")
        def nvmlDeviceGetPowerUsage(handle):
            return fake._value(handle, "power_mw")

        @record("nvmlDeviceGetTemperature")
        def nvmlDeviceGetTemperature(handle, sensor):
            assert sensor == NVML_TEMPERATURE_GPU
            return fake._value(handle, "temperature")

        @record("nvmlDeviceGetClockInfo")
        def nvmlDeviceGetClockInfo(handle, type):  # pynvml's parameter name
            assert type == NVML_CLOCK_SM
            return fake._value(handle, "sm_clock")

        @record("nvmlDeviceGetComputeRunningProcesses")
        def nvmlDeviceGetComputeRunningProcesses(handle):
            return fake._processes(handle)

        @record("nvmlDeviceGetGraphicsRunningProcesses")
        def nvmlDeviceGetGraphicsRunningProcesses(handle):
            return []

        @record("nvmlSystemGetProcessName")
        def nvmlSystemGetProcessName(pid):
            """A process's name: the third item of its ``(pid, memory, name)`` entry, else Not Found.
            What the real one answers in gpu-reference's VM is not known: Rankwatch did not ask it there
            (``gpus_during.json``'s null name); where it gives none, ``runner.sampling.process_names`` reads
            the name from /proc."""
            for gpu in fake.gpus:
                processes = gpu.get("processes")
                for process_pid, _memory, *name in processes if isinstance(processes, list) else ():
                    if process_pid == pid and name:
                        return name[0]
            raise NVMLError(NVML_ERROR_NOT_FOUND)

        @record("nvmlSystemGetDriverVersion")
        def nvmlSystemGetDriverVersion():
            return fake.driver

        @record("nvmlSystemGetCudaDriverVersion")
        def nvmlSystemGetCudaDriverVersion():
            return fake.cuda

        namespace = {name: value for name, value in locals().items() if name.startswith("nvml")}
        constants = {name: value for name, value in globals().items()
                     if name.startswith(("NVML_", "NVMLError_"))}
        return SimpleNamespace(NVMLError=NVMLError, c_nvmlDevice_t=c_nvmlDevice_t, **namespace, **constants)


def a100(util: float = 50.0, used_gib: int = 10, processes=()) -> dict:
    return {"name": "NVIDIA A100-SXM4-40GB", "memory": (used_gib << 30, 40 << 30), "util": util,
            "power_mw": 250_000, "temperature": 61, "sm_clock": 1410, "processes": list(processes)}


H200_DRIVER = "580.159.04"
H200_CUDA = 13000
"""CUDA 13.0, as ``nvmlSystemGetCudaDriverVersion`` says it (1000 * major + 10 * minor)."""
H200_UUID = "GPU-697eaabb-1770-71c5-54ee-1d10ad7a70cb"
H200_MEMORY_TOTAL = 150_754_820_096
"""140.4 GiB: what NVML counts, more than the 139.8 GiB torch says it can use."""


def h200_idle(uuid: str = H200_UUID) -> dict:
    """The H200 of gpu-reference/probe.json, idle: 0.6 GiB used by the driver, 79 W, 35 C, SM at 345 MHz
    (a second one on a machine of two needs its own ``uuid``: ``fake_uuid(1)``)."""
    return {"name": "NVIDIA H200", "uuid": uuid, "memory": (644_939_776, H200_MEMORY_TOTAL), "util": 0,
            "power_mw": 79_014, "temperature": 35, "sm_clock": 345, "processes": []}


def h200_training(pid: int = 1573) -> dict:
    """The same H200 while one nccl rank trained (gpu-reference/gpus_during.json): 51 %, 342 W, 42 C,
    SM at 1980 MHz, the rank's process (its pid, 3722 MiB, no name known to Rankwatch)."""
    return {"name": "NVIDIA H200", "uuid": H200_UUID, "memory": (4_556_980_224, H200_MEMORY_TOTAL), "util": 51,
            "power_mw": 341_512, "temperature": 42, "sm_clock": 1980, "processes": [(pid, 3_902_799_872)]}


def gpu_reference_nvml(*gpus: dict) -> FakeNvml:
    """NVML on the gpu-reference machine (driver 580.159.04, CUDA 13.0): its one H200, idle,
    unless other GPU dicts are given (``h200_training()``, or two H200s for a two-GPU machine)."""
    return FakeNvml(list(gpus) or [h200_idle()], driver=H200_DRIVER, cuda=H200_CUDA)
