"""The launch form's view model, without Qt: form fields -> spec, CLI errors, torchrun commands, dirty state.

Also the probe's JSON parsing (what the GPU picker and the interpreter line show).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from gui.gateway.probe_output import ProbeError, parse_probe_output, unavailable_report
from gui.models.gpus import describe_gpus, gpu_rows
from gui.models.launch_form import CHECKING_GPUS, LaunchFormModel, NodeRow, pick_free_port
from runner.launch.command import RendezvousPlan, build_commands
from runner.profile.check import RESERVED_ENV, check_launch
from runner.profile.files import example_profile, read_spec_file, write_spec_file
from runner.profile.parse import SpecErrors, spec_from_dict
from runner.profile.resolve import MachineFacts, resolve
from runner.profile.spec import LaunchSpec, NodeSpec, RendezvousSpec
from runner.sampling.gpu_report import GpuReport

REPO_ROOT = Path(__file__).resolve().parents[2]
GIB = 1024**3
NO_GPU = unavailable_report("NVIDIA driver not installed")

TWO_GPUS_JSON = {
    "interpreter": {
        "python": "/envs/torch/bin/python", "ok": True, "error": None, "python_version": "3.11.9",
        "torch": "2.4.1", "cuda_available": True, "cuda_version": "12.1", "device_count": 2,
        "backends": {"gloo": {"available": True, "reason": None}, "nccl": {"available": True, "reason": None},
                     "mpi": {"available": False, "reason": "this torch build has no MPI"}},
    },
    "gpus": {
        "available": True, "reason": None, "driver_version": "550.54.15", "cuda_driver_version": "12.4",
        "gpus": [
            {"index": 0, "name": "NVIDIA A100-SXM4-40GB", "uuid": "GPU-0", "memory_used": 1 * GIB,
             "memory_total": 40 * GIB, "utilization": 0.0, "power_watts": 55.0, "temperature_c": 31.0,
             "sm_clock_mhz": 210.0, "processes": []},
            {"index": 1, "name": "NVIDIA A100-SXM4-40GB", "uuid": "GPU-1", "memory_used": 12 * GIB,
             "memory_total": 40 * GIB, "utilization": 97.0, "power_watts": 310.0, "temperature_c": 64.0,
             "sm_clock_mhz": 1410.0, "processes": [{"pid": 4242, "used_memory": 11 * GIB, "name": "python"}]},
        ],
    },
}


def two_gpu_report() -> GpuReport:
    return parse_probe_output(json.dumps(TWO_GPUS_JSON)).gpus


def runner_command_text(spec: LaunchSpec, report: GpuReport, base_dir: Path, plan: RendezvousPlan,
                        node: int = 0) -> str:
    """What the runner builds for ``spec``, computed without the form model."""
    launch = resolve(spec, MachineFacts.detect(gpus=report), base_dir)
    return build_commands(launch, plan)[node].shell_text()


@pytest.fixture
def script(tmp_path: Path) -> Path:
    path = tmp_path / "train.py"
    path.write_text("print('training')\n")
    return path


@pytest.fixture
def model(tmp_path: Path) -> LaunchFormModel:
    model = LaunchFormModel(base_dir=tmp_path)
    model.set_gpu_report(NO_GPU)
    return model


def test_example_profile_loads_clean_and_previews_what_rankwatch_command_prints():
    profile = example_profile()
    model = LaunchFormModel()
    model.load(profile.spec, profile_name="example", base_dir=profile.base_dir)
    model.set_gpu_report(NO_GPU)
    model.update(args_text=" ".join(profile.spec.args))  # unchanged value: still clean

    evaluation = model.evaluation
    # Without a GPU "all GPUs" is CPU mode, and the form says so (not an edit: still clean).
    assert evaluation.spec == profile.spec.with_changes(gpus="cpu")
    assert not evaluation.dirty
    # The CLI's `rankwatch command --example` on this machine (no GPU here either).
    printed = subprocess.run([sys.executable, "-m", "runner", "command", "--example"], cwd=REPO_ROOT,
                             capture_output=True, text=True, timeout=60, check=True).stdout.strip()
    assert [command.text for command in evaluation.commands] == [printed]
    assert evaluation.can_launch, evaluation.errors


def test_the_example_runs_one_nccl_rank_on_a_one_gpu_machine_as_rankwatch_command_does(tmp_path):
    # The H200 machine of tests/fakes/gpu_reference, as its `rankwatch probe --json` told the GUI.
    probe = (REPO_ROOT / "tests" / "fakes" / "gpu_reference" / "probe.json").read_text()
    one_gpu = parse_probe_output(probe).gpus
    profile = example_profile()
    model = LaunchFormModel()
    model.load(profile.spec, profile_name="example", base_dir=profile.base_dir)
    model.set_gpu_report(one_gpu)

    evaluation = model.evaluation
    assert evaluation.spec == profile.spec.with_changes(nproc_per_node=1)  # the machine's reading: clean
    assert not evaluation.dirty and evaluation.errors == ()
    assert (evaluation.launch.head.processes, evaluation.launch.gpus, evaluation.launch.backend) == (1, (0,), "nccl")
    # The CLI's `rankwatch command --example` on a machine whose NVML shows that H200.
    shim = tmp_path / "pynvml.py"
    shim.write_text("from tests.fakes.fake_pynvml import gpu_reference_nvml\n"
                    "globals().update(vars(gpu_reference_nvml().module))\n")
    printed = subprocess.run([sys.executable, "-m", "runner", "command", "--example"], cwd=REPO_ROOT,
                             env={**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{REPO_ROOT}"},
                             capture_output=True, text=True, timeout=60, check=True).stdout.strip()
    assert [command.text for command in evaluation.commands] == [printed]

    # Sharing the GPU on purpose is an edit the next GPU refresh leaves alone; nccl is refused.
    model.update(nproc_per_node=2, backend="gloo")
    model.set_gpu_report(one_gpu)
    assert (model.state.nproc_per_node, model.state.backend) == (2, "gloo") and model.dirty
    assert model.evaluation.errors == () and model.evaluation.launch.gpus == (0,)
    model.update(backend="auto")
    [(field, message)] = model.evaluation.errors
    assert field == "nproc_per_node" and "(--backend gloo;" in message


def test_the_example_keeps_two_ranks_on_more_gpus_and_other_profiles_are_not_fitted(tmp_path, script):
    four_gpus = parse_probe_output(json.dumps({**TWO_GPUS_JSON, "gpus": {**TWO_GPUS_JSON["gpus"], "gpus": [
        {**TWO_GPUS_JSON["gpus"]["gpus"][0], "index": index, "uuid": f"GPU-{index}"} for index in range(4)]}})).gpus
    profile = example_profile()
    model = LaunchFormModel()
    model.set_gpu_report(four_gpus)
    model.load(profile.spec, profile_name="example", base_dir=profile.base_dir)
    assert (model.state.nproc_per_node, model.state.gpus, model.dirty) == (2, (0, 1), False)
    assert model.evaluation.launch.gpus == (0, 1) and model.evaluation.errors == ()

    one_gpu = parse_probe_output((REPO_ROOT / "tests" / "fakes" / "gpu_reference" / "probe.json").read_text()).gpus
    mine = LaunchSpec(script=str(script), workdir=str(tmp_path), nproc_per_node=2)
    model = LaunchFormModel()
    model.set_gpu_report(one_gpu)
    model.load(mine, profile_name="mine", base_dir=tmp_path)
    assert model.state.nproc_per_node == 2 and not model.dirty
    assert [field for field, _message in model.evaluation.errors] == ["nproc_per_node"]


def test_form_fields_become_the_spec_and_the_runners_command(model, script, tmp_path):
    port = pick_free_port()
    model.update(entry=str(script), args_text="--lr 0.1 --name 'two words'", workdir=str(tmp_path),
                 gpus="cpu", nproc_per_node=3, backend="gloo", rendezvous_mode="static",
                 master_addr="127.0.0.1", master_port=port, max_restarts=2, omp_num_threads=4,
                 env=(("NCCL_DEBUG", "INFO"),), legacy_local_rank=False)

    expected = LaunchSpec(script=str(script), args=("--lr", "0.1", "--name", "two words"), workdir=str(tmp_path),
                          env=(("NCCL_DEBUG", "INFO"),), nproc_per_node=3, gpus="cpu", backend="gloo",
                          rendezvous=RendezvousSpec(mode="static", master_addr="127.0.0.1", master_port=port),
                          max_restarts=2, omp_num_threads=4)
    evaluation = model.evaluation
    assert evaluation.spec == expected
    assert evaluation.errors == ()
    plan = RendezvousPlan(mode="static", master_addr="127.0.0.1", master_port=port)
    assert evaluation.commands[0].text == runner_command_text(expected, NO_GPU, tmp_path, plan)
    assert f"--master-port={port}" in evaluation.commands[0].text
    assert "OMP_NUM_THREADS=4" in evaluation.commands[0].text


def test_parse_errors_are_the_cli_messages_for_the_same_field(model, script):
    model.update(entry=str(script), nodes=(NodeRow(host="bad host!"),), rendezvous_mode="c10d", endpoint="nocolon")

    table = model.state.to_table()
    with pytest.raises(SpecErrors) as raised:
        spec_from_dict(table)
    cli_errors = tuple((error.field, error.message) for error in raised.value.errors)
    assert model.evaluation.errors == cli_errors
    assert {field for field, _ in cli_errors} == {"nodes[0].host", "rendezvous.endpoint"}
    assert model.evaluation.spec is None and model.evaluation.commands == ()
    assert model.evaluation.launch_blocker == f"{cli_errors[0][0]}: {cli_errors[0][1]}  (+1 more)"
    assert model.evaluation.errors_for("nodes") == [f"nodes[0].host: {cli_errors[0][1]}"]


def test_machine_errors_are_check_launch_messages(model, tmp_path):
    missing = tmp_path / "nope.py"
    model.update(entry=str(missing), env=(("RANK", "3"),))

    spec = model.evaluation.spec
    machine = MachineFacts.detect(gpus=NO_GPU)
    expected = [(e.field, e.message) for e in check_launch(resolve(spec, machine, tmp_path), machine,
                                                              probe_interpreter=False)]
    assert list(model.evaluation.errors) == expected
    assert ("script", f"{missing} does not exist") in expected
    assert ("env.RANK", RESERVED_ENV["RANK"] + "; remove it from env") in expected
    assert not model.evaluation.can_launch
    # The preview still shows the command, so it can be read while fixing the form.
    assert model.evaluation.commands


def test_unbalanced_quotes_in_arguments_name_the_args_field(model, script):
    model.update(entry=str(script), args_text='--name "unclosed')
    assert [field for field, _ in model.evaluation.errors] == ["args"]
    assert model.evaluation.spec is None
    model.update(args_text='--name "closed now"')
    assert model.evaluation.spec.args == ("--name", "closed now")


def test_dirty_follows_the_loaded_profile(tmp_path, script):
    spec = LaunchSpec(script=str(script), args=("--epochs", "3"), workdir=str(tmp_path), gpus="cpu")
    model = LaunchFormModel()
    seen = []
    model.evaluated.connect(lambda evaluation: seen.append(evaluation.dirty))
    model.load(spec, profile_name="mine", base_dir=tmp_path)
    assert not model.dirty

    model.update(args_text="--epochs 4")
    assert model.dirty
    model.update(args_text="--epochs  3")  # same arguments, other spacing: not a change
    assert not model.dirty
    model.update(max_restarts=1)
    model.mark_saved(profile_name="mine", base_dir=tmp_path)
    assert not model.dirty
    assert seen[0] is False and True in seen and seen[-1] is False


def test_launch_waits_for_the_gpu_probe(tmp_path, script):
    model = LaunchFormModel(base_dir=tmp_path)
    model.update(entry=str(script), gpus="cpu")
    assert model.evaluation.errors == ()
    assert model.evaluation.notice == CHECKING_GPUS
    assert not model.evaluation.can_launch
    assert model.evaluation.launch_blocker == CHECKING_GPUS
    model.set_gpu_report(NO_GPU)
    assert model.evaluation.can_launch


def test_picked_gpus_set_cuda_visible_devices_and_unknown_ones_are_refused(model, script, tmp_path):
    report = two_gpu_report()
    model.set_gpu_report(report)
    model.update(entry=str(script), workdir=str(tmp_path), gpus=(1,))

    text = model.evaluation.commands[0].text
    assert "CUDA_VISIBLE_DEVICES=1 " in text and "RANKWATCH_BACKEND=nccl" in text
    assert "--nproc-per-node=1" in text
    assert text == runner_command_text(model.evaluation.spec, report, tmp_path, RendezvousPlan(mode="standalone"))

    model.update(gpus=(0, 5))
    assert ("gpus", "index 5 does not exist; this machine has GPUs 0-1") in model.evaluation.errors


def test_two_static_nodes_get_one_command_each(model, script, tmp_path):
    port = pick_free_port()
    model.update(entry=str(script), workdir=str(tmp_path), gpus="cpu", nproc_per_node=2,
                 nodes=(NodeRow(host="localhost"), NodeRow(host="node2", processes="4")),
                 rendezvous_mode="static", master_addr="head.example", master_port=port)

    evaluation = model.evaluation
    assert evaluation.errors == ()
    assert [c.label for c in evaluation.commands] == ["node 0 · localhost", "node 1 · node2"]
    plan = RendezvousPlan(mode="static", master_addr="head.example", master_port=port)
    for node in (0, 1):
        assert evaluation.commands[node].text == runner_command_text(evaluation.spec, NO_GPU, tmp_path, plan, node)
    assert "--node-rank=1" in evaluation.commands[1].text and "--nproc-per-node=4" in evaluation.commands[1].text
    assert evaluation.spec.nodes == (NodeSpec(host="localhost"), NodeSpec(host="node2", processes=4))


def test_left_open_rendezvous_values_are_planned_like_the_runner_and_stay_stable(model, script, tmp_path):
    model.update(entry=str(script), workdir=str(tmp_path), gpus="cpu", rendezvous_mode="static")
    first = model.evaluation.commands[0].text
    assert "--master-port=" in first
    assert model.evaluation.picked_at_launch == ("master port",)
    model.update(max_restarts=3)  # an unrelated edit: the picked port does not jump around
    second = model.evaluation.commands[0].text
    assert second.split("--master-port=")[1].split()[0] == first.split("--master-port=")[1].split()[0]
    assert "--max-restarts=3" in second


def test_a_taken_master_port_is_refused_naming_the_field(model, script, tmp_path):
    with socket.socket() as holder:
        holder.bind(("", 0))
        holder.listen()
        port = holder.getsockname()[1]
        model.update(entry=str(script), workdir=str(tmp_path), gpus="cpu", rendezvous_mode="static",
                     master_port=port)
        fields = [field for field, _ in model.evaluation.errors]
        assert fields == ["rendezvous.master_port"]
        assert f"port {port}" in model.evaluation.errors[0][1]


def test_interpreter_probe_results_become_errors(model, script):
    model.update(entry=str(script), gpus="cpu")
    python = model.head_python()
    data = json.loads(json.dumps(TWO_GPUS_JSON["interpreter"]))
    data.update(python=python, torch=None, ok=False,
                error="cannot import torch: ModuleNotFoundError: No module named 'torch'")
    info = parse_probe_output(json.dumps({"interpreter": data, "gpus": {"available": False}})).interpreter
    model.set_interpreter_info(info)
    assert model.evaluation.errors == (
        ("interpreter", f"torch is not installed for {python}; install it there "
                        f"({python} -m pip install torch) or pick another interpreter"),)
    assert info.summary() == "Python 3.11.9 · torch not installed"

    data.update(torch="2.4.1", ok=True, error=None)
    model.set_interpreter_info(parse_probe_output(json.dumps({"interpreter": data})).interpreter)
    model.update(backend="mpi")
    assert model.evaluation.errors == (("backend", f"mpi is not available in {python}: this torch build has no MPI"),)


def test_probe_output_is_parsed_into_picker_rows():
    result = parse_probe_output("a warning line\n" + json.dumps(TWO_GPUS_JSON))
    assert result.gpus.available and result.gpus.indices == (0, 1)
    assert describe_gpus(result.gpus) == "2 GPUs · driver 550.54.15 · CUDA 12.4"
    rows = gpu_rows(result.gpus)
    assert [(row.index, row.busy) for row in rows] == [(0, False), (1, True)]
    assert rows[1].memory == "12.0 / 40.0 GiB" and rows[1].utilization == "97 %"
    assert rows[1].processes == "pid 4242 python (11.0 GiB)"
    assert result.interpreter.summary() == "Python 3.11.9 · torch 2.4.1 · CUDA 12.1 (2 devices)"
    assert result.interpreter.backend("mpi").reason == "this torch build has no MPI"

    gpus_only = parse_probe_output(json.dumps({"interpreter": None, "gpus": {
        "available": False, "reason": "NVIDIA driver not loaded", "gpus": []}}))
    assert gpus_only.interpreter is None
    assert describe_gpus(gpus_only.gpus) == "No NVIDIA GPU (NVIDIA driver not loaded): CPU mode"
    with pytest.raises(ProbeError):
        parse_probe_output("Traceback (most recent call last):\n  oops")


def test_saved_spec_round_trips_through_a_profile_file(model, script, tmp_path):
    model.update(entry=str(script), args_text="--epochs 2", gpus="cpu", env=(("A", "1"),))
    path = write_spec_file(tmp_path / "roundtrip.toml", model.evaluation.spec)
    reloaded = LaunchFormModel()
    reloaded.load(read_spec_file(path), profile_name="roundtrip", base_dir=tmp_path)
    assert reloaded.state.to_table() == model.state.to_table()
