"""The Doctor panel runs the real ``rankwatch doctor --json`` in the background and shows its checks.

One test opens it from the window's Tools menu and lets it run for real (~1.5 s:
it probes torch in the form's interpreter); the others feed it the recorded report
(``data/doctor.json``, from ``data/capture.py``) or a doctor that cannot start.
"""

from __future__ import annotations

import json
import sys

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QMessageBox
from replay_run import DATA

from gui.gateway.probe import RunnerProbe
from gui.main_window import MainWindow
from gui.models.doctor import DONE, FAIL, FAILED, OK, WARN, DoctorError, parse_doctor_output
from gui.widgets.doctor_panel import STATUS_COLORS, DoctorPanel

pytestmark = pytest.mark.gui


@pytest.fixture(autouse=True)
def unanswered_dialogs_cancel(monkeypatch):
    cancel = QMessageBox.StandardButton.Cancel
    for name in ("question", "warning", "critical", "information"):
        monkeypatch.setattr(QMessageBox, name, lambda *args, **kwargs: cancel)


def recorded_report() -> str:
    return (DATA / "doctor.json").read_text(encoding="utf-8")


def test_tools_doctor_runs_the_real_doctor_for_the_forms_interpreter_and_shows_every_check(qtbot, tmp_path):
    probe = RunnerProbe(command=[str(tmp_path / "no-probe-here")])  # the launch form's probe is not under test
    window = MainWindow(probe=probe, initial_profile="example")
    qtbot.addWidget(window)
    window.show()
    menus = {action.text(): action.menu() for action in window.menuBar().actions()}
    assert window.doctor_action in menus["&Tools"].actions()  # Tools ▸ Doctor…
    window.doctor_action.trigger()
    dialog = window.doctor_dialog
    panel = dialog.panel
    assert dialog.isVisible() and panel.is_running()
    assert not panel.rerun_button.isEnabled() and "Checking this machine" in panel.status.text()
    qtbot.waitUntil(lambda: panel.model.state == DONE, timeout=60_000)

    report = panel.model.report
    interpreter = window.form.head_python()
    assert panel.model.interpreter == interpreter
    rows = panel.check_rows()
    assert rows == [(c.status, c.key, c.message) for c in report.checks] and len(rows) >= 6
    assert {"interpreter", "backends", "port", "omp_threads", "cuda_visible_devices"} <= {key for _s, key, _m in rows}
    [interpreter_row] = [row for row in rows if row[1] == "interpreter"]
    assert interpreter_row[0] == OK and interpreter_row[2].startswith(f"{interpreter}: Python ")
    assert all(status in (OK, "info", WARN, FAIL) for status, _k, _m in rows)
    assert panel.section_titles() == ["System", "Interpreter", "GPUs", "Backends", "Port", "Threads",
                                      "CUDA_VISIBLE_DEVICES", "Environment"]
    assert dict(panel.section_rows("Backends"))["Usable"].split(", ")[0] == "gloo"
    assert panel.status.text() == report.verdict and report.verdict.startswith("Ready: ")

    qtbot.mouseClick(panel.rerun_button, Qt.MouseButton.LeftButton)  # again, never blocking
    assert panel.is_running() and panel.model.runs == 2
    qtbot.waitUntil(lambda: panel.model.state == DONE, timeout=60_000)
    assert [key for _s, key, _m in panel.check_rows()] == [key for _s, key, _m in rows]
    dialog.close()


def test_the_recorded_report_shows_statuses_and_sections(qtbot):
    panel = DoctorPanel(lambda: sys.executable)
    qtbot.addWidget(panel)
    data = json.loads(recorded_report())
    data["checks"].append({"key": "port", "status": "fail", "message": "port 29500 is in use by pid 12 (python x.py)"})
    data["ok"] = False
    panel.model.started(sys.executable)
    panel.model.finished(json.dumps(data), "", 1)
    statuses = [status for status, _key, _message in panel.check_rows()]
    assert statuses == [c["status"] for c in data["checks"]]
    last = panel.checks.item(panel.checks.rowCount() - 1, 0)
    assert last.text() == "✖ failed" and last.foreground().color() == STATUS_COLORS[FAIL]
    driver = panel.checks.item(0, 0)
    assert driver.text() == "▲ warning" and driver.foreground().color() == STATUS_COLORS[WARN]
    assert panel.status.text() == "Not ready: 1 failed, 1 warning, 1 info, 6 ok (checked in 1.5 s)"
    interpreter = dict(panel.section_rows("Interpreter"))
    assert interpreter["cuDNN / NCCL"] == "9.24.0 / 2.30.7"
    assert interpreter["torch"] == data["interpreter"]["torch"]
    assert dict(panel.section_rows("GPUs")) == {"GPUs": f"none ({data['gpus']['reason']})"}
    assert dict(panel.section_rows("CUDA_VISIBLE_DEVICES"))["In the environment"] == "not set"
    assert dict(panel.section_rows("Environment"))["Kind"] == "virtual environment"


def test_a_doctor_that_cannot_start_or_prints_no_report_is_said_so(qtbot, tmp_path):
    panel = DoctorPanel(lambda: "/nonexistent/python", command=[str(tmp_path / "missing-program")])
    qtbot.addWidget(panel)
    with qtbot.waitSignal(panel.finished, timeout=10_000) as finished:
        panel.run()
    assert finished.args == [False]
    assert panel.model.state == FAILED and panel.status.text().startswith("The doctor could not run: cannot start ")
    assert panel.rerun_button.isEnabled()
    with pytest.raises(DoctorError):
        parse_doctor_output("Traceback (most recent call last):\n  ...\n")
