"""The Doctor panel's model: ``rankwatch doctor --json`` read into checks and sections, Qt-free.

The runner does the checking (``runner.diagnosis.doctor``: it runs the probe in the
chosen interpreter and asks NVML, which the GUI may not do); the panel runs
``python -m runner doctor --json --interpreter PATH`` in the background and hands
the output here. :func:`parse_doctor_output` turns the JSON into
:class:`DoctorReport`: the verdicts (``checks``: the runner's ``DoctorCheck``, key,
status ok|info|warn|fail, message) and the facts grouped into :class:`Section` s a person reads top to
bottom (system, interpreter, GPUs, backends, port, threads,
``CUDA_VISIBLE_DEVICES``, environment).

:class:`DoctorModel` holds the state of one panel: idle, running, done or failed,
with the last report kept while a re-run is under way.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gui.gateway.runner_rules import CheckStatus, DoctorCheck, DoctorFacts
from gui.models import Event

OK, INFO, WARN, FAIL = CheckStatus.OK, CheckStatus.INFO, CheckStatus.WARN, CheckStatus.FAIL
STATUS_ORDER = (FAIL, WARN, INFO, OK)
STATUS_WORDS = {OK: "ok", INFO: "info", WARN: "warning", FAIL: "failed"}
IDLE, RUNNING, DONE, FAILED = "idle", "running", "done", "failed"


class DoctorError(ValueError):
    """The doctor's output is not its JSON report (it crashed, or is too old to know --json)."""


@dataclass(frozen=True)
class Section:
    title: str
    rows: tuple[tuple[str, str], ...]
    """(label, value) pairs."""


@dataclass(frozen=True)
class DoctorReport:
    ok: bool
    seconds: float | None
    checks: tuple[DoctorCheck, ...]
    sections: tuple[Section, ...]
    facts: DoctorFacts | None = field(default=None, compare=False, repr=False)
    """The report's facts, read with the runner's type (what ``sections`` words)."""

    def counts(self) -> dict[CheckStatus, int]:
        """How many checks each status has (every status, zero included)."""
        counts = {status: 0 for status in STATUS_ORDER}
        for check in self.checks:
            counts[check.status] = counts.get(check.status, 0) + 1
        return counts

    @property
    def verdict(self) -> str:
        """``Ready: 6 ok, 1 warning, 1 info (checked in 1.5 s)`` or ``Not ready: 1 failed, ...``."""
        counts = self.counts()
        parts = [f"{counts[status]} {STATUS_WORDS[status] if counts[status] == 1 else _plural(status)}"
                 for status in STATUS_ORDER if counts.get(status)]
        took = f" (checked in {self.seconds:.1f} s)" if self.seconds is not None else ""
        return f"{'Ready' if self.ok else 'Not ready'}: {', '.join(parts) or 'no checks'}{took}"

    def check(self, key: str) -> DoctorCheck | None:
        return next((check for check in self.checks if check.key == key), None)

    def section(self, title: str) -> Section | None:
        return next((section for section in self.sections if section.title == title), None)


def _plural(status: CheckStatus) -> str:
    return {OK: "ok", INFO: "info", WARN: "warnings", FAIL: "failed"}[status]


def doctor_arguments(interpreter: str | None, port: int | None = None, processes: int | None = None,
                     gpus: str | None = None) -> list[str]:
    """The runner subcommand's arguments (after ``python -m runner``)."""
    arguments = ["doctor", "--json"]
    if interpreter:
        arguments += ["--interpreter", interpreter]
    if port is not None:
        arguments += ["--port", str(port)]
    if processes is not None:
        arguments += ["--nproc-per-node", str(processes)]
    if gpus:
        arguments += ["--gpus", gpus]
    return arguments


def parse_doctor_output(text: str) -> DoctorReport:
    """The report in the doctor's stdout (its one JSON object).

    Raises:
        DoctorError: no JSON object with ``checks`` in ``text``.
    """
    start = text.find("{")
    if start < 0:
        raise DoctorError("the doctor printed no report")
    try:
        data = json.loads(text[start:])
    except ValueError as error:
        raise DoctorError(f"the doctor's report is not valid JSON ({error})") from None
    if not isinstance(data, dict) or not isinstance(data.get("checks"), list):
        raise DoctorError("the doctor's output has no checks")
    checks = tuple(DoctorCheck.from_json(c) for c in data["checks"] if isinstance(c, dict))
    seconds = data.get("seconds")
    return DoctorReport(ok=bool(data.get("ok", not any(c.status == FAIL for c in checks))),
                        seconds=float(seconds) if isinstance(seconds, (int, float)) else None,
                        checks=checks, sections=tuple(build_sections(data)),
                        facts=DoctorFacts.from_json(data))


def _text(value: Any, missing: str = "—") -> str:
    if value is None or value == "":
        return missing
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def gib(value: Any) -> str:
    return "?" if not isinstance(value, (int, float)) else f"{value / (1 << 30):.1f} GiB"


def part(data: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    """``data[key]`` when it is a JSON object, else an empty one (a part the report lacks)."""
    value = data.get(key)
    return value if isinstance(value, Mapping) else {}


def build_sections(data: dict[str, Any]) -> list[Section]:
    """The facts of a doctor report, grouped as the panel shows them (absent parts are skipped).

    Each part is read with the runner's own type (``DoctorFacts``), leniently: what is missing
    or of the wrong type shows as "—"."""
    sections = []
    facts = DoctorFacts.from_json(data)
    system = facts.system
    if part(data, "system") and system is not None:
        sections.append(Section("System", (
            ("OS", f"{_text(system.distribution or system.os)} ({_text(system.os)} "
                   f"{_text(system.release, '')}, {_text(system.machine, '')})"),
            ("Host", _text(system.hostname)),
            ("CPUs", f"{_text(system.usable_cpus)} usable of {_text(system.cpus)} "
                     f"({_text(system.physical_cores)} physical cores)"),
            ("Memory", f"{gib(system.memory_total)} ({gib(system.memory_available)} available)"),
        )))
    probe = facts.interpreter
    if part(data, "interpreter") or part(data, "runner"):
        rows = [("Python", f"{_text(probe.python)} (Python {_text(probe.python_version, '?')})"),
                ("torch", _text(probe.torch, "not importable" + (f": {probe.error}" if probe.error else "")))]
        if probe.torch:
            rows.append(("CUDA build", f"{_text(probe.cuda_version, 'none (CPU-only torch)')}; "
                                       f"{'available' if probe.cuda_available else 'not available'}, "
                                       f"{_text(probe.device_count, '0')} device(s)"))
            rows.append(("cuDNN / NCCL", f"{probe.cudnn or '—'} / {_text(probe.nccl_version)}"))
        runner = facts.runner
        if part(data, "runner") and runner is not None:
            rows.append(("Rankwatch's Python", f"{_text(runner.python)} (Python {_text(runner.python_version, '?')})"))
        sections.append(Section("Interpreter", tuple(rows)))
    if part(data, "gpus"):
        gpus = facts.gpus
        rows = []
        if gpus.available:
            rows.append(("Driver", f"{_text(gpus.driver_version)} (CUDA {_text(gpus.cuda_driver_version)})"))
            for gpu in gpus.gpus:
                users = ", ".join(f"pid {user.pid}" for user in gpu.processes) or "idle"
                rows.append((f"GPU {gpu.index}", f"{_text(gpu.name)}: {gib(gpu.memory_used)} / "
                                                 f"{gib(gpu.memory_total)} used; {users}"))
        else:
            rows.append(("GPUs", f"none ({_text(gpus.reason, 'no NVIDIA driver')})"))
        sections.append(Section("GPUs", tuple(rows)))
    if part(data, "backends"):
        backends = facts.backends
        rows = [("Usable", ", ".join(backends.usable) or "none")]
        for name, why in sorted(backends.unusable.items()):
            rows.append((f"{name} (not usable)", _text(why, "unknown reason")))
        sections.append(Section("Backends", tuple(rows)))
    if part(data, "port"):
        port = facts.port
        state = "free" if port.free else f"in use by {_text(port.holder, 'another process')}"
        sections.append(Section("Port", ((f"Port {_text(port.port)}", state),)))
    if part(data, "threads"):
        threads = facts.threads
        sections.append(Section("Threads", (
            ("OMP_NUM_THREADS", _text(threads.omp_num_threads, "not set")),
            ("Processes per node", _text(threads.processes)),
            ("Usable CPUs", _text(threads.usable_cpus)),
            ("Rankwatch sets", f"{_text(threads.rankwatch_sets)} thread(s) per rank"),
        )))
    if part(data, "cuda_visible_devices"):
        visible = facts.cuda_visible_devices
        picked = visible.picked
        picked_text = ", ".join(map(str, picked)) if isinstance(picked, list) else _text(picked)
        sections.append(Section("CUDA_VISIBLE_DEVICES", (
            ("In the environment", _text(visible.environment, "not set")),
            ("Picked GPUs", picked_text),
            ("Rankwatch sets", repr(visible.rankwatch_sets or "")),
        )))
    environment = probe.environment
    if environment is not None and environment.keys:  # an empty answer says nothing
        if environment.conda:
            kind = f"conda environment {_text(environment.conda_env, '')}".strip()
        elif environment.virtualenv:
            kind = "virtual environment"
        else:
            kind = "no virtual environment (a system or base Python)"
        sections.append(Section("Environment", (
            ("Kind", kind),
            ("Prefix", _text(environment.prefix)),
            ("Base prefix", _text(environment.base_prefix)),
        )))
    return sections


class DoctorModel:
    """The state of the Doctor panel.

    Events:
        changed: the state, report or error changed.
    """

    def __init__(self) -> None:
        self.changed = Event()
        self.state = IDLE
        self.report: DoctorReport | None = None
        self.error: str | None = None
        self.interpreter: str | None = None
        self.runs = 0

    @property
    def running(self) -> bool:
        return self.state == RUNNING

    def started(self, interpreter: str | None) -> None:
        """A doctor run began (the last report stays on show until the new one is in)."""
        self.state = RUNNING
        self.interpreter = interpreter
        self.error = None
        self.runs += 1
        self.changed.emit()

    def finished(self, stdout: str, stderr: str = "", exit_code: int | None = 0) -> None:
        """The doctor process ended; exit code 1 with a report only means a check failed."""
        try:
            self.report = parse_doctor_output(stdout)
        except DoctorError as error:
            last = stderr.strip().splitlines()[-1] if stderr.strip() else str(error)
            self.failed(f"the doctor exited with code {exit_code}: {last}")
            return
        self.state = DONE
        self.error = None
        self.changed.emit()

    def failed(self, message: str) -> None:
        self.state = FAILED
        self.error = message
        self.changed.emit()

    @property
    def status_text(self) -> str:
        who = f" for {self.interpreter}" if self.interpreter else ""
        if self.state == RUNNING:
            return f"Checking this machine{who}…"
        if self.state == FAILED:
            return f"The doctor could not run: {self.error}"
        if self.report is not None:
            return self.report.verdict
        return "Not checked yet."
