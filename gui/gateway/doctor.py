"""Running ``python -m runner doctor --json`` for the Doctor panel, without blocking the GUI.

The checks import torch in the chosen interpreter and ask NVML, which the GUI itself
never does; that takes a second or two. :class:`DoctorProcess` runs the command in a
``QProcess`` (the runner package importable even when Rankwatch is not installed) and
reports what it printed, or why it gave no answer: it could not start, or it did not
answer within the timeout (then it is killed).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from PySide6.QtCore import QObject, QProcess, QProcessEnvironment, QTimer, Signal

from runner import paths

__all__ = ["DoctorProcess"]


def default_command() -> list[str]:
    """``python -m runner`` in Rankwatch's own Python."""
    return [sys.executable, "-m", "runner"]


class DoctorProcess(QObject):
    """One doctor run at a time.

    Signals:
        answered(str, str, int): it ended: its stdout, its stderr, its exit code.
        failed(str): no answer: it could not start, or it timed out (killed).
    """

    TIMEOUT_MS = 90_000
    """How long a doctor run may take (it imports torch and asks NVML) before it is killed."""

    answered = Signal(str, str, int)
    failed = Signal(str)

    def __init__(self, parent: QObject | None = None, *, command: Sequence[str] | None = None,
                 timeout_ms: int = TIMEOUT_MS) -> None:
        super().__init__(parent)
        self.command = list(command or default_command())
        self.timeout_ms = timeout_ms
        self._process: QProcess | None = None
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.timeout.connect(self._on_timeout)

    def is_running(self) -> bool:
        return self._process is not None

    def start(self, arguments: Sequence[str]) -> bool:
        """Run the doctor with ``arguments`` (after ``doctor``'s own); False while one runs."""
        if self._process is not None:
            return False
        process = QProcess(self)
        environment = QProcessEnvironment.systemEnvironment()
        python_path = environment.value("PYTHONPATH", "")
        repo = str(paths.REPO_ROOT)
        environment.insert("PYTHONPATH", repo + (os.pathsep + python_path if python_path else ""))
        process.setProcessEnvironment(environment)
        process.setProgram(self.command[0])
        process.setArguments(self.command[1:] + list(arguments))
        process.finished.connect(self._on_finished)
        process.errorOccurred.connect(self._on_error)
        self._process = process
        self._timer.start(self.timeout_ms)
        process.start()
        return True

    def shutdown(self) -> None:
        """Kill a running doctor (the window is closing); nothing is reported."""
        process, self._process = self._process, None
        self._timer.stop()
        if process is not None:
            process.finished.disconnect(self._on_finished)
            process.errorOccurred.disconnect(self._on_error)
            process.kill()
            process.waitForFinished(1000)
            process.deleteLater()

    def _take_process(self) -> QProcess | None:
        process, self._process = self._process, None
        self._timer.stop()
        if process is not None:
            process.deleteLater()
        return process

    def _on_finished(self, exit_code: int, _status: QProcess.ExitStatus) -> None:
        process = self._take_process()
        if process is None:
            return
        stdout = bytes(process.readAllStandardOutput().data()).decode("utf-8", "replace")
        stderr = bytes(process.readAllStandardError().data()).decode("utf-8", "replace")
        self.answered.emit(stdout, stderr, exit_code)

    def _on_error(self, error: QProcess.ProcessError) -> None:
        if error != QProcess.ProcessError.FailedToStart:
            return  # crashes arrive through finished, hangs through the timer
        process = self._take_process()
        message = process.errorString() if process is not None else str(error)
        self.failed.emit(f"cannot start {self.command[0]}: {message}")

    def _on_timeout(self) -> None:
        process = self._process
        if process is None:
            return
        process.finished.disconnect(self._on_finished)
        process.kill()
        self._take_process()
        self.failed.emit(f"no answer within {self.timeout_ms // 1000} s")
