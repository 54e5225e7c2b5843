"""The doctor's facts are one typed value for `rankwatch doctor` and the GUI's Doctor panel
(``runner.diagnosis.doctor_facts``): a report reads back into it and writes the same JSON, and
a report with a part missing or malformed reads leniently in both, instead of a KeyError."""

from __future__ import annotations

import json
from pathlib import Path

from gui.models.doctor import parse_doctor_output
from runner.diagnosis.doctor import judge
from runner.diagnosis.doctor_facts import DoctorFacts, InterpreterFacts

RECORDED = Path(__file__).resolve().parent.parent / "gui" / "data" / "doctor.json"


def test_a_recorded_report_reads_into_the_facts_and_writes_the_same_json():
    report = json.loads(RECORDED.read_text())
    facts = {key: value for key, value in report.items() if key not in ("checks", "ok", "seconds")}
    read = DoctorFacts.from_json(facts)
    assert isinstance(read.interpreter, InterpreterFacts) and read.interpreter.torch == facts["interpreter"]["torch"]
    assert json.dumps(read.to_json()) == json.dumps(facts)  # every key, in the order it was written


def test_a_report_with_missing_and_malformed_parts_reads_in_the_runner_and_the_panel():
    partial = {"gpus": {"available": True, "driver_version": "550.54",
                        "gpus": [{"index": 0, "name": "H100", "memory_used": 1 << 30, "memory_total": 80 << 30,
                                  "processes": "junk"}]},
               "interpreter": {"ok": True, "python": "/p", "python_version": "3.11", "torch": "2.5",
                               "environment": "junk", "backends": {"gloo": {"available": True}, "nccl": "junk"}}}
    facts = DoctorFacts.from_json(partial)
    assert list(facts.interpreter.backends) == ["gloo"] and facts.interpreter.environment is None
    checks = {check.key: check.message for check in judge(facts)}
    assert checks["backends"] == "usable backends: none"  # the report has no backends part: none known
    assert "gpu_users" not in checks and "environment" not in checks
    shown = parse_doctor_output(json.dumps({**partial, "checks": []}))
    assert dict(shown.section("GPUs").rows)["GPU 0"] == "H100: 1.0 GiB / 80.0 GiB used; idle"
    assert shown.section("Environment") is None


def test_the_panel_keeps_the_runners_facts_and_words_cudnn_with_the_runners_rule():
    from gui.models import doctor as gui_doctor

    report = parse_doctor_output(RECORDED.read_text())
    assert isinstance(report.facts, DoctorFacts)
    cudnn = report.facts.interpreter.cudnn
    assert cudnn is not None and dict(report.section("Interpreter").rows)["cuDNN / NCCL"].startswith(f"{cudnn} / ")
    assert not hasattr(gui_doctor, "cudnn_text")  # one rule, the runner's
