"""``rankwatch doctor``: is this machine (and this interpreter) ready for a distributed job?

The environment check the DDP tutorials run before every job (driver, CUDA and
torch versions, the virtual environment, the GPUs and who uses them), plus the
things that make torchrun jobs fail or crawl: a taken port, OMP threads times
processes above the cores, a ``CUDA_VISIBLE_DEVICES`` that disagrees with the
picked GPUs, a backend that is not usable. Facts about torch come from the probe
(``runner.probe``), which runs *in the chosen interpreter*; GPU facts from NVML
in this process. Nothing here raises: a missing driver is a fact, not an error.

The report (``rankwatch doctor --json``)::

    {
      "ok": true,                    # no check failed (warnings allowed)
      "seconds": 2.6,                # how long the checks took
      "system": {"os": "Linux", "release": "6.8.0", "distribution": "Ubuntu 24.04 LTS",
                 "machine": "x86_64", "hostname": "node-a", "cpus": 2, "usable_cpus": 2,
                 "physical_cores": 1, "memory_total": 8589934592, "memory_available": 4294967296},
      "runner": {"python": "/path/.venv/bin/python", "python_version": "3.11.7"},
      "interpreter": {...},          # runner.probe.probe_interpreter's dict (torch, CUDA build,
                                     #   cuDNN, NCCL, backends, environment = venv/conda)
      "gpus": {"available": false, "reason": "...", "driver_version": null,
               "cuda_driver_version": null, "gpus": [GpuSnapshot.to_json() with processes]},
      "backends": {"usable": ["gloo"], "unusable": {"nccl": "why", "mpi": "why"}},
      "port": {"port": 29500, "free": true, "holder": null},
      "threads": {"omp_num_threads": null, "processes": 2, "usable_cpus": 2,
                  "rankwatch_sets": 1, "threads_total": 2},
      "cuda_visible_devices": {"environment": null, "picked": "all" | "cpu" | [0, 1],
                               "rankwatch_sets": "" | "0,1"},
      "checks": [{"key": "driver", "status": "ok"|"info"|"warn"|"fail", "message": "..."}, ...]
                                     # DoctorCheck.to_json() (runner.diagnosis.doctor_checks)
    }
"""

from __future__ import annotations

import os
import platform
import socket
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import psutil

from runner.diagnosis.doctor_checks import CheckStatus, DoctorCheck
from runner.diagnosis.doctor_facts import (
    BackendFacts,
    DoctorFacts,
    DoctorGpu,
    GpuFacts,
    InterpreterFacts,
    PortFacts,
    RunnerFacts,
    SystemFacts,
    ThreadFacts,
    VisibleDeviceFacts,
    cudnn_text,
)
from runner.launch.ports import port_holder, port_is_free
from runner.probe import probe_interpreter
from runner.runstate.messages import JsonObject
from runner.sampling.gpu_report import GpuReport
from runner.sampling.nvml import shared_nvml

__all__ = ["TORCHRUN_DEFAULT_PORT", "DoctorFacts", "DoctorReport", "cudnn_text", "format_report", "gpu_facts", "judge",
           "parse_gpus", "run_doctor", "system_facts"]

TORCHRUN_DEFAULT_PORT = 29500
DOCTOR_PROBE_TIMEOUT_SECONDS = 30


def _check(key: str, status: str, message: str) -> DoctorCheck:
    return DoctorCheck(key, CheckStatus(status), message)


@dataclass
class DoctorReport:
    """``rankwatch doctor``'s answer (module docstring): the facts, the checks, whether the machine is ready."""

    facts: DoctorFacts
    checks: list[DoctorCheck] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        """No check failed (warnings allowed)."""
        return not any(check.status == CheckStatus.FAIL for check in self.checks)

    def to_json(self) -> JsonObject:
        return {**self.facts.to_json(), "checks": [check.to_json() for check in self.checks], "ok": self.ok,
                "seconds": self.seconds}


def system_facts() -> SystemFacts:
    try:
        usable = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        usable = os.cpu_count() or 1
    memory = psutil.virtual_memory()
    return SystemFacts(os=platform.system(), release=platform.release(), distribution=_distribution(),
                       machine=platform.machine(), hostname=socket.gethostname(), cpus=os.cpu_count(),
                       usable_cpus=usable, physical_cores=psutil.cpu_count(logical=False),
                       memory_total=memory.total, memory_available=memory.available)


def _distribution() -> str | None:
    try:
        with open("/etc/os-release", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("PRETTY_NAME="):
                    return line.split("=", 1)[1].strip().strip('"')
    except OSError:
        return None
    return None


def gpu_facts(report: GpuReport) -> GpuFacts:
    return GpuFacts(available=report.available, reason=report.reason, driver_version=report.driver_version,
                    cuda_driver_version=report.cuda_driver_version, gpus=tuple(DoctorGpu.of(gpu) for gpu in report.gpus))


def parse_gpus(value: str | None, count: int) -> str | list[int]:
    """``--gpus``: "all" (the default), "cpu", or a list of indices."""
    if value is None or value.strip() == "all":
        return "all" if count else "cpu"
    if value.strip() == "cpu":
        return "cpu"
    return [int(part) for part in value.split(",") if part.strip()]


def run_doctor(interpreter: str, port: int = TORCHRUN_DEFAULT_PORT, processes: int | None = None,
               gpus: str | None = None, environ: dict[str, str] | None = None) -> DoctorReport:
    """Gather every fact and judge it; the probe (seconds: it imports torch) runs alongside NVML."""
    started = time.monotonic()
    environ = dict(os.environ if environ is None else environ)
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="rankwatch-doctor-probe") as pool:
        probing = pool.submit(probe_interpreter, interpreter, DOCTOR_PROBE_TIMEOUT_SECONDS)
        system = system_facts()
        report = shared_nvml().report(with_processes=True)
        free = port_is_free(port)
        holder = None if free else port_holder(port).describe()
        probe = InterpreterFacts.from_json(probing.result())
    gpu_info = gpu_facts(report)
    cores = system.usable_cpus or 1
    picked = parse_gpus(gpus, len(report.gpus))
    if processes is None:
        processes = len(report.gpus) if picked == "all" else len(picked) if isinstance(picked, list) else cores
    processes = max(1, processes)
    omp_env = environ.get("OMP_NUM_THREADS")
    rankwatch_sets = max(1, cores // processes)
    threads = ThreadFacts(omp_num_threads=omp_env, processes=processes, usable_cpus=cores,
                          rankwatch_sets=rankwatch_sets)
    visible = VisibleDeviceFacts(environment=environ.get("CUDA_VISIBLE_DEVICES"), picked=picked,
                                 rankwatch_sets="" if picked == "cpu" else ",".join(
                                     str(i) for i in (range(len(report.gpus)) if picked == "all" else picked)))
    facts = DoctorFacts(
        system=system,
        runner=RunnerFacts(python=sys.executable, python_version=platform.python_version()),
        interpreter=probe,
        gpus=gpu_info,
        backends=BackendFacts.of(probe),
        port=PortFacts(port=port, free=free, holder=holder),
        threads=threads,
        cuda_visible_devices=visible,
    )
    checks = judge(facts)
    return DoctorReport(facts, checks, seconds=round(time.monotonic() - started, 2))


def judge(facts: DoctorFacts) -> list[DoctorCheck]:
    """The verdicts, in the order a person reads them; the threads check adds ``threads_total`` to the facts."""
    checks = []
    gpus, probe = facts.gpus, facts.interpreter
    if gpus.available:
        checks.append(_check("driver", "ok", f"NVIDIA driver {gpus.driver_version or '?'} "
                                             f"(supports CUDA {gpus.cuda_driver_version or '?'}), "
                                             f"{len(gpus.gpus)} GPU(s)"))
    else:
        checks.append(_check("driver", "warn", f"no NVIDIA driver ({gpus.reason or 'NVML not available'}): "
                                               "jobs run in CPU mode with gloo"))
    checks += _interpreter_checks(probe, gpus)
    usable, unusable = facts.backends.usable, facts.backends.unusable
    if probe.ok:
        status = "ok" if usable else "fail"
        text = f"usable backends: {', '.join(usable) or 'none'}"
        if unusable:
            text += "; not usable: " + "; ".join(f"{name}: {why}" for name, why in unusable.items())
        checks.append(_check("backends", status, text))
    for gpu in gpus.gpus:
        if gpu.processes:
            who = ", ".join(f"pid {p.pid}" + (f" ({_gib(p.used_memory)})" if p.used_memory else "")
                            for p in gpu.processes)
            checks.append(_check("gpu_users", "warn", f"GPU {gpu.index} ({gpu.name}) is in use by {who}"))
    port = facts.port
    if port.free:
        checks.append(_check("port", "ok", f"port {port.port} is free"))
    else:
        checks.append(_check("port", "warn", f"port {port.port} is in use by {port.holder}: a static rendezvous "
                                             "on it would fail with 'address already in use' (standalone picks a free one)"))
    checks.append(_threads_check(facts.threads))
    checks += _visible_devices_checks(facts.cuda_visible_devices, len(gpus.gpus))
    return checks


def _interpreter_checks(probe: InterpreterFacts, gpus: GpuFacts) -> list[DoctorCheck]:
    if not probe.ok:
        return [_check("interpreter", "fail", probe.error or f"{probe.python} cannot run torch")]
    checks = [_check("interpreter", "ok", f"{probe.python}: Python {probe.python_version}, torch {probe.torch}")]
    environment = probe.environment
    if environment is not None and environment.conda:
        checks.append(_check("environment", "ok", f"conda environment {environment.prefix}"))
    elif environment is not None and environment.virtualenv:
        checks.append(_check("environment", "ok", f"virtual environment {environment.prefix} "
                                                  f"(base {environment.base_prefix})"))
    elif environment is not None and environment.keys:  # an empty answer says nothing
        checks.append(_check("environment", "info", f"no virtual environment: {environment.prefix} "
                                                    "(the system's or a user-wide Python)"))
    build = probe.cuda_version
    if build:
        cudnn = probe.cudnn
        text = (f"torch built for CUDA {build}" + (f", cuDNN {cudnn}" if cudnn else "")
                + (f", NCCL {probe.nccl_version}" if probe.nccl_version else ""))
        if probe.cuda_available:
            checks.append(_check("cuda", "ok", f"{text}; CUDA available, {probe.device_count} device(s)"))
        else:
            why = probe.cuda_error or ("no NVIDIA driver" if not gpus.available else "CUDA cannot initialise")
            checks.append(_check("cuda", "warn" if gpus.available else "info", f"{text}; CUDA not available ({why})"))
        driver_cuda = gpus.cuda_driver_version
        if driver_cuda and _version(driver_cuda) < _version(build):
            checks.append(_check("cuda_driver", "warn", f"the driver supports CUDA {driver_cuda}, older than the "
                                                        f"CUDA {build} torch was built for: update the driver"))
    else:
        checks.append(_check("cuda", "info" if not gpus.available else "warn",
                             "a CPU-only torch build (no CUDA)" + ("" if not gpus.available else
                                                                  ": the GPUs here cannot be used with it")))
    return checks


def _threads_check(threads: ThreadFacts) -> DoctorCheck:
    processes, cores = threads.processes or 1, threads.usable_cpus or 1
    value = threads.omp_num_threads
    if value is None:
        return _check("omp_threads", "ok", f"OMP_NUM_THREADS is not set: Rankwatch sets {threads.rankwatch_sets} "
                                           f"per rank ({cores} cores / {processes} processes)")
    try:
        number = int(value)
    except ValueError:
        return _check("omp_threads", "warn", f"OMP_NUM_THREADS={value!r} is not a number")
    total = number * processes
    threads.threads_total = total
    if total > cores:
        return _check("omp_threads", "warn", f"OMP_NUM_THREADS={number} x {processes} processes = {total} threads "
                                             f"on {cores} cores: oversubscribed (use {threads.rankwatch_sets})")
    return _check("omp_threads", "ok", f"OMP_NUM_THREADS={number} x {processes} processes = {total} threads "
                                       f"on {cores} cores")


def _visible_devices_checks(visible: VisibleDeviceFacts, count: int) -> list[DoctorCheck]:
    checks = []
    environment, picked = visible.environment, visible.picked
    if isinstance(picked, list):
        missing = [i for i in picked if i >= count]
        if missing:
            checks.append(_check("picked_gpus", "fail", f"picked GPU(s) {', '.join(map(str, missing))} do not exist "
                                                        f"(this machine has {count})"))
    if environment is None:
        checks.append(_check("cuda_visible_devices", "ok", "CUDA_VISIBLE_DEVICES is not set; Rankwatch sets it "
                                                           f"from the picked GPUs ({visible.rankwatch_sets or 'none: CPU mode'})"))
        return checks
    listed = [part.strip() for part in environment.split(",") if part.strip()]
    bad = [part for part in listed if part.isdigit() and int(part) >= count]
    if bad:
        checks.append(_check("cuda_visible_devices", "warn", f"CUDA_VISIBLE_DEVICES={environment} names GPU(s) "
                                                             f"{', '.join(bad)} that do not exist here ({count} GPU(s))"))
    if environment != visible.rankwatch_sets:
        checks.append(_check("cuda_visible_devices", "info",
                             f"CUDA_VISIBLE_DEVICES={environment!r} is set in this shell; Rankwatch replaces it with "
                             f"the picked GPUs ({visible.rankwatch_sets!r}) and numbers them as nvidia-smi does"))
    elif not bad:
        checks.append(_check("cuda_visible_devices", "ok", f"CUDA_VISIBLE_DEVICES={environment} matches the picked GPUs"))
    return checks


def _version(text: str) -> tuple[int, ...]:
    parts = []
    for piece in str(text).split("."):
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


def _gib(value: int | None) -> str:
    return "?" if value is None else f"{value / (1 << 30):.1f} GiB"


STATUS_MARK = {CheckStatus.OK: "ok  ", CheckStatus.INFO: "info", CheckStatus.WARN: "WARN", CheckStatus.FAIL: "FAIL"}


def format_report(report: DoctorReport) -> str:
    """The human-readable doctor report: facts, then one line per check."""
    facts = report.facts
    system, runner, probe, gpus = facts.system, facts.runner, facts.interpreter, facts.gpus
    assert system is not None and runner is not None, "a report of run_doctor has the system's and runner's facts"
    lines = [
        f"system:      {system.distribution or system.os} ({system.os} {system.release}, "
        f"{system.machine}), {system.usable_cpus} usable CPUs, "
        f"{_gib(system.memory_total)} RAM ({_gib(system.memory_available)} free)",
        f"rankwatch:   Python {runner.python_version} ({runner.python})",
        f"interpreter: {probe.python}: Python {probe.python_version or '?'}, "
        f"torch {probe.torch or 'not importable'}",
        f"CUDA:        build {probe.cuda_version or 'none (CPU-only torch)'}, "
        f"{'available' if probe.cuda_available else 'not available'}; "
        f"driver {gpus.driver_version or 'none'}; NCCL {probe.nccl_version or '-'}; "
        f"cuDNN {probe.cudnn or '-'}",
        f"GPUs:        {len(gpus.gpus)}" if gpus.available else f"GPUs:        none ({gpus.reason})",
    ]
    for gpu in gpus.gpus:
        users = ", ".join(f"pid {p.pid}" for p in gpu.processes) or "idle"
        lines.append(f"  GPU {gpu.index}: {gpu.name}, {_gib(gpu.memory_used)} / {_gib(gpu.memory_total)}, {users}")
    backends = facts.backends
    lines.append(f"backends:    usable: {', '.join(backends.usable) or 'none'}"
                 + ("; not usable: " + ", ".join(backends.unusable) if backends.unusable else ""))
    lines.append("")
    for check in report.checks:
        lines.append(f"[{STATUS_MARK[check.status]}] {check.message}")
    lines.append("")
    lines.append(f"{'ready' if report.ok else 'NOT ready'} (checked in {report.seconds:.1f} s)")
    return "\n".join(lines) + "\n"
