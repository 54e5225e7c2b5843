"""Start a detached runner for a launch spec, without blocking the GUI.

The GUI never starts torchrun itself: it writes the spec to a TOML file and runs
``python -m runner run --detach --json SPEC.toml`` in a QProcess. That command
prints one JSON line and exits at once, while the runner it started keeps going in
its own session (so the job survives the GUI):

* success, exit 0: ``{"run_id": int, "socket": str, "pid": int, "log": str}``
* invalid spec, exit 2: ``{"error": str, "errors": [{"field": str, "message": str}]}``

:class:`RunnerProcess` emits ``runner_started(dict)`` or ``launch_failed(str, list)``.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, QProcess, QProcessEnvironment, Signal

from runner import paths
from runner.profile.files import write_spec_file
from runner.profile.resolve import absolute_paths
from runner.profile.spec import LaunchSpec

LAUNCH_TIMEOUT_MS = 60_000

CommandBuilder = Callable[[Path], Sequence[str]]
"""The command that starts a detached runner for a spec file (tests put a fake launcher here)."""

__all__ = ["CommandBuilder", "RunnerProcess", "runner_command"]


def runner_command(spec_path: Path) -> list[str]:
    """The command that starts a detached runner for the spec file ``spec_path``."""
    # Rankwatch's flags go before the profile: what follows it would be the script's arguments.
    return [sys.executable, "-m", "runner", "run", "--detach", "--json", str(spec_path)]


def absolute_spec(spec: LaunchSpec, base_dir: Path) -> LaunchSpec:
    """``spec`` with its paths absolute (the runner's own rules): the spec file is written
    to a temporary folder, where relative paths would mean something else."""
    return absolute_paths(spec, base_dir)


def parse_launch_output(stdout: bytes | str) -> dict[str, Any] | None:
    """The last JSON object line of the launcher's output, or None."""
    text = stdout.decode("utf-8", "replace") if isinstance(stdout, bytes) else stdout
    for line in reversed(text.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                value = json.loads(line)
            except ValueError:
                continue
            if isinstance(value, dict):
                return value
    return None


class RunnerProcess(QObject):
    """One launch: write the spec, run the detached launcher, report its JSON line.

    Signals:
        runner_started(dict): ``{"run_id", "socket", "pid", "log"}``.
        launch_failed(str, list): a message and the per-field errors (may be empty).
    """

    runner_started = Signal(object)
    launch_failed = Signal(str, list)

    def __init__(self, parent: QObject | None = None, command: CommandBuilder | None = None) -> None:
        """``command``: how to start the launcher for a spec file; ``None``: ``runner_command``,
        the real ``python -m runner run --detach --json SPEC``."""
        super().__init__(parent)
        self._command = command or runner_command
        self._process: QProcess | None = None
        self._spec_dir: tempfile.TemporaryDirectory | None = None

    def is_running(self) -> bool:
        return self._process is not None

    def start(self, spec: LaunchSpec, profile_name: str | None, base_dir: Path) -> None:
        """Write ``spec`` (paths made absolute) and start the launcher.

        Raises:
            RuntimeError: a launch is already in progress.
            OSError: the spec file cannot be written.
        """
        if self._process is not None:
            raise RuntimeError("a launch is already in progress")
        launch_dir = paths.data_dir() / "launch"
        launch_dir.mkdir(parents=True, exist_ok=True)
        self._spec_dir = tempfile.TemporaryDirectory(prefix="spec-", dir=launch_dir)
        # The file's stem is the profile name the run is recorded under ("unsaved" for a form
        # that is no profile; "NAME (edited)" for a profile with unsaved changes).
        name = profile_name.replace("/", "-") if profile_name else "unsaved"
        spec_path = write_spec_file(Path(self._spec_dir.name) / f"{name}.toml", absolute_spec(spec, base_dir))
        command = list(self._command(spec_path))
        process = QProcess(self)
        environment = QProcessEnvironment.systemEnvironment()
        # `python -m runner` must find the runner package even outside an install.
        repo_root = str(paths.REPO_ROOT)
        python_path = environment.value("PYTHONPATH", "")
        if repo_root not in python_path.split(os.pathsep):
            environment.insert("PYTHONPATH", os.pathsep.join(p for p in (repo_root, python_path) if p))
        process.setProcessEnvironment(environment)
        process.setWorkingDirectory(str(base_dir))
        process.finished.connect(self._on_finished)
        process.errorOccurred.connect(self._on_error)
        self._process = process
        process.start(command[0], command[1:])

    def _on_error(self, error: QProcess.ProcessError) -> None:
        if error == QProcess.ProcessError.FailedToStart and self._process is not None:
            message = f"could not start the runner: {self._process.errorString()}"
            self._finish()
            self.launch_failed.emit(message, [])

    def _on_finished(self, exit_code: int, exit_status: QProcess.ExitStatus) -> None:
        process = self._process
        if process is None:
            return
        stdout = bytes(process.readAllStandardOutput().data())
        stderr = bytes(process.readAllStandardError().data()).decode("utf-8", "replace").strip()
        self._finish()
        result = parse_launch_output(stdout)
        if exit_code == 0 and result and "run_id" in result and "socket" in result:
            self.runner_started.emit(result)
            return
        if result and result.get("error"):
            errors = [e for e in result.get("errors") or [] if isinstance(e, dict)]
            self.launch_failed.emit(str(result["error"]), errors)
            return
        tail = stderr.splitlines()[-1] if stderr else ""
        how = "crashed" if exit_status == QProcess.ExitStatus.CrashExit else f"exited with code {exit_code}"
        self.launch_failed.emit(f"the runner {how}" + (f": {tail}" if tail else ""), [])

    def _finish(self) -> None:
        if self._process is not None:
            self._process.deleteLater()
            self._process = None
        if self._spec_dir is not None:
            self._spec_dir.cleanup()
            self._spec_dir = None
