"""Ask the runner what an interpreter and the GPUs look like, without blocking the GUI.

``python -m runner probe --json [--interpreter PATH | --gpus-only]`` imports torch in
the probed interpreter (seconds) and queries NVML; the GUI may do neither itself.
``RunnerProbe`` runs it in a ``QProcess`` and reports through signals when it is
done, so the window stays responsive while a probe runs. Several probes can run at
once (one per interpreter, plus the GPU refresh); a probe that does not answer
within ``timeout_ms`` is killed and reported as failed.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from dataclasses import replace

from PySide6.QtCore import QObject, QProcess, QProcessEnvironment, QTimer, Signal

from gui.gateway.probe_output import ProbeError, parse_probe_output
from runner import paths

DEFAULT_TIMEOUT_MS = 60_000
GPUS = "gpus"
INTERPRETER = "interpreter"

__all__ = ["RunnerProbe"]


def default_command() -> list[str]:
    """``python -m runner`` in Rankwatch's own Python."""
    return [sys.executable, "-m", "runner"]


class RunnerProbe(QObject):
    """Runs the runner's probe in the background.

    Signals:
        gpus_probed(GpuReport): any probe answered with a GPU report.
        interpreter_probed(InterpreterInfo): an ``--interpreter`` probe answered.
        probe_failed(str kind, str target, str message): ``kind`` is ``gpus`` or
            ``interpreter``; ``target`` the interpreter asked about (or empty).
        busy_changed(bool): whether any probe is running.
    """

    GPUS = GPUS
    """A failed probe's ``kind``: the GPU-only probe (the GPU report is then unknown)."""
    INTERPRETER = INTERPRETER
    """A failed probe's ``kind``: an interpreter's probe (its ``target``)."""

    gpus_probed = Signal(object)
    interpreter_probed = Signal(object)
    probe_failed = Signal(str, str, str)
    busy_changed = Signal(bool)

    def __init__(self, command: Sequence[str] | None = None, parent: QObject | None = None,
                 timeout_ms: int = DEFAULT_TIMEOUT_MS) -> None:
        super().__init__(parent)
        self._command = list(command or default_command())
        self._timeout_ms = timeout_ms
        self._running: dict[QProcess, tuple[str, str]] = {}

    def is_busy(self, kind: str | None = None, target: str | None = None) -> bool:
        return any((kind is None or k == kind) and (target is None or t == target)
                   for k, t in self._running.values())

    def probe_gpus(self) -> None:
        """Quick GPU-only probe; does nothing when one is already running."""
        if not self.is_busy(GPUS):
            self._start(GPUS, "", ["probe", "--json", "--gpus-only"])

    def probe_interpreter(self, python: str) -> None:
        """Full probe of ``python`` (torch, CUDA, backends) plus the GPUs."""
        if not self.is_busy(INTERPRETER, python):
            self._start(INTERPRETER, python, ["probe", "--json", "--interpreter", python])

    def shutdown(self) -> None:
        """Kill every running probe (the window is closing)."""
        for process in list(self._running):
            process.kill()
            process.waitForFinished(1000)
        self._running.clear()

    def _start(self, kind: str, target: str, arguments: list[str]) -> None:
        process = QProcess(self)
        environment = QProcessEnvironment.systemEnvironment()
        # The runner package must be importable even when Rankwatch is not installed.
        python_path = environment.value("PYTHONPATH", "")
        repo = str(paths.REPO_ROOT)
        environment.insert("PYTHONPATH", repo + (os.pathsep + python_path if python_path else ""))
        process.setProcessEnvironment(environment)
        process.setProgram(self._command[0])
        process.setArguments(self._command[1:] + arguments)
        was_busy = bool(self._running)
        self._running[process] = (kind, target)
        # Bound slots (no lambdas): Qt drops these connections when the probe is destroyed,
        # before its child processes die and report.
        process.finished.connect(self._on_finished)
        process.errorOccurred.connect(self._on_error)
        timer = QTimer(process)
        timer.setSingleShot(True)
        timer.timeout.connect(self._on_timeout)
        timer.start(self._timeout_ms)
        process.start()
        if not was_busy:
            self.busy_changed.emit(True)

    def _finish(self, process: QProcess) -> tuple[str, str] | None:
        entry = self._running.pop(process, None)
        process.deleteLater()
        if entry is not None and not self._running:
            self.busy_changed.emit(False)
        return entry

    def _sending_process(self) -> QProcess | None:
        """The probe process whose signal (or whose timer's) is being handled."""
        sender: QObject | None = self.sender()
        if isinstance(sender, QTimer):
            sender = sender.parent()
        return sender if isinstance(sender, QProcess) else None

    def _on_timeout(self) -> None:
        process = self._sending_process()
        if process is None:
            return
        entry = self._finish(process)
        if entry is None:
            return
        process.kill()
        kind, target = entry
        self.probe_failed.emit(kind, target, f"the probe did not answer within {self._timeout_ms // 1000} s")

    def _on_error(self, error: QProcess.ProcessError) -> None:
        process = self._sending_process()
        if error != QProcess.ProcessError.FailedToStart or process is None:
            return  # crashes and timeouts arrive through finished / the timer
        entry = self._finish(process)
        if entry is not None:
            kind, target = entry
            self.probe_failed.emit(kind, target, f"cannot start {self._command[0]}: {process.errorString()}")

    def _on_finished(self, exit_code: int, exit_status: QProcess.ExitStatus) -> None:
        process = self._sending_process()
        if process is None:
            return
        entry = self._finish(process)
        if entry is None:
            return
        kind, target = entry
        output = bytes(process.readAllStandardOutput().data()).decode("utf-8", "replace")
        errors = bytes(process.readAllStandardError().data()).decode("utf-8", "replace").strip()
        try:
            result = parse_probe_output(output, requested=target or None)
        except ProbeError as exc:
            last_line = errors.splitlines()[-1] if errors else str(exc)
            crashed = exit_status != QProcess.ExitStatus.NormalExit
            reason = "the probe crashed" if crashed else f"the probe exited with code {exit_code}"
            self.probe_failed.emit(kind, target, f"{reason}: {last_line}")
            return
        if kind == INTERPRETER and result.interpreter is not None:
            info = result.interpreter
            if target and info.python != target:
                # Report under the path that was asked for, so the form can match it.
                info = replace(info, python=target)
            # First: a listener of gpus_probed that finds no answer for this interpreter
            # would start probing it again.
            self.interpreter_probed.emit(info)
        self.gpus_probed.emit(result.gpus)
