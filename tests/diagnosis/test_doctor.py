"""`rankwatch doctor`: the real command on this machine, and each judgement on chosen facts."""

from __future__ import annotations

import json
import socket

from runner.diagnosis.doctor import DoctorFacts, cudnn_text, judge
from runner.diagnosis.doctor_checks import CheckStatus, DoctorCheck
from tests.jobs import rankwatch


def test_doctor_on_this_machine_says_no_driver_and_which_backends_work():
    # How long doctor takes is a benchmark figure (tests/bench/PERFORMANCE.md), not asserted here.
    result = rankwatch("doctor", timeout=60)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "no NVIDIA driver" in out
    assert "usable backends: gloo; not usable: nccl: CUDA is not available" in out
    assert "mpi: this torch build has no MPI" in out
    assert "torch 2." in out and "virtual environment" in out


def test_doctor_json_has_the_documented_shape_and_probes_the_chosen_interpreter(tmp_path):
    holder = socket.socket()
    holder.bind(("", 0))
    holder.listen()
    port = holder.getsockname()[1]
    try:
        result = rankwatch("doctor", "--json", "--port", str(port), "--nproc-per-node", "4", timeout=60)
    finally:
        holder.close()
    report = json.loads(result.stdout)
    assert set(report) >= {"ok", "seconds", "system", "runner", "interpreter", "gpus", "backends", "port",
                           "threads", "cuda_visible_devices", "checks"}
    assert report["backends"]["usable"] == ["gloo"] and set(report["backends"]["unusable"]) == {"nccl", "mpi"}
    assert report["gpus"]["available"] is False
    assert report["interpreter"]["environment"]["virtualenv"] is True
    assert report["port"] == {"port": port, "free": False, "holder": report["port"]["holder"]}
    checks = {c["key"]: c for c in report["checks"]}
    assert checks["port"]["status"] == "warn" and f"port {port} is in use" in checks["port"]["message"]
    assert report["threads"]["processes"] == 4
    missing = rankwatch("doctor", "--json", "--interpreter", str(tmp_path / "no-python"), timeout=60)
    assert missing.returncode == 1
    bad = json.loads(missing.stdout)
    assert bad["ok"] is False and {"key": "interpreter", "status": "fail",
                                   "message": f"{tmp_path / 'no-python'}: no such interpreter"} in bad["checks"]


def facts(**changes) -> dict:
    base = {
        "gpus": {"available": True, "reason": None, "driver_version": "550.54", "cuda_driver_version": "12.4",
                 "gpus": [{"index": 0, "name": "A100", "processes": []}, {"index": 1, "name": "A100",
                                                                           "processes": [{"pid": 77, "used_memory": 2 << 30}]}]},
        "interpreter": {"ok": True, "python": "/p/bin/python", "python_version": "3.11.7", "torch": "2.5.0",
                        "cuda_version": "12.6", "cuda_available": True, "device_count": 2, "nccl_version": "2.21.5",
                        "cudnn_version": 90100, "environment": {"virtualenv": False, "conda": True, "prefix": "/c"}},
        "backends": {"usable": ["gloo", "nccl"], "unusable": {"mpi": "no MPI"}},
        "port": {"port": 29500, "free": True, "holder": None},
        "threads": {"omp_num_threads": "4", "processes": 2, "usable_cpus": 4, "rankwatch_sets": 2},
        "cuda_visible_devices": {"environment": "1,3", "picked": [0, 1], "rankwatch_sets": "0,1"},
    }
    base.update(changes)
    return base


def test_the_judgements_on_a_gpu_machine():
    checks = {}
    for check in judge(DoctorFacts.from_json(facts())):
        checks.setdefault(check.key, []).append(check.to_json())
    assert checks["driver"][0]["status"] == "ok" and "550.54" in checks["driver"][0]["message"]
    assert checks["environment"][0]["message"] == "conda environment /c"
    assert checks["cuda"][0]["message"].startswith("torch built for CUDA 12.6, cuDNN 9.1.0, NCCL 2.21.5")
    assert checks["cuda_driver"][0]["status"] == "warn"  # driver CUDA 12.4 < build 12.6
    assert checks["gpu_users"][0]["message"] == "GPU 1 (A100) is in use by pid 77 (2.0 GiB)"
    assert checks["omp_threads"][0]["status"] == "warn"
    assert "OMP_NUM_THREADS=4 x 2 processes = 8 threads on 4 cores: oversubscribed" in checks["omp_threads"][0]["message"]
    visible = checks["cuda_visible_devices"]
    assert [c["status"] for c in visible] == ["warn", "info"]
    assert "names GPU(s) 3 that do not exist" in visible[0]["message"]
    assert "Rankwatch replaces it with the picked GPUs ('0,1')" in visible[1]["message"]


def test_picked_gpus_that_do_not_exist_fail():
    result = judge(DoctorFacts.from_json(facts(cuda_visible_devices={"environment": None, "picked": [0, 5], "rankwatch_sets": "0,5"})))
    assert DoctorCheck("picked_gpus", CheckStatus.FAIL, "picked GPU(s) 5 do not exist (this machine has 2)") in result


def test_a_doctor_check_is_one_type_from_the_runner_to_the_gui_panel():
    from gui.models import doctor as gui_doctor

    check = DoctorCheck("port", CheckStatus.WARN, "port 29500 is in use by pid 12")
    assert check.to_json() == {"key": "port", "status": "warn", "message": "port 29500 is in use by pid 12"}
    report = gui_doctor.parse_doctor_output(json.dumps({"ok": True, "checks": [check.to_json(), {"status": "new"}]}))
    assert report.checks == (check, DoctorCheck("?", CheckStatus.INFO, ""))  # the runner's type, read leniently
    assert report.check("port") is not None and type(report.check("port")) is DoctorCheck
    assert not hasattr(gui_doctor, "Check")  # no twin in the GUI


def test_cudnn_versions_of_both_numbering_schemes():
    assert cudnn_text(8907) == "8.9.7"
    assert cudnn_text(90100) == "9.1.0"
    assert cudnn_text(None) is None
