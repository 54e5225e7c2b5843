"""NVML behind a fake of the pynvml module (no driver here), and the samplers around it."""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pynvml

from runner.cli.inspect_commands import report_json
from runner.sampling.nvml import Nvml
from runner.sampling.samplers import GpuSampler, ProcessSampler, gpu_rows, rank_gpu_usage
from tests.fakes import fake_pynvml
from tests.fakes.fake_pynvml import (
    NVML_ERROR_LIBRARY_NOT_FOUND,
    FakeNvml,
    NVMLError,
    a100,
    gpu_reference_nvml,
    h200_training,
)
from tests.jobs import REPO, rankwatch, wait_for

GPU_REFERENCE = Path(__file__).resolve().parent.parent / "fakes" / "gpu_reference"


def test_report_reads_every_gpu_and_its_processes():
    fake = FakeNvml([a100(util=80, used_gib=12, processes=[(4242, 6 << 30)]), a100(util=0, used_gib=0)])
    report = Nvml(module=fake.module).report()
    assert report.available and report.driver_version == "550.54.15" and report.cuda_driver_version == "12.4"
    first, second = report.gpus
    assert (first.index, first.name, first.utilization, first.memory_used, first.memory_total) == (
        0, "NVIDIA A100-SXM4-40GB", 80.0, 12 << 30, 40 << 30)
    assert (first.power_watts, first.temperature_c, first.sm_clock_mhz) == (250.0, 61.0, 1410.0)
    assert [(p.pid, p.used_memory) for p in first.processes] == [(4242, 6 << 30)]
    assert second.processes == ()


def test_the_fake_has_the_real_modules_names_signatures_errors_and_constants():
    fake = FakeNvml().module
    functions = [name for name in vars(fake) if name.startswith("nvml")]
    assert len(functions) >= 15
    for name in functions:
        assert str(inspect.signature(getattr(fake, name))) == str(inspect.signature(getattr(pynvml, name))), name
    for name, value in vars(fake).items():
        if name.startswith("NVML_") and not name.startswith("NVML_VALUE_NOT_AVAILABLE"):
            assert getattr(pynvml, name) == value, name
    for code in (3, 6, 9, 12, 18):
        fake_error, real_error = NVMLError(code), pynvml.NVMLError(code)
        assert (type(fake_error).__name__, str(fake_error), fake_error.value) == (
            type(real_error).__name__, str(real_error), real_error.value)
        assert isinstance(fake_error, getattr(fake, type(real_error).__name__))
    assert fake_pynvml.NVMLError_NotFound().value == pynvml.NVMLError_NotFound().value == 6


def test_the_fake_gives_back_what_rankwatch_printed_on_the_real_h200():
    # `rankwatch probe --json` (idle) and `rankwatch gpus --json` (one nccl rank training)
    # on the gpu-reference machine: the same JSON from the fake.
    probe = json.loads((GPU_REFERENCE / "probe.json").read_text())
    assert report_json(Nvml(module=gpu_reference_nvml().module).report()) == probe["gpus"]
    during = json.loads((GPU_REFERENCE / "gpus_during.json").read_text())
    training = Nvml(module=gpu_reference_nvml(h200_training()).module).report()
    assert [gpu.to_json() for gpu in training.gpus] == during
    # nvidia-smi's view of the same moment: the rank's pid and its memory in MiB.
    pid, used = (GPU_REFERENCE / "smi_apps.txt").read_text().split(",")
    [process] = training.gpus[0].processes
    assert (process.pid, process.used_memory // (1 << 20), process.name) == (int(pid), int(used.split()[0]), None)


def test_unsupported_queries_become_none_not_errors():
    gpu = a100()
    gpu["power_mw"] = NVMLError(3)
    gpu["temperature"] = NVMLError(3)
    [snapshot] = Nvml(module=FakeNvml([gpu]).module).report().gpus
    assert snapshot.power_watts is None and snapshot.temperature_c is None
    assert snapshot.utilization == 50.0


def test_no_driver_is_a_state_with_a_reason():
    report = Nvml(module=FakeNvml(init_error=NVML_ERROR_LIBRARY_NOT_FOUND).module).report()
    assert not report.available
    assert report.describe_unavailable() == "no NVIDIA GPU (NVIDIA driver not installed: libnvidia-ml.so not found)"


def test_nvml_is_initialised_once():
    fake = FakeNvml([a100()])
    nvml = Nvml(module=fake.module)
    nvml.report()
    nvml.report()
    assert fake.calls.count("nvmlInit") == 1


def test_ranks_map_to_their_gpu_by_pid():
    fake = FakeNvml([a100(util=70, processes=[(100, 1 << 30)]), a100(util=30, processes=[(200, 2 << 30)])])
    report = Nvml(module=fake.module).report()
    usage = rank_gpu_usage(report, {0: 100, 1: 200, 2: 300})
    assert usage == {0: (0, 70.0, 1 << 30), 1: (1, 30.0, 2 << 30)}
    rows = gpu_rows(report, 5.0)
    assert rows[1][:4] == (5.0, 1, 30.0, 10 << 30)


def test_gpu_sampler_thread_emits_reports():
    reports = []
    sampler = GpuSampler(0.25, emit=reports.append, nvml=Nvml(module=FakeNvml([a100()]).module))
    sampler.start()
    wait_for(lambda: len(reports) >= 2, 5, what="two samples")
    sampler.stop()
    assert sampler._thread.name == "rankwatch-gpu-sampler" and not sampler._thread.is_alive()


def test_process_sampler_sums_a_rank_and_its_children():
    parent = subprocess.Popen([sys.executable, "-c",
                               "import subprocess, sys, time\n"
                               "child = subprocess.Popen([sys.executable, '-c', 'x = bytearray(64 << 20); import time; time.sleep(30)'])\n"
                               "time.sleep(30)"])
    try:
        rows = []
        sampler = ProcessSampler(0.25, pids=lambda: {3: parent.pid}, emit=rows.extend)
        sampler.start()
        wait_for(lambda: rows and rows[-1][4] > 64 << 20, 10, what="the child's memory to count")
        sampler.stop()
        t, rank, pid, cpu, _rss, threads = rows[-1]
        assert (rank, pid) == (3, parent.pid) and threads >= 2 and cpu >= 0 and abs(t - time.time()) < 5
    finally:
        for process in __import__("psutil").Process(parent.pid).children(recursive=True):
            process.kill()
        parent.kill()


def test_gpus_command_on_this_machine_says_no_driver():
    result = rankwatch("gpus")
    assert result.returncode == 0
    assert result.stdout.startswith("no NVIDIA GPU (") and "CPU mode" in result.stdout
    as_json = rankwatch("gpus", "--json")
    assert as_json.returncode == 0 and json.loads(as_json.stdout) == []


def test_gpus_command_lists_gpus_and_their_users_through_the_fake(tmp_path):
    # The CLI itself, with the fake standing in for pynvml at the import boundary.
    shim = tmp_path / "pynvml.py"
    shim.write_text("from tests.fakes.fake_pynvml import FakeNvml, a100\n"
                    "_fake = FakeNvml([a100(util=97, processes=[(777, 3 << 30, 'trainer')]), a100(util=0)])\n"
                    "globals().update(vars(_fake.module))\n")
    env = dict(os.environ, PYTHONPATH=f"{tmp_path}{os.pathsep}{REPO}")
    text = rankwatch("gpus", env=env)
    assert text.returncode == 0, text.stderr
    assert "GPU 0  NVIDIA A100-SXM4-40GB" in text.stdout and "util  97%" in text.stdout
    assert "pid 777 trainer (3.0 GiB)" in text.stdout and "idle" in text.stdout
    listed = json.loads(rankwatch("gpus", "--json", env=env).stdout)
    assert [g["index"] for g in listed] == [0, 1] and listed[0]["processes"][0]["pid"] == 777
