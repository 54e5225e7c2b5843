"""The launch form's Slurm section: its Qt-free model, the widget driven like a person does,
and the section inside the real launch panel (offscreen)."""

from __future__ import annotations

import sys

import pytest
from PySide6.QtCore import Qt

from gui.gateway.probe import RunnerProbe
from gui.models.launch_form import LaunchFormModel
from gui.models.profiles import ProfileListModel
from gui.models.slurm_form import SlurmForm
from gui.settings import AppSettings
from gui.widgets.launch_panel import LaunchPanel
from gui.widgets.slurm_section import SlurmSection
from runner.profile.parse import spec_from_dict
from runner.profile.spec import SlurmSpec
from runner.sampling.gpu_report import GpuReport

pytestmark = [pytest.mark.gui]
NO_GPUS = GpuReport(available=False, reason="NVIDIA driver not installed")
SLURM_PROFILE = {"script": "train.py", "nproc_per_node": 4,
                 "slurm": {"nodes": 2, "gpus_per_node": 4, "partition": "gpu", "time_limit": "2:00:00",
                           "sbatch_options": ["--mem=0", "--constraint=a100"], "login_host": "login1",
                           "login_user": "me", "telemetry_route": "login"}}


@pytest.fixture
def form(tmp_path) -> LaunchFormModel:
    model = LaunchFormModel(base_dir=tmp_path)
    model.set_gpu_report(NO_GPUS)
    return model


# ---- the model, without Qt ---------------------------------------------------------------------

def test_a_loaded_slurm_profile_shows_in_the_section_and_means_the_same_spec(form, tmp_path):
    spec = spec_from_dict(SLURM_PROFILE)
    form.load(spec, profile_name="cluster", base_dir=tmp_path)
    slurm = form.state.slurm
    assert (slurm.enabled, slurm.nodes, slurm.login, slurm.sbatch_options_text) == \
        (True, 2, "me@login1", "--mem=0\n--constraint=a100")
    evaluation = form.evaluation
    assert evaluation.spec == spec and not evaluation.dirty and not evaluation.errors
    [preview] = evaluation.commands
    assert preview.text.startswith("#!/bin/bash\n") and "#SBATCH --gpus-per-node=4" in preview.text


def test_section_edits_are_judged_by_the_spec_parser_with_its_field_names(form):
    form.update(entry="train.py", slurm=SlurmForm(enabled=True, time_limit="1h"))
    assert form.evaluation.errors_for("slurm") == [
        "slurm.time_limit: '1h' is not a Slurm time limit; use minutes (\"30\"), \"HH:MM:SS\" or \"D-HH:MM:SS\""]
    form.update(slurm=form.state.slurm.with_changes(time_limit="30"))
    assert form.evaluation.can_launch and form.evaluation.spec.slurm == SlurmSpec(time_limit="30")
    form.update(slurm=form.state.slurm.with_changes(enabled=False))
    assert form.evaluation.spec.slurm is None and form.evaluation.commands[0].text.startswith("cd ")


# ---- the widget ----------------------------------------------------------------------------------

def test_the_section_writes_what_is_typed_and_shows_the_parsers_errors(qtbot, form):
    section = SlurmSection(form)
    qtbot.addWidget(section)
    section.show()
    form.update(entry="train.py")
    assert not section.isChecked() and form.evaluation.spec.slurm is None
    section.setChecked(True)
    section.nodes.setValue(2)
    qtbot.keyClicks(section.partition, "debug")
    qtbot.keyClicks(section.time_limit, "soon")
    assert section.errors.isVisible()
    assert section.errors.text().startswith("slurm.time_limit: 'soon' is not a Slurm time limit")
    section.time_limit.selectAll()
    qtbot.keyClicks(section.time_limit, "45")
    qtbot.keyClicks(section.login, "me@login1")
    section.sbatch_options.setPlainText("--mem=8G\n")
    assert not section.errors.isVisible()
    assert form.evaluation.spec.slurm == SlurmSpec(nodes=2, partition="debug", time_limit="45", login_host="login1",
                                                   login_user="me", sbatch_options=("--mem=8G",))
    assert section.summary.text() == "2 nodes x CPU, debug, 45 (submitted from me@login1)"


def test_loading_a_profile_fills_the_section(qtbot, form, tmp_path):
    section = SlurmSection(form)
    qtbot.addWidget(section)
    form.load(spec_from_dict(SLURM_PROFILE), profile_name="cluster", base_dir=tmp_path)
    assert section.isChecked() and section.nodes.value() == 2 and section.gpus_per_node.value() == 4
    assert section.partition.text() == "gpu" and section.login.text() == "me@login1"
    assert section.route.currentData() == "login"
    assert not form.evaluation.dirty  # populating the widgets wrote nothing back


# ---- inside the launch panel ---------------------------------------------------------------------

FAKE_PROBE = """import json, sys
args = sys.argv[1:]
answer = {"gpus": {"available": False, "reason": "no driver", "driver_version": None, "cuda_driver_version": None,
                   "gpus": []}, "interpreter": None}
if "--gpus-only" not in args:
    answer["interpreter"] = {"python": args[args.index("--interpreter") + 1], "ok": True, "error": None,
                             "python_version": "3.11", "torch": "2.4.1", "cuda_available": False, "device_count": 0,
                             "backends": {"gloo": {"available": True, "reason": None}}}
print(json.dumps(answer))
"""


def test_the_launch_panel_has_the_section_and_previews_the_sbatch_script(qtbot, tmp_path):
    program = tmp_path / "fake_probe.py"
    program.write_text(FAKE_PROBE)
    form = LaunchFormModel(base_dir=tmp_path)
    probe = RunnerProbe(command=[sys.executable, str(program)])
    panel = LaunchPanel(form, ProfileListModel(), probe, AppSettings(tmp_path / "settings.ini"))
    probe.setParent(panel)
    qtbot.addWidget(panel)
    panel.show()
    qtbot.waitUntil(lambda: form.gpu_report is not None, timeout=10_000)
    script = tmp_path / "train.py"
    script.write_text("")
    qtbot.keyClicks(panel.entry.lineEdit(), str(script))
    assert panel.nodes_table.isEnabled()
    panel.slurm_section.setChecked(True)
    assert not panel.nodes_table.isEnabled()  # Slurm allocates the nodes
    assert panel.preview.command_text().startswith("#!/bin/bash\n# Rankwatch: train.py on Slurm: 1 node(s)")
    qtbot.waitUntil(lambda: panel.launch_button.isEnabled(), timeout=10_000)
    launched = []
    panel.launch_requested.connect(lambda spec, name, base: launched.append(spec))
    qtbot.mouseClick(panel.launch_button, Qt.MouseButton.LeftButton)
    assert launched and launched[0].slurm == SlurmSpec()
