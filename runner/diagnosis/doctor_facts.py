"""What the doctor found, typed once for both ``rankwatch doctor`` and the GUI's Doctor panel.

``runner.diagnosis.doctor`` gathers these facts and judges them; ``to_json`` is the report's
``--json`` (its shape is in that module's docstring). The GUI reads the same JSON back with
``from_json`` (through ``gui.gateway.runner_rules``), leniently: a part or a value that is
missing or of the wrong type is unknown (None), never an exception. This module holds only the
types, so the GUI can import it without the doctor's NVML and probe machinery.

The interpreter's answer (``runner.probe.probe_interpreter``) is written by another Python, so
its keys are kept as it wrote them: the ones read here typed, the others in ``extra``, and
``to_json`` writes them back in the order they came.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from rankwatch.protocol import as_int
from runner.runstate.messages import JsonObject
from runner.sampling.gpu_report import GpuSnapshot

__all__ = ["BackendFacts", "DoctorFacts", "DoctorGpu", "GpuFacts", "GpuUser", "InterpreterFacts", "PortFacts",
           "ProbeBackend", "PythonEnvironment", "RunnerFacts", "SystemFacts", "ThreadFacts", "VisibleDeviceFacts",
           "cudnn_text", "object_of"]


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None


def object_of(data: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    """``data[key]`` when it is a JSON object, else an empty one."""
    value = data.get(key)
    return value if isinstance(value, Mapping) else {}


def _kept_as_written(data: Mapping[str, Any], known: tuple[str, ...]) -> dict[str, Any]:
    """``extra`` (the keys this version does not read) and ``keys`` (the order they came in) of a
    part read with ``from_json``, so ``to_json`` writes it back as it was written."""
    return {"extra": {key: value for key, value in data.items() if key not in known}, "keys": tuple(data)}


def _ordered(values: JsonObject, extra: Mapping[str, Any], keys: tuple[str, ...]) -> JsonObject:
    """``values`` and ``extra`` as one object: in the order ``keys`` (as read) names them, else in theirs."""
    if not keys:
        return {**values, **extra}
    return {key: values[key] if key in values else extra[key] for key in keys if key in values or key in extra}


@dataclass(frozen=True)
class SystemFacts:
    os: str | None
    release: str | None
    distribution: str | None
    machine: str | None
    hostname: str | None
    cpus: int | None
    usable_cpus: int | None
    physical_cores: int | None
    memory_total: int | None
    memory_available: int | None

    def to_json(self) -> JsonObject:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SystemFacts:
        return cls(os=_text(data.get("os")), release=_text(data.get("release")),
                   distribution=_text(data.get("distribution")), machine=_text(data.get("machine")),
                   hostname=_text(data.get("hostname")), cpus=as_int(data.get("cpus")),
                   usable_cpus=as_int(data.get("usable_cpus")), physical_cores=as_int(data.get("physical_cores")),
                   memory_total=as_int(data.get("memory_total")), memory_available=as_int(data.get("memory_available")))


@dataclass(frozen=True)
class RunnerFacts:
    """The Python that runs Rankwatch itself."""

    python: str | None
    python_version: str | None

    def to_json(self) -> JsonObject:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RunnerFacts:
        return cls(python=_text(data.get("python")), python_version=_text(data.get("python_version")))


@dataclass(frozen=True)
class ProbeBackend:
    """A ``torch.distributed`` backend as the probe found it: usable, or why not."""

    available: bool
    reason: str | None
    extra: JsonObject = field(default_factory=dict, compare=False, repr=False)
    keys: tuple[str, ...] = field(default=(), compare=False, repr=False)

    def to_json(self) -> JsonObject:
        return _ordered({"available": self.available, "reason": self.reason}, self.extra, self.keys)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ProbeBackend:
        return cls(available=bool(data.get("available")), reason=_text(data.get("reason")),
                   **_kept_as_written(data, ("available", "reason")))


@dataclass(frozen=True)
class PythonEnvironment:
    """Where the interpreter lives: a virtual environment, a conda one, or a system-wide Python."""

    prefix: str | None = None
    base_prefix: str | None = None
    virtualenv: bool = False
    conda: bool = False
    conda_env: str | None = None
    extra: JsonObject = field(default_factory=dict, compare=False, repr=False)
    keys: tuple[str, ...] = field(default=(), compare=False, repr=False)

    KNOWN = ("prefix", "base_prefix", "virtualenv", "conda", "conda_env")

    def to_json(self) -> JsonObject:
        return _ordered({"prefix": self.prefix, "base_prefix": self.base_prefix, "virtualenv": self.virtualenv,
                         "conda": self.conda, "conda_env": self.conda_env}, self.extra, self.keys)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PythonEnvironment:
        return cls(prefix=_text(data.get("prefix")), base_prefix=_text(data.get("base_prefix")),
                   virtualenv=bool(data.get("virtualenv")), conda=bool(data.get("conda")),
                   conda_env=_text(data.get("conda_env")),
                   **_kept_as_written(data, cls.KNOWN))


def cudnn_text(version: int | None) -> str | None:
    """torch reports cuDNN as one number: 8907 is 8.9.7, 90100 is 9.1.0 (cuDNN 9 changed the scheme)."""
    if not isinstance(version, int) or isinstance(version, bool) or version <= 0:
        return None
    if version >= 90000:
        return f"{version // 10000}.{version % 10000 // 100}.{version % 100}"
    return f"{version // 1000}.{version % 1000 // 100}.{version % 100}"


@dataclass(frozen=True)
class InterpreterFacts:
    """The chosen interpreter, as ``runner.probe.probe_interpreter`` found it (it runs there)."""

    ok: bool
    """It imports torch and answered."""
    python: str | None = None
    python_version: str | None = None
    torch: str | None = None
    """torch's version; None: not importable."""
    error: str | None = None
    """Why it cannot run torch, when not ``ok``."""
    cuda_available: bool = False
    cuda_version: str | None = None
    """The CUDA torch was built for; None: a CPU-only build."""
    cuda_error: str | None = None
    device_count: int | None = None
    nccl_version: str | None = None
    cudnn_version: int | None = None
    """As torch reports it: one number (``cudnn_text`` words it)."""
    backends: dict[str, ProbeBackend] = field(default_factory=dict)
    environment: PythonEnvironment | None = None
    extra: JsonObject = field(default_factory=dict, compare=False, repr=False)
    """The answer's other keys (``torch_path``, ``cuda_built``...), kept as written."""
    keys: tuple[str, ...] = field(default=(), compare=False, repr=False)
    """The answer's keys in the order the interpreter wrote them (``to_json`` keeps it)."""

    KNOWN = ("ok", "python", "python_version", "torch", "error", "cuda_available", "cuda_version", "cuda_error",
             "device_count", "nccl_version", "cudnn_version", "backends", "environment")

    @property
    def cudnn(self) -> str | None:
        """The cuDNN version in words (``9.1.0``); None: none reported."""
        return cudnn_text(self.cudnn_version)

    def to_json(self) -> JsonObject:
        values: JsonObject = {
            "ok": self.ok, "python": self.python, "python_version": self.python_version, "torch": self.torch,
            "error": self.error, "cuda_available": self.cuda_available, "cuda_version": self.cuda_version,
            "cuda_error": self.cuda_error, "device_count": self.device_count, "nccl_version": self.nccl_version,
            "cudnn_version": self.cudnn_version,
            "backends": {name: backend.to_json() for name, backend in self.backends.items()},
            "environment": None if self.environment is None else self.environment.to_json()}
        return _ordered(values, self.extra, self.keys)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> InterpreterFacts:
        environment = data.get("environment")
        return cls(ok=bool(data.get("ok")), python=_text(data.get("python")),
                   python_version=_text(data.get("python_version")), torch=_text(data.get("torch")),
                   error=_text(data.get("error")), cuda_available=bool(data.get("cuda_available")),
                   cuda_version=_text(data.get("cuda_version")), cuda_error=_text(data.get("cuda_error")),
                   device_count=as_int(data.get("device_count")), nccl_version=_text(data.get("nccl_version")),
                   cudnn_version=as_int(data.get("cudnn_version")),
                   backends={str(name): ProbeBackend.from_json(backend)
                             for name, backend in object_of(data, "backends").items() if isinstance(backend, Mapping)},
                   environment=PythonEnvironment.from_json(environment) if isinstance(environment, Mapping) else None,
                   **_kept_as_written(data, cls.KNOWN))


@dataclass(frozen=True)
class GpuUser:
    """A process on a GPU (``GpuProcess``, as the report holds it)."""

    pid: int | None
    used_memory: int | None
    extra: JsonObject = field(default_factory=dict, compare=False, repr=False)
    keys: tuple[str, ...] = field(default=(), compare=False, repr=False)

    def to_json(self) -> JsonObject:
        return _ordered({"pid": self.pid, "used_memory": self.used_memory}, self.extra, self.keys)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> GpuUser:
        return cls(pid=as_int(data.get("pid")), used_memory=as_int(data.get("used_memory")),
                   **_kept_as_written(data, ("pid", "used_memory")))


@dataclass(frozen=True)
class DoctorGpu:
    """A GPU and who uses it, as the report holds it (``GpuSnapshot.to_json``: NVML's other readings
    travel in ``extra``)."""

    index: int | None
    name: str | None = None
    memory_used: int | None = None
    memory_total: int | None = None
    processes: tuple[GpuUser, ...] = ()
    extra: JsonObject = field(default_factory=dict, compare=False, repr=False)
    keys: tuple[str, ...] = field(default=(), compare=False, repr=False)

    KNOWN = ("index", "name", "memory_used", "memory_total", "processes")

    def to_json(self) -> JsonObject:
        return _ordered({"index": self.index, "name": self.name, "memory_used": self.memory_used,
                         "memory_total": self.memory_total, "processes": [user.to_json() for user in self.processes]},
                        self.extra, self.keys)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> DoctorGpu:
        processes = data.get("processes")
        return cls(index=as_int(data.get("index")), name=_text(data.get("name")),
                   memory_used=as_int(data.get("memory_used")), memory_total=as_int(data.get("memory_total")),
                   processes=tuple(GpuUser.from_json(item) for item in (processes if isinstance(processes, list) else [])
                                   if isinstance(item, Mapping)),
                   **_kept_as_written(data, cls.KNOWN))

    @classmethod
    def of(cls, snapshot: GpuSnapshot) -> DoctorGpu:
        """A GPU as the sampler read it."""
        return cls.from_json(snapshot.to_json())


@dataclass(frozen=True)
class GpuFacts:
    available: bool
    reason: str | None
    driver_version: str | None
    cuda_driver_version: str | None
    gpus: tuple[DoctorGpu, ...]

    def to_json(self) -> JsonObject:
        return {"available": self.available, "reason": self.reason, "driver_version": self.driver_version,
                "cuda_driver_version": self.cuda_driver_version, "gpus": [gpu.to_json() for gpu in self.gpus]}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> GpuFacts:
        gpus = data.get("gpus")
        return cls(available=bool(data.get("available")), reason=_text(data.get("reason")),
                   driver_version=_text(data.get("driver_version")),
                   cuda_driver_version=_text(data.get("cuda_driver_version")),
                   gpus=tuple(DoctorGpu.from_json(gpu) for gpu in (gpus if isinstance(gpus, list) else [])
                              if isinstance(gpu, Mapping)))


@dataclass(frozen=True)
class BackendFacts:
    usable: list[str]
    unusable: dict[str, str | None]
    """backend -> why it cannot be used."""

    def to_json(self) -> JsonObject:
        return {"usable": self.usable, "unusable": self.unusable}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> BackendFacts:
        usable = data.get("usable")
        return cls(usable=[str(name) for name in usable] if isinstance(usable, list) else [],
                   unusable={str(name): _text(why) for name, why in object_of(data, "unusable").items()})

    @classmethod
    def of(cls, interpreter: InterpreterFacts) -> BackendFacts:
        """The probe's backends, split into usable and not (with why)."""
        backends = interpreter.backends
        return cls(usable=[name for name, backend in backends.items() if backend.available],
                   unusable={name: backend.reason for name, backend in backends.items() if not backend.available})


@dataclass(frozen=True)
class PortFacts:
    port: int | None
    free: bool
    holder: str | None
    """Who holds it, when it is taken."""

    def to_json(self) -> JsonObject:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PortFacts:
        return cls(port=as_int(data.get("port")), free=bool(data.get("free")), holder=_text(data.get("holder")))


@dataclass
class ThreadFacts:
    omp_num_threads: str | None
    """``OMP_NUM_THREADS`` as this shell sets it."""
    processes: int | None
    usable_cpus: int | None
    rankwatch_sets: int | None
    threads_total: int | None = None
    """OMP threads times processes, once ``judge`` read a number in ``omp_num_threads``."""

    def to_json(self) -> JsonObject:
        data: JsonObject = {"omp_num_threads": self.omp_num_threads, "processes": self.processes,
                            "usable_cpus": self.usable_cpus, "rankwatch_sets": self.rankwatch_sets}
        if self.threads_total is not None:
            data["threads_total"] = self.threads_total
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ThreadFacts:
        return cls(omp_num_threads=_text(data.get("omp_num_threads")), processes=as_int(data.get("processes")),
                   usable_cpus=as_int(data.get("usable_cpus")), rankwatch_sets=as_int(data.get("rankwatch_sets")),
                   threads_total=as_int(data.get("threads_total")))


@dataclass(frozen=True)
class VisibleDeviceFacts:
    environment: str | None
    """``CUDA_VISIBLE_DEVICES`` as this shell sets it."""
    picked: str | list[int] | None
    """``all``, ``cpu`` or GPU indices (``parse_gpus``)."""
    rankwatch_sets: str | None

    def to_json(self) -> JsonObject:
        return {"environment": self.environment, "picked": self.picked, "rankwatch_sets": self.rankwatch_sets}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> VisibleDeviceFacts:
        picked = data.get("picked")
        return cls(environment=_text(data.get("environment")),
                   picked=[index for index in picked if type(index) is int] if isinstance(picked, list)
                   else _text(picked),
                   rankwatch_sets=_text(data.get("rankwatch_sets")))


@dataclass
class DoctorFacts:
    """Everything the doctor gathered, before it is judged."""

    interpreter: InterpreterFacts
    gpus: GpuFacts
    backends: BackendFacts
    port: PortFacts
    threads: ThreadFacts
    cuda_visible_devices: VisibleDeviceFacts
    system: SystemFacts | None = None
    runner: RunnerFacts | None = None

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> DoctorFacts:
        """Facts as a report holds them (the judged parts; ``system`` and ``runner`` when present);
        a judged part that is missing reads as unknown."""
        system, runner = data.get("system"), data.get("runner")
        return cls(interpreter=InterpreterFacts.from_json(object_of(data, "interpreter")),
                   gpus=GpuFacts.from_json(object_of(data, "gpus")),
                   backends=BackendFacts.from_json(object_of(data, "backends")),
                   port=PortFacts.from_json(object_of(data, "port")),
                   threads=ThreadFacts.from_json(object_of(data, "threads")),
                   cuda_visible_devices=VisibleDeviceFacts.from_json(object_of(data, "cuda_visible_devices")),
                   system=SystemFacts.from_json(system) if isinstance(system, Mapping) else None,
                   runner=RunnerFacts.from_json(runner) if isinstance(runner, Mapping) else None)

    def to_json(self) -> JsonObject:
        data: JsonObject = {}
        if self.system is not None:
            data["system"] = self.system.to_json()
        if self.runner is not None:
            data["runner"] = self.runner.to_json()
        data.update({"interpreter": self.interpreter.to_json(), "gpus": self.gpus.to_json(),
                     "backends": self.backends.to_json(), "port": self.port.to_json(),
                     "threads": self.threads.to_json(), "cuda_visible_devices": self.cuda_visible_devices.to_json()})
        return data
