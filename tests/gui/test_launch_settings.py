"""The launch form's settings rows (telemetry) and its rendezvous planning off the GUI thread.

Real widgets (offscreen) against the real form model and the runner's own parser: a
profile's ``[telemetry]`` is shown and edited in the Telemetry section, a bad value gets
the parser's message under its row, and a test-only setting declared on a spec class
appears on the form with no edit to the form or the panel.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from PySide6.QtCore import QPoint, Qt
from PySide6.QtWidgets import QCheckBox, QLineEdit

from gui.gateway.launch_rules import LaunchRules
from gui.gateway.probe_output import unavailable_report
from gui.models.launch_form import FormState, LaunchFormModel
from gui.models.profiles import ProfileListModel
from gui.models.rendezvous_planner import RendezvousPlanner
from gui.settings import AppSettings
from gui.widgets.launch_panel import LaunchPanel
from runner.profile.files import read_spec_file
from runner.profile.spec import LaunchSpec
from tests.gui.test_launch_panel import NO_GPUS, fake_probe
from tests.runner.test_spec_schema import SpecPlus, TelemetryPlus


@pytest.fixture
def script(tmp_path: Path) -> Path:
    path = tmp_path / "train.py"
    path.write_text("print('training')\n")
    return path


@pytest.fixture
def make_panel(qtbot, tmp_path):
    def make(schema: type[LaunchSpec] = LaunchSpec) -> LaunchPanel:
        probe = fake_probe(tmp_path, NO_GPUS)
        form = LaunchFormModel(base_dir=tmp_path, schema=schema)
        panel = LaunchPanel(form, ProfileListModel(), probe, AppSettings())
        probe.setParent(panel)
        qtbot.addWidget(panel)
        panel.resize(1300, 900)
        panel.show()
        qtbot.waitUntil(lambda: form.gpu_report is not None, timeout=10_000)
        return panel
    return make


def editor(panel: LaunchPanel, path: str):
    return panel.settings_sections["Telemetry"].editors[path]


def retype(qtbot, line: QLineEdit, text: str) -> None:
    line.selectAll()
    qtbot.keyClick(line, Qt.Key.Key_Delete)
    qtbot.keyClicks(line, text)


def test_a_profiles_stall_timeout_is_shown_and_edited_in_the_telemetry_section(qtbot, make_panel, script, tmp_path):
    profile = tmp_path / "stalls.toml"
    profile.write_text(f'script = "{script}"\n\n[telemetry]\nstall_timeout = 10\nhash_every = 50\nparse_stdout = true\n')
    panel = make_panel()
    form = panel._form
    form.load(read_spec_file(profile), profile_name="stalls", base_dir=tmp_path)

    stall = editor(panel, "telemetry.stall_timeout")
    assert isinstance(stall, QLineEdit) and stall.isVisible()
    assert stall.text() == "10"
    assert editor(panel, "telemetry.hash_every").text() == "50"
    assert editor(panel, "telemetry.sample_interval").text() == "1"
    parse_stdout = editor(panel, "telemetry.parse_stdout")
    assert isinstance(parse_stdout, QCheckBox) and parse_stdout.isChecked()
    assert editor(panel, "telemetry.instrument").isChecked()
    assert not form.dirty

    retype(qtbot, stall, "30")
    assert form.evaluation.spec is not None and form.evaluation.spec.telemetry.stall_timeout == 30.0
    assert form.dirty and panel.launch_button.isEnabled()
    instrument = editor(panel, "telemetry.instrument")
    qtbot.mouseClick(instrument, Qt.MouseButton.LeftButton, pos=QPoint(6, instrument.height() // 2))
    assert form.evaluation.spec.telemetry.instrument is False

    stall.clear()  # empty: auto, from the rank's step times
    stall.textEdited.emit("")
    assert form.evaluation.spec.telemetry.stall_timeout is None
    assert form.spec_for_launch().telemetry.stall_timeout is None


def test_a_bad_telemetry_value_gets_the_parsers_message_under_its_row_and_blocks_launch(qtbot, make_panel, script):
    panel = make_panel()
    qtbot.keyClicks(panel.entry.lineEdit(), str(script))
    assert panel.launch_button.isEnabled()
    section = panel.settings_sections["Telemetry"]

    retype(qtbot, editor(panel, "telemetry.stall_timeout"), "0.5")
    error = section.errors["telemetry.stall_timeout"]
    assert error.isVisible()
    assert error.text() == "0.5 is out of range; must be between 1.0 and 86400.0"
    assert not panel.launch_button.isEnabled()
    assert panel.status.text().startswith("Cannot launch: telemetry.stall_timeout: 0.5 is out of range")

    retype(qtbot, editor(panel, "telemetry.stall_timeout"), "soon")
    assert error.text() == "expected a number of seconds between 1 and 86400 or \"auto\", got 'soon'"
    retype(qtbot, editor(panel, "telemetry.stall_timeout"), "auto")
    assert not error.isVisible() and panel.launch_button.isEnabled()

    retype(qtbot, editor(panel, "telemetry.loss_pattern"), "loss=")
    assert section.errors["telemetry.loss_pattern"].text().startswith("needs one capturing group")
    retype(qtbot, editor(panel, "telemetry.loss_pattern"), r"loss=(\S+)")
    retype(qtbot, editor(panel, "telemetry.hash_every"), "-3")
    assert section.errors["telemetry.hash_every"].text() == "-3 is out of range; must be >= 0"
    retype(qtbot, editor(panel, "telemetry.hash_every"), "100")
    retype(qtbot, editor(panel, "telemetry.sample_interval"), "0.5")
    assert panel.launch_button.isEnabled()
    telemetry = panel._form.spec_for_launch().telemetry
    assert (telemetry.loss_pattern, telemetry.hash_every, telemetry.sample_interval) == (r"loss=(\S+)", 100, 0.5)


def test_a_setting_declared_on_a_test_only_spec_appears_on_the_form_without_other_edits(qtbot, make_panel, script):
    panel = make_panel(SpecPlus)
    form = panel._form
    qtbot.keyClicks(panel.entry.lineEdit(), str(script))

    warmup = panel.settings_sections["Training"].editors["warmup_steps"]
    flush = panel.settings_sections["Telemetry"].editors["telemetry.flush_every"]
    assert warmup.isVisible() and flush.isVisible()
    assert flush.placeholderText() == "" and flush.text() == "2"
    retype(qtbot, warmup, "12")
    retype(qtbot, flush, "0.75")
    spec = form.spec_for_launch()
    assert isinstance(spec, SpecPlus)
    assert spec.warmup_steps == 12 and spec.telemetry == TelemetryPlus(flush_every=0.75)

    retype(qtbot, warmup, "5000")
    assert panel.settings_sections["Training"].errors["warmup_steps"].text() == (
        "5000 is out of range; must be between 0 and 1000")

    # The Qt-free model alone, too: loaded, kept in the form's table, dirty when edited.
    model = LaunchFormModel(schema=SpecPlus)
    model.load(SpecPlus(script=str(script), warmup_steps=4), profile_name="plus", base_dir=script.parent)
    assert model.state.setting("warmup_steps") == "4" and not model.dirty
    assert FormState.from_spec(SpecPlus(script="a.py", warmup_steps=4)).to_table()["warmup_steps"] == 4
    model.update_setting("telemetry.flush_every", "9")
    assert model.dirty and model.evaluation.spec.telemetry.flush_every == 9.0


def test_rendezvous_planning_runs_once_off_the_gui_thread_while_an_endpoint_is_typed(qtbot, make_panel, script,
                                                                                     monkeypatch):
    """Planning a c10d rendezvous looks the endpoint's host up (DNS); here it takes 0.5 s."""
    calls: list[str] = []
    real = LaunchRules.plan_rendezvous

    def slow_plan(launch):
        calls.append(threading.current_thread().name)
        time.sleep(0.5)
        return real(launch)

    monkeypatch.setattr(LaunchRules, "plan_rendezvous", staticmethod(slow_plan))
    panel = make_panel()
    qtbot.keyClicks(panel.entry.lineEdit(), str(script))
    panel.rendezvous.setCurrentIndex(panel.rendezvous.findData("c10d"))
    calls.clear()  # standalone, planned so far, binds nothing and looks nothing up: planned inline

    started = time.monotonic()
    qtbot.keyClicks(panel.endpoint, "localhost:29431")
    typing = time.monotonic() - started
    assert typing < 1.0, f"typing 15 characters took {typing:.1f} s: planned on the GUI thread"
    assert not panel.launch_button.isEnabled() and panel.status.text() == "Checking the rendezvous…"

    qtbot.waitUntil(lambda: not panel._form.evaluation.planning, timeout=10_000)
    assert calls and set(calls) == {"rendezvous-planner"}
    assert len(calls) <= 2  # debounced: not one plan per keystroke
    assert panel.launch_button.isEnabled()
    assert "--rdzv-endpoint=localhost:29431" in panel.preview.command_text()


def test_the_planner_plans_only_the_latest_request_once_it_is_quiet():
    delivered: list[tuple[object, object]] = []
    done = threading.Event()

    def deliver(key, result):
        delivered.append((key, result))
        done.set()

    planner = RendezvousPlanner(deliver, delay=0.05)
    try:
        for key in range(5):
            planner.submit(key, lambda key=key: f"plan {key}")
        assert done.wait(5)
        time.sleep(0.1)
        assert delivered == [(4, "plan 4")]
    finally:
        planner.stop()


def test_the_model_waits_for_a_background_plan_and_ignores_one_for_inputs_since_changed(script, tmp_path):
    """Qt-free: the form hands slow plans to ``submit`` and uses only the answer it still wants."""
    submitted: list[tuple[object, object]] = []
    model = LaunchFormModel(base_dir=tmp_path)
    model.plan_in_background(lambda key, work: submitted.append((key, work)))
    model.set_gpu_report(unavailable_report("no GPUs here"))
    model.update(entry=str(script), gpus="cpu", rendezvous_mode="c10d", endpoint="localhost:29432")

    assert model.evaluation.planning and not model.evaluation.can_launch
    assert model.evaluation.launch_blocker == "Checking the rendezvous…"
    [(first_key, first_work)] = submitted
    model.update(endpoint="localhost:29433")
    [_, (second_key, second_work)] = submitted

    model.plan_ready(first_key, first_work())  # for inputs the form no longer has: dropped
    assert model.evaluation.planning
    model.plan_ready(second_key, second_work())
    assert not model.evaluation.planning and model.evaluation.can_launch
    assert "--rdzv-endpoint=localhost:29433" in model.evaluation.commands[0].text

    model.update(rendezvous_mode="standalone")  # binds nothing, looks nothing up: planned inline
    assert not model.evaluation.planning and len(submitted) == 2
