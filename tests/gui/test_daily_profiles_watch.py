"""Profiles saved outside the window (``rankwatch profiles save`` in a terminal, an editor) show up
in an open window without a restart. The real CLI writes into the test's RANKWATCH_HOME."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QMessageBox

from gui.gateway.probe import RunnerProbe
from gui.main_window import MainWindow
from runner.profile.files import save_profile
from runner.profile.spec import LaunchSpec

pytestmark = pytest.mark.gui
REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def window(qtbot, tmp_path, monkeypatch):
    monkeypatch.setattr(QMessageBox, "question", lambda *args, **kwargs: QMessageBox.StandardButton.Cancel)
    window = MainWindow(probe=RunnerProbe(command=[str(tmp_path / "no-probe")]), initial_profile="example")
    qtbot.addWidget(window)
    window.show()
    return window


def listed(window: MainWindow) -> list[str]:
    widget = window.launch_panel.profile_list.list
    return [widget.item(row).data(Qt.ItemDataRole.UserRole) for row in range(widget.count())]


def test_a_profile_saved_with_the_cli_appears_in_the_open_window(qtbot, window, tmp_path):
    script = tmp_path / "train.py"
    script.write_text("print('training')\n")
    assert "from-terminal" not in listed(window)
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), str(REPO_ROOT / "runner" / "worker_path")])}
    subprocess.run([sys.executable, "-m", "runner", "profiles", "save", "from-terminal", str(script), "--epochs", "3"],
                   check=True, env=environment, capture_output=True, timeout=60)
    qtbot.waitUntil(lambda: "from-terminal" in listed(window), timeout=15_000)


def test_the_current_profile_rewritten_on_disk_is_read_again_when_the_form_is_clean(qtbot, window, tmp_path):
    script = tmp_path / "train.py"
    script.write_text("print('training')\n")
    save_profile("mine", LaunchSpec(script=str(script), args=("--lr", "0.1")))
    qtbot.waitUntil(lambda: "mine" in listed(window), timeout=15_000)
    assert window.launch_panel.profile_list.select("mine")
    assert window.form.state.args_text == "--lr 0.1"
    save_profile("mine", LaunchSpec(script=str(script), args=("--lr", "0.2")))  # as an editor would
    qtbot.waitUntil(lambda: window.form.state.args_text == "--lr 0.2", timeout=15_000)
    assert not window.form.dirty
