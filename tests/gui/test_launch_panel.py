"""The launch panel and the main window, driven like a person would, against the real models.

The runner's probe runs for real in a QProcess, but through a tiny fake program that
answers with canned JSON in the probe's contract shape (this machine has no GPU to
show in the picker). Everything else is real: form model, runner.profile validation,
command building, profile files in RANKWATCH_HOME, QSettings.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from PySide6.QtCore import QPoint, Qt
from PySide6.QtGui import QGuiApplication, QKeySequence
from PySide6.QtWidgets import QFileDialog, QMessageBox

from gui.gateway.probe import RunnerProbe
from gui.gateway.probe_output import parse_probe_output
from gui.main_window import LEAVE_RUNNING, MainWindow
from gui.models.launch_form import LaunchFormModel
from gui.models.profiles import ProfileListModel
from gui.settings import AppSettings
from gui.widgets.command_preview import plain_command
from gui.widgets.launch_panel import LaunchPanel
from runner.launch.command import RendezvousPlan, build_commands
from runner.profile.files import write_spec_file
from runner.profile.resolve import MachineFacts, resolve, usable_cpus
from runner.profile.spec import LaunchSpec, RendezvousSpec

REPO_ROOT = Path(__file__).resolve().parents[2]
GIB = 1024**3

FAKE_PROBE = r'''
"""Stands in for `python -m runner probe --json [...]`: prints the canned answer in ARGV[1]."""
import json, sys
answer = json.load(open(sys.argv[1]))
args = sys.argv[2:]
assert args[:2] == ["probe", "--json"], args
if "--gpus-only" in args:
    answer["interpreter"] = None
else:
    python = args[args.index("--interpreter") + 1]
    answer["interpreter"]["python"] = python
    if "notorch" in python:
        answer["interpreter"].update(ok=False, torch=None, cuda_available=False, device_count=0,
                                     error="cannot import torch: ModuleNotFoundError: No module named 'torch'")
print(json.dumps(answer))
'''

INTERPRETER = {
    "python": "", "ok": True, "error": None, "python_version": "3.11.9", "torch": "2.4.1",
    "cuda_available": True, "cuda_version": "12.1", "device_count": 2,
    "backends": {"gloo": {"available": True, "reason": None}, "nccl": {"available": True, "reason": None},
                 "mpi": {"available": False, "reason": "this torch build has no MPI"}},
}
TWO_GPUS = {
    "available": True, "reason": None, "driver_version": "550.54.15", "cuda_driver_version": "12.4",
    "gpus": [
        {"index": 0, "name": "NVIDIA A100-SXM4-40GB", "uuid": "GPU-0", "memory_used": 1 * GIB,
         "memory_total": 40 * GIB, "utilization": 0.0, "power_watts": 55.0, "temperature_c": 31.0,
         "sm_clock_mhz": 210.0, "processes": []},
        {"index": 1, "name": "NVIDIA A100-SXM4-40GB", "uuid": "GPU-1", "memory_used": 12 * GIB,
         "memory_total": 40 * GIB, "utilization": 97.0, "power_watts": 310.0, "temperature_c": 64.0,
         "sm_clock_mhz": 1410.0, "processes": [{"pid": 4242, "used_memory": 11 * GIB, "name": "python"}]},
    ],
}
NO_GPUS = {"available": False, "reason": "NVIDIA driver not installed", "driver_version": None,
           "cuda_driver_version": None, "gpus": []}


def fake_probe(tmp_path: Path, gpus: dict) -> RunnerProbe:
    program = tmp_path / "fake_probe.py"
    program.write_text(FAKE_PROBE)
    answer = tmp_path / f"probe-answer-{id(gpus)}.json"
    answer.write_text(json.dumps({"interpreter": dict(INTERPRETER), "gpus": gpus}))
    return RunnerProbe(command=[sys.executable, str(program), str(answer)])


@pytest.fixture(autouse=True)
def unanswered_dialogs_cancel(monkeypatch):
    """A modal dialog that no test answers would hang the run: it answers Cancel instead.

    Tests that expect a dialog patch it again with the answer they want.
    """
    cancel = QMessageBox.StandardButton.Cancel
    for name in ("question", "warning", "critical", "information"):
        monkeypatch.setattr(QMessageBox, name, lambda *args, **kwargs: cancel)
    monkeypatch.setattr(QMessageBox, "exec", lambda self: int(cancel))
    monkeypatch.setattr(QFileDialog, "getOpenFileName", lambda *args, **kwargs: ("", ""))
    monkeypatch.setattr(QFileDialog, "getSaveFileName", lambda *args, **kwargs: ("", ""))


@pytest.fixture
def script(tmp_path: Path) -> Path:
    path = tmp_path / "project" / "train.py"
    path.parent.mkdir()
    path.write_text("print('training')\n")
    return path


@pytest.fixture
def make_panel(qtbot, tmp_path):
    def make(gpus: dict = NO_GPUS) -> LaunchPanel:
        probe = fake_probe(tmp_path, gpus)
        form = LaunchFormModel(base_dir=tmp_path)
        panel = LaunchPanel(form, ProfileListModel(), probe, AppSettings())
        probe.setParent(panel)
        qtbot.addWidget(panel)
        panel.resize(1300, 850)
        panel.show()
        qtbot.waitUntil(lambda: form.gpu_report is not None, timeout=10_000)
        return panel
    return make


def type_into(qtbot, widget, text: str) -> None:
    """Replace the text of a line edit / spin box by typing, as a person does."""
    widget.selectAll()
    qtbot.keyClicks(widget, text)


def expected_command(spec: LaunchSpec, gpus: dict, base_dir: Path, plan: RendezvousPlan, node: int = 0) -> str:
    report = parse_probe_output(json.dumps({"gpus": gpus})).gpus
    return build_commands(resolve(spec, MachineFacts.detect(gpus=report), base_dir), plan)[node].shell_text()


def test_filled_form_previews_exactly_the_runners_command(qtbot, make_panel, script, tmp_path):
    panel = make_panel()
    form = panel._form

    qtbot.keyClicks(panel.entry.lineEdit(), str(script))
    qtbot.keyClicks(panel.args, "--epochs 3 --name 'my run'")
    qtbot.keyClicks(panel.workdir, str(script.parent))
    qtbot.mouseClick(panel.gpu_picker.cpu_button, Qt.MouseButton.LeftButton)
    type_into(qtbot, panel.nproc, "3")
    panel.rendezvous.setCurrentIndex(panel.rendezvous.findData("static"))
    qtbot.mouseClick(panel.free_port_button, Qt.MouseButton.LeftButton)
    port = panel.master_port.value()
    type_into(qtbot, panel.max_restarts, "2")
    type_into(qtbot, panel.omp_threads, "2")
    panel.env_table.add_variable("NCCL_DEBUG", "INFO")
    checkbox = panel.legacy_local_rank
    qtbot.mouseClick(checkbox, Qt.MouseButton.LeftButton, pos=QPoint(6, checkbox.height() // 2))

    expected = LaunchSpec(
        script=str(script), args=("--epochs", "3", "--name", "my run"), workdir=str(script.parent),
        env=(("NCCL_DEBUG", "INFO"),), nproc_per_node=3, gpus="cpu",
        rendezvous=RendezvousSpec(mode="static", master_port=port), max_restarts=2, omp_num_threads=2,
        legacy_local_rank=True)
    assert form.evaluation.spec == expected
    assert 1024 <= port <= 65535
    shown = panel.preview.command_text()
    plan = RendezvousPlan(mode="static", master_addr="localhost", master_port=port)
    assert shown == expected_command(expected, NO_GPUS, tmp_path, plan)
    assert plain_command(panel.preview.text.toPlainText()) == shown

    # ... and it is what the runner's own CLI prints for the same spec.
    spec_file = write_spec_file(tmp_path / "filled.toml", expected)
    printed = subprocess.run([sys.executable, "-m", "runner", "command", str(spec_file)], cwd=REPO_ROOT,
                             capture_output=True, text=True, timeout=60, check=True).stdout.strip()
    assert shown == printed

    qtbot.mouseClick(panel.preview.copy_button, Qt.MouseButton.LeftButton)
    assert QGuiApplication.clipboard().text() == shown
    assert panel.launch_button.isEnabled()
    assert panel.status.text() == "Ready: 3 processes on 1 node · CPU · gloo"


def test_gpu_picker_lists_the_probed_gpus_and_picks_cuda_visible_devices(qtbot, make_panel, script, tmp_path):
    panel = make_panel(TWO_GPUS)
    picker = panel.gpu_picker
    qtbot.keyClicks(panel.entry.lineEdit(), str(script))

    assert picker.table.rowCount() == 2
    assert picker.headline.text() == "2 GPUs · driver 550.54.15 · CUDA 12.4"
    assert [picker.table.item(row, 4).text() for row in range(2)] == ["free", "busy"]
    assert picker.table.item(1, 5).text() == "pid 4242 python (11.0 GiB)"
    assert "CUDA_VISIBLE_DEVICES=0,1 " in panel.preview.command_text()

    qtbot.mouseClick(picker.pick_button, Qt.MouseButton.LeftButton)
    picker.set_gpu_checked(0, False)
    assert panel._form.state.gpus == (1,)
    shown = panel.preview.command_text()
    assert "CUDA_VISIBLE_DEVICES=1 " in shown and "--nproc-per-node=1" in shown and "RANKWATCH_BACKEND=nccl" in shown
    spec = panel._form.evaluation.spec
    assert shown == expected_command(spec, TWO_GPUS, tmp_path, RendezvousPlan(mode="standalone"))

    # The interpreter probe says MPI is missing: the backend box says so and will not offer it.
    qtbot.waitUntil(lambda: panel._form.interpreter_info(panel._form.head_python()) is not None, timeout=10_000)
    mpi_row = panel.backend.findData("mpi")
    assert panel.backend.itemText(mpi_row) == "mpi (unavailable)"
    assert not panel.backend.model().item(mpi_row).isEnabled()
    assert "this torch build has no MPI" in panel.backend.itemData(mpi_row, Qt.ItemDataRole.ToolTipRole)
    assert panel.interpreter_status.text() == "Python 3.11.9 · torch 2.4.1 · CUDA 12.1 (2 devices)"

    qtbot.mouseClick(picker.cpu_button, Qt.MouseButton.LeftButton)
    assert "CUDA_VISIBLE_DEVICES='' " in panel.preview.command_text()


def test_launch_is_disabled_with_the_cli_reason_until_the_form_is_fixed(qtbot, make_panel, script, tmp_path):
    panel = make_panel()
    missing = script.parent / "trian.py"
    qtbot.keyClicks(panel.entry.lineEdit(), str(missing))
    panel.env_table.add_variable("RANK", "0")

    assert not panel.launch_button.isEnabled()
    assert panel.status.text() == f"Cannot launch: script: {missing} does not exist  (+1 more)"
    entry_error = panel._field_errors[("script", "module")]
    assert entry_error.isVisible() and entry_error.text() == f"{missing} does not exist"
    env_error = panel._field_errors[("env",)]
    assert env_error.text() == "env.RANK: set by torchrun for each worker; remove it from env"
    assert panel.status.toolTip().count("\n") == 1  # both problems listed

    panel.entry.lineEdit().selectAll()
    qtbot.keyClicks(panel.entry.lineEdit(), str(script))
    panel.env_table.table.setCurrentCell(0, 0)
    qtbot.mouseClick(panel.env_table.remove_button, Qt.MouseButton.LeftButton)
    assert not entry_error.isVisible() and not env_error.isVisible()
    assert panel.launch_button.isEnabled()

    with qtbot.waitSignal(panel.launch_requested, timeout=15_000) as launched:
        qtbot.mouseClick(panel.launch_button, Qt.MouseButton.LeftButton)
    spec, profile_name, base_dir = launched.args
    assert spec.script == str(script) and profile_name is None and base_dir == tmp_path
    assert AppSettings().recent_scripts()[0] == str(script)


def test_an_interpreter_without_torch_blocks_launch_with_the_check_message(qtbot, make_panel, script, tmp_path,
                                                                           monkeypatch):
    panel = make_panel()
    python = tmp_path / "notorch" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text("#!/bin/sh\nexit 1\n")
    python.chmod(0o755)
    qtbot.keyClicks(panel.entry.lineEdit(), str(script))
    monkeypatch.setattr(QFileDialog, "getOpenFileName", lambda *args, **kwargs: (str(python), ""))

    qtbot.mouseClick(panel.browse_interpreter_button, Qt.MouseButton.LeftButton)
    assert panel._form.state.interpreter == str(python)
    assert panel.interpreter.currentData() == str(python)
    qtbot.waitUntil(lambda: "torch not installed" in panel.interpreter_status.text(), timeout=10_000)
    message = (f"torch is not installed for {python}; install it there ({python} -m pip install torch) "
               "or pick another interpreter")
    assert panel._field_errors[("interpreter",)].text() == message
    assert not panel.launch_button.isEnabled()
    assert str(python) in panel.preview.command_text()


def test_a_second_node_needs_a_multi_node_rendezvous_and_gets_its_own_command(qtbot, make_panel, script):
    panel = make_panel()
    qtbot.keyClicks(panel.entry.lineEdit(), str(script))
    qtbot.mouseClick(panel.nodes_table.add_button, Qt.MouseButton.LeftButton)
    panel.nodes_table.set_cell(1, 0, "node2")

    rendezvous_error = panel._field_errors[("rendezvous",)]
    assert rendezvous_error.isVisible()
    assert rendezvous_error.text().startswith('rendezvous.mode: "standalone" runs on one node only, but 2 nodes')
    assert not panel.launch_button.isEnabled()

    panel.rendezvous.setCurrentIndex(panel.rendezvous.findData("c10d"))
    assert panel.endpoint.isVisible() and not panel.master_addr.isVisible()
    qtbot.keyClicks(panel.endpoint, "node0:29400")
    assert not rendezvous_error.isVisible()
    qtbot.waitUntil(lambda: not panel._form.evaluation.planning, timeout=10_000)  # planned off the GUI thread
    assert panel.preview.node_box.isVisible() and panel.preview.node_box.count() == 2
    commands = [command.text for command in panel._form.evaluation.commands]
    assert panel.preview.command_text() == commands[0]
    panel.preview.node_box.setCurrentIndex(1)
    assert plain_command(panel.preview.text.toPlainText()) == commands[1]
    assert "--rdzv-endpoint=node0:29400" in commands[1] and "--rdzv-id=rankwatch-" in commands[1]
    assert "job id" in panel.preview.picks.text()


@pytest.fixture
def window(qtbot, tmp_path):
    window = MainWindow(probe=fake_probe(tmp_path, NO_GPUS), initial_profile="example")
    qtbot.addWidget(window)
    window.show()
    qtbot.waitUntil(lambda: window.launch_panel.launch_button.isEnabled(), timeout=10_000)
    return window


def test_ctrl_r_launches_the_example_into_the_monitor_tab(qtbot, window, monkeypatch):
    launched = []
    monkeypatch.setattr(window.monitor, "launch",
                        lambda spec, profile_name, base_dir: launched.append((spec, profile_name, base_dir)))
    window.activateWindow()
    qtbot.waitUntil(window.isActiveWindow, timeout=15_000)

    assert window.launch_action.shortcut() == QKeySequence("Ctrl+R")
    qtbot.keyClick(window, Qt.Key.Key_R, Qt.KeyboardModifier.ControlModifier)
    assert len(launched) == 1
    spec, profile_name, base_dir = launched[0]
    assert profile_name == "example" and spec == window.form.evaluation.spec
    assert base_dir == window.form.base_dir
    assert window.tabs.currentWidget() is window.monitors

    # An edited, unsaved form is not recorded under the profile's name as if it were the profile.
    window.form.update(args_text="--epochs 1")
    qtbot.keyClick(window, Qt.Key.Key_R, Qt.KeyboardModifier.ControlModifier)
    assert launched[-1][1] == "example (edited)"


def test_stop_asks_first_and_forces_when_asked_again(qtbot, window, monkeypatch):
    stops = []
    monkeypatch.setattr(window.monitor, "has_live_run", lambda: True)
    monkeypatch.setattr(window.monitor, "request_stop", lambda force=False: stops.append(force))
    answers = iter(["Stop run", "Kill now"])

    def click(box: QMessageBox) -> int:
        wanted = next(answers, None)
        for button in box.buttons():
            if button.text() == wanted:
                button.click()
        return 0  # anything else asked (closing at the end) is left unanswered: cancelled

    monkeypatch.setattr(QMessageBox, "exec", click)
    window.monitor.run_state_changed.emit("running")
    assert window.stop_action.isEnabled()
    assert window.launch_panel.launch_button.isEnabled()  # several runs may go at once
    assert window.stop_action.shortcut() == QKeySequence("Ctrl+.")

    window.stop_action.trigger()
    window.monitor.run_state_changed.emit("stopping")
    window.stop_action.trigger()
    assert stops == [False, True]


def test_closing_with_a_live_run_can_leave_it_running_or_cancel(qtbot, window, monkeypatch):
    detached = []
    monkeypatch.setattr(window.monitor, "has_live_run", lambda: True)
    monkeypatch.setattr(window.monitor, "detach", lambda: detached.append(True))

    monkeypatch.setattr(window, "_ask_live_run_choice", lambda: "cancel")
    window.close()
    assert window.isVisible() and detached == []

    monkeypatch.setattr(window, "_ask_live_run_choice", lambda: LEAVE_RUNNING)
    window.close()
    assert not window.isVisible() and detached == [True]


def test_window_geometry_and_splitter_are_remembered(qtbot, tmp_path):
    first = MainWindow(probe=fake_probe(tmp_path, NO_GPUS), initial_profile="example")
    qtbot.addWidget(first)
    first.show()
    first.resize(760, 540)  # fits the offscreen screen (800x600), so no clamping
    first.launch_panel.splitter.setSizes([260, 500])
    qtbot.waitUntil(lambda: first.launch_panel.splitter.sizes()[0] == 260)
    first.close()

    second = MainWindow(probe=fake_probe(tmp_path, NO_GPUS))
    qtbot.addWidget(second)
    second.show()
    assert (second.width(), second.height()) == (760, 540)
    assert second.launch_panel.splitter.sizes()[0] == 260
    assert os.path.exists(AppSettings()._settings.fileName())


def test_more_processes_than_cores_in_cpu_mode_shows_a_warning_but_can_launch(qtbot, make_panel, script):
    panel = make_panel()
    qtbot.keyClicks(panel.entry.lineEdit(), str(script))
    assert panel.gpu_picker.cpu_button.isChecked() and not panel.gpu_picker.all_button.isEnabled()
    assert not panel.nproc_warning.isVisible()
    cores = usable_cpus()
    panel.nproc.setValue(cores + 2)
    assert panel.nproc_warning.isVisible()
    assert panel.nproc_warning.text().startswith(f"{cores + 2} processes on {cores} CPU core")
    assert panel.launch_button.isEnabled()  # a warning, not an error
    panel.nproc.setValue(cores)
    assert not panel.nproc_warning.isVisible()


def test_launch_mode_is_a_choice_that_says_what_auto_picked_and_templates_preview_per_rank(qtbot, make_panel,
                                                                                           script):
    panel = make_panel()
    form = panel._form
    script.write_text("import torch.multiprocessing as mp\n\nmp.spawn(demo, nprocs=2)\n")
    qtbot.keyClicks(panel.entry.lineEdit(), str(script))
    qtbot.waitUntil(lambda: form.evaluation.launch is not None and form.evaluation.launch.self_spawn)
    assert panel.launch_mode.currentData() == "auto"
    assert panel.launch_mode_hint.text() == "= self-spawn: the script starts its own ranks: mp.spawn(...) on line 3"
    assert panel.preview.command_text().endswith(f"-u {script}")  # no torchrun: the script, started once
    assert panel.status.text() == "Ready: the script, which starts its own ranks (self-spawn) · CPU · gloo"

    panel.launch_mode.setCurrentIndex(panel.launch_mode.findData("torchrun"))
    assert form.evaluation.spec.launch_mode == "torchrun" and panel.launch_mode_hint.text() == ""
    qtbot.keyClicks(panel.args, "--rank {rank} --world_size {world_size}")
    type_into(qtbot, panel.nproc, "2")
    qtbot.waitUntil(lambda: "# rank 1: " in panel.preview.command_text())
    assert panel.preview.command_text().splitlines()[-1].endswith(f"{script} --rank 1 --world_size 2")

    panel.launch_mode.setCurrentIndex(panel.launch_mode.findData("self-spawn"))  # no torchrun to give {rank}
    qtbot.waitUntil(lambda: form.evaluation.errors_for("launch_mode") != [])
    assert "{rank} have no value" in form.evaluation.errors_for("launch_mode")[0]
    assert not panel.launch_button.isEnabled()
