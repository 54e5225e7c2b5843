"""Profiles in the window: save, save as, rename, duplicate, delete, import, export, last used.

Real profile files in the test's own RANKWATCH_HOME, real widgets; the dialogs that
ask for a name, a file or a confirmation are answered by patching them (a modal
dialog cannot be clicked offscreen). The probe is a tiny fake program answering
"no GPU" (what this machine has too), so nothing here waits for torch.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QKeySequence
from PySide6.QtWidgets import QFileDialog, QInputDialog, QMessageBox

from gui.gateway.probe import RunnerProbe
from gui.main_window import MainWindow
from gui.models.profiles import ProfileListModel, rebase_spec
from gui.settings import AppSettings
from runner import paths
from runner.profile.files import (
    ProfileError,
    list_profiles,
    profile_path,
    read_spec_file,
    save_profile,
)
from runner.profile.spec import LaunchSpec

FAKE_PROBE = r'''
import json, sys
python = sys.argv[sys.argv.index("--interpreter") + 1] if "--interpreter" in sys.argv else None
interpreter = None if python is None else {
    "python": python, "ok": True, "error": None, "python_version": "3.11.9", "torch": "2.4.1",
    "cuda_available": False, "cuda_version": None, "device_count": 0,
    "backends": {"gloo": {"available": True, "reason": None},
                 "nccl": {"available": False, "reason": "CUDA is not available"},
                 "mpi": {"available": False, "reason": "this torch build has no MPI"}}}
print(json.dumps({"interpreter": interpreter,
                  "gpus": {"available": False, "reason": "NVIDIA driver not installed", "gpus": []}}))
'''


@pytest.fixture(autouse=True)
def unanswered_dialogs_cancel(monkeypatch):
    """A modal dialog that no test answers would hang the run: it answers Cancel instead."""
    cancel = QMessageBox.StandardButton.Cancel
    for name in ("question", "warning", "critical", "information"):
        monkeypatch.setattr(QMessageBox, name, lambda *args, **kwargs: cancel)
    monkeypatch.setattr(QMessageBox, "exec", lambda self: int(cancel))
    monkeypatch.setattr(QInputDialog, "getText", lambda *args, **kwargs: ("", False))
    monkeypatch.setattr(QFileDialog, "getOpenFileName", lambda *args, **kwargs: ("", ""))
    monkeypatch.setattr(QFileDialog, "getSaveFileName", lambda *args, **kwargs: ("", ""))


def answer(monkeypatch, owner, name: str, value) -> list:
    """Make dialog ``owner.name`` return ``value``; returns the list of calls (their args)."""
    calls = []

    def dialog(*args, **kwargs):
        calls.append(args)
        return value
    monkeypatch.setattr(owner, name, dialog)
    return calls


@pytest.fixture
def script(tmp_path: Path) -> Path:
    path = tmp_path / "project" / "train.py"
    path.parent.mkdir()
    path.write_text("print('training')\n")
    return path


@pytest.fixture
def make_window(qtbot, tmp_path):
    program = tmp_path / "fake_probe.py"
    program.write_text(FAKE_PROBE)

    def make(initial_profile: str | None = None) -> MainWindow:
        window = MainWindow(probe=RunnerProbe(command=[sys.executable, str(program)]),
                            initial_profile=initial_profile)
        qtbot.addWidget(window)
        window.show()
        qtbot.waitUntil(lambda: window.form.gpu_report is not None, timeout=10_000)
        return window
    return make


def list_texts(window: MainWindow) -> list[str]:
    widget = window.launch_panel.profile_list.list
    return [widget.item(row).text() for row in range(widget.count())]


def test_save_as_writes_the_profile_file_and_edits_show_unsaved(qtbot, make_window, script, monkeypatch):
    window = make_window("example")
    panel = window.launch_panel
    profiles = panel.profile_list
    assert list_texts(window) == ["example (bundled)"]
    assert not profiles.save_button.isEnabled()  # nothing to save yet

    panel.entry.lineEdit().selectAll()
    qtbot.keyClicks(panel.entry.lineEdit(), str(script))
    assert list_texts(window) == ["example (bundled) •"]
    assert window.isWindowModified()

    asked = answer(monkeypatch, QInputDialog, "getText", ("mine", True))
    qtbot.mouseClick(profiles.save_as_button, Qt.MouseButton.LeftButton)
    assert asked and asked[0][4] == "train"  # named after the script, not "example-2"

    saved = read_spec_file(profile_path("mine"))
    assert saved == window.form.evaluation.spec
    assert saved.script == str(script)
    assert saved.description is None  # not "Bundled example: ..." in every new profile
    assert list_texts(window) == ["example (bundled)", "mine"]
    assert window.form.profile_name == "mine" and not window.form.dirty
    assert profiles.list.selectedItems()[0].text() == "mine"
    assert AppSettings().last_profile() == "mine"

    before = saved.args  # the example's own
    qtbot.keyClicks(panel.args, " --lr 0.5")
    assert list_texts(window) == ["example (bundled)", "mine •"]
    assert window.save_action.shortcut() == QKeySequence(QKeySequence.StandardKey.Save)
    window.save_action.trigger()  # Ctrl+S
    assert read_spec_file(profile_path("mine")).args == (*before, "--lr", "0.5")
    assert list_texts(window) == ["example (bundled)", "mine"]


def test_save_as_with_a_bad_name_asks_again_with_the_reason_and_the_typed_name(qtbot, make_window, script,
                                                                              monkeypatch):
    window = make_window("example")
    panel = window.launch_panel
    panel.entry.lineEdit().selectAll()
    qtbot.keyClicks(panel.entry.lineEdit(), str(script))
    answers = iter([("my run!", True), ("my-run", True)])
    asked = []

    def get_text(*args, **kwargs):
        asked.append(args)
        return next(answers)
    monkeypatch.setattr(QInputDialog, "getText", get_text)
    assert panel.profile_list.save_as()
    assert len(asked) == 2
    label, typed = asked[1][2], asked[1][4]
    assert typed == "my run!"  # what was typed is kept
    assert "profile name 'my run!' is not allowed" in label and "letters, digits" in label
    assert profile_path("my-run").exists() and window.form.profile_name == "my-run"

    # Cancelling after a bad name saves nothing.
    answers = iter([("../x", True), ("", False)])
    asked.clear()
    assert not panel.profile_list.save_as()
    assert len(asked) == 2


def test_new_profile_starts_from_an_empty_form_in_cpu_mode_without_a_gpu(qtbot, make_window, script, monkeypatch):
    window = make_window("example")
    profiles = window.launch_panel.profile_list
    assert window.new_profile_action.shortcut() == QKeySequence(QKeySequence.StandardKey.New)
    window.new_profile_action.trigger()
    state = window.form.state
    assert window.form.profile_name is None and state.entry == "" and state.description is None
    assert state.gpus == "cpu"  # no GPU here: CPU mode, not "all"
    picker = window.launch_panel.gpu_picker
    assert picker.cpu_button.isChecked()
    assert not picker.all_button.isEnabled() and not picker.pick_button.isEnabled()
    assert "No GPU here" in picker.all_button.toolTip()
    assert profiles.list.selectedItems() == []

    qtbot.keyClicks(window.launch_panel.entry.lineEdit(), str(script))
    answer(monkeypatch, QInputDialog, "getText", ("fresh", True))
    window.save_action.trigger()  # Save on a new form asks for a name
    saved = read_spec_file(profile_path("fresh"))
    assert saved.gpus == "cpu" and saved.script == str(script) and saved.description is None


def test_rename_duplicate_and_delete_change_the_files(qtbot, make_window, script, monkeypatch):
    save_profile("alpha", LaunchSpec(script=str(script), gpus="cpu"))
    window = make_window("alpha")
    profiles = window.launch_panel.profile_list
    assert window.form.profile_name == "alpha"
    assert profiles.rename_button.isEnabled() and profiles.delete_button.isEnabled()

    answer(monkeypatch, QInputDialog, "getText", ("beta", True))
    qtbot.mouseClick(profiles.rename_button, Qt.MouseButton.LeftButton)
    assert list_profiles() == ["beta"]
    assert window.form.profile_name == "beta" and list_texts(window) == ["beta", "example (bundled)"]

    answer(monkeypatch, QInputDialog, "getText", ("gamma", True))
    qtbot.mouseClick(profiles.duplicate_button, Qt.MouseButton.LeftButton)
    assert list_profiles() == ["beta", "gamma"]
    assert read_spec_file(profile_path("gamma")) == read_spec_file(profile_path("beta"))
    assert window.form.profile_name == "gamma"

    confirmations = answer(monkeypatch, QMessageBox, "question", QMessageBox.StandardButton.Yes)
    qtbot.mouseClick(profiles.delete_button, Qt.MouseButton.LeftButton)
    assert confirmations and "gamma" in confirmations[0][2]
    assert list_profiles() == ["beta"]
    assert window.form.profile_name == "beta"  # the first remaining profile is shown


def test_import_makes_relative_paths_absolute_and_export_writes_a_runnable_file(
        qtbot, make_window, script, tmp_path, monkeypatch):
    shared = script.parent / "shared.toml"
    shared.write_text('version = 1\nscript = "train.py"\nargs = ["--epochs", "2"]\ngpus = "cpu"\n'
                      'nproc_per_node = 2\n')
    window = make_window("example")
    profiles = window.launch_panel.profile_list
    answer(monkeypatch, QFileDialog, "getOpenFileName", (str(shared), "Profiles (*.toml)"))
    qtbot.mouseClick(profiles.import_button, Qt.MouseButton.LeftButton)

    assert list_profiles() == ["shared"]
    imported = read_spec_file(profile_path("shared"))
    assert imported.workdir == str(script.parent) and imported.script == "train.py"
    assert window.form.profile_name == "shared"
    assert window.form.evaluation.launch.script == str(script)
    assert window.launch_panel.preview.command_text().startswith(f"cd {script.parent} && ")
    assert window.launch_panel.launch_button.isEnabled()

    target = tmp_path / "elsewhere" / "exported"
    target.parent.mkdir()
    answer(monkeypatch, QFileDialog, "getSaveFileName", (str(target), "Profiles (*.toml)"))
    qtbot.mouseClick(profiles.export_button, Qt.MouseButton.LeftButton)
    exported = read_spec_file(target.with_suffix(".toml"))
    assert exported == imported


def test_switching_profiles_with_unsaved_changes_asks_first(qtbot, make_window, script, monkeypatch):
    save_profile("alpha", LaunchSpec(script=str(script), gpus="cpu"))
    window = make_window("alpha")
    panel = window.launch_panel
    qtbot.keyClicks(panel.args, "--changed")
    example_row = list_texts(window).index("example (bundled)")

    asked = answer(monkeypatch, QMessageBox, "question", QMessageBox.StandardButton.Cancel)
    panel.profile_list.list.setCurrentRow(example_row)
    assert len(asked) == 1
    assert window.form.profile_name == "alpha" and window.form.dirty
    assert panel.profile_list.list.selectedItems()[0].text() == "alpha •"

    answer(monkeypatch, QMessageBox, "question", QMessageBox.StandardButton.Discard)
    panel.profile_list.list.setCurrentRow(example_row)
    assert window.form.profile_name == "example" and not window.form.dirty
    assert read_spec_file(profile_path("alpha")).args == ()  # discarded, not saved


def test_the_last_used_profile_is_restored_at_start(qtbot, make_window, script):
    save_profile("alpha", LaunchSpec(script=str(script), gpus="cpu"))
    save_profile("beta", LaunchSpec(script=str(script), gpus="cpu", nproc_per_node=3))
    first = make_window()
    assert first.form.profile_name == "example"  # nothing used yet: the bundled example
    first.launch_panel.profile_list.list.setCurrentRow(list_texts(first).index("beta"))
    assert first.form.profile_name == "beta"
    first.close()

    second = make_window()
    assert second.form.profile_name == "beta"
    assert second.form.evaluation.spec.nproc_per_node == 3
    assert second.launch_panel.nproc.value() == 3


def test_profile_model_refuses_what_would_lose_data(script, tmp_path):
    model = ProfileListModel()
    spec = LaunchSpec(script=str(script), gpus="cpu")
    model.save_as("one", spec, tmp_path)
    with pytest.raises(ProfileError, match="already exists"):
        model.save_as("one", spec, tmp_path)
    with pytest.raises(ProfileError, match="not allowed"):
        model.save_as("bad name!", spec, tmp_path)
    with pytest.raises(ProfileError, match="bundled example cannot be deleted"):
        model.delete("example")
    assert model.unique_name("one") == "one-2"
    assert model.unique_name("my profile") == "my-profile"

    relative = LaunchSpec(script="train.py", workdir="sub")
    moved = rebase_spec(relative, tmp_path, paths.profiles_dir())
    assert moved.workdir == str(tmp_path / "sub") and moved.script == "train.py"
    assert rebase_spec(LaunchSpec(script="train.py"), tmp_path, tmp_path).workdir is None
    assert json.loads(json.dumps(model.names)) == ["example", "one"]
