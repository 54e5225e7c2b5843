"""The bundled example on the machines people have: one rank per GPU, at most two (a one-GPU
workstation runs one nccl rank), and two gloo ranks without a GPU.

The CLI runs as a subprocess with the NVML fake standing in for ``pynvml`` at the import
boundary: the H200 that Rankwatch was run on (tests/fakes/gpu_reference), one, two or four
of them, or no driver at all.
"""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path

import pytest

from runner.profile.files import example_profile, example_script
from runner.sampling.nvml import Nvml
from runner.store.store import RunStore
from tests.fakes.fake_pynvml import (
    NVML_ERROR_LIBRARY_NOT_FOUND,
    FakeNvml,
    gpu_reference_nvml,
    h200_idle,
)
from tests.jobs import REPO, rankwatch

ONE_H200 = "gpu_reference_nvml()"
NO_DRIVER = f"FakeNvml(init_error={NVML_ERROR_LIBRARY_NOT_FOUND})"


def h200s(count: int) -> str:
    return f"gpu_reference_nvml(*[h200_idle(fake_uuid(i)) for i in range({count})])"


def machine(tmp_path: Path, fake: str) -> dict[str, str]:
    """The environment of a `rankwatch` whose ``import pynvml`` gets ``fake``."""
    folder = tmp_path / "nvml"
    folder.mkdir(exist_ok=True)
    (folder / "pynvml.py").write_text("from tests.fakes.fake_pynvml import *  # noqa: F403\n"
                                      f"_fake = {fake}\n"
                                      "globals().update(vars(_fake.module))\n")
    return dict(os.environ, PYTHONPATH=f"{folder}{os.pathsep}{REPO}")


def planned(env: dict[str, str], *flags: str) -> tuple[dict[str, str], list[str]]:
    """`rankwatch command --example`: the environment and torchrun arguments it prints."""
    result = rankwatch("command", "--example", *flags, env=env)
    assert result.returncode == 0, result.stderr
    [line] = [line for line in result.stdout.splitlines() if not line.startswith("#")]
    words = shlex.split(line.partition(" && ")[2])
    environment = {}
    while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", words[0]):
        key, _, value = words.pop(0).partition("=")
        environment[key] = value
    return environment, words


def test_one_gpu_runs_one_nccl_rank_on_it(tmp_path):
    environment, argv = planned(machine(tmp_path, ONE_H200))
    assert (environment["CUDA_VISIBLE_DEVICES"], environment["RANKWATCH_BACKEND"]) == ("0", "nccl")
    script_args = list(example_profile().spec.args)
    assert "--nproc-per-node=1" in argv and argv[-1 - len(script_args):] == [str(example_script()), *script_args]


def test_two_gpus_run_two_nccl_ranks_and_more_gpus_still_two(tmp_path):
    environment, argv = planned(machine(tmp_path, h200s(2)))
    assert (environment["CUDA_VISIBLE_DEVICES"], environment["RANKWATCH_BACKEND"]) == ("0,1", "nccl")
    assert "--nproc-per-node=2" in argv
    environment, argv = planned(machine(tmp_path, h200s(4)))
    assert (environment["CUDA_VISIBLE_DEVICES"], environment["RANKWATCH_BACKEND"]) == ("0,1", "nccl")
    assert "--nproc-per-node=2" in argv


def test_no_gpu_runs_two_gloo_ranks(tmp_path):
    environment, argv = planned(machine(tmp_path, NO_DRIVER))
    assert (environment["CUDA_VISIBLE_DEVICES"], environment["RANKWATCH_BACKEND"]) == ("", "gloo")
    assert "--nproc-per-node=2" in argv
    environment, argv = planned(machine(tmp_path, ONE_H200), "--gpus", "cpu")  # CPU mode asked for
    assert (environment["CUDA_VISIBLE_DEVICES"], environment["RANKWATCH_BACKEND"]) == ("", "gloo")
    assert "--nproc-per-node=2" in argv


def test_two_nccl_ranks_on_one_gpu_are_refused_with_the_way_to_share_it(tmp_path):
    env = machine(tmp_path, ONE_H200)
    refused = rankwatch("command", "--example", "--nproc-per-node", "2", env=env)
    assert refused.returncode == 2
    assert "rankwatch: --nproc-per-node: 2 processes but 1 GPU(s) picked" in refused.stderr  # the flag typed
    assert 'share the GPU(s) on purpose with backend "gloo" (--backend gloo;' in refused.stderr

    # As it says: with gloo, two ranks share GPU 0.
    environment, argv = planned(env, "--nproc-per-node", "2", "--backend", "gloo")
    assert (environment["CUDA_VISIBLE_DEVICES"], environment["RANKWATCH_BACKEND"]) == ("0", "gloo")
    assert "--nproc-per-node=2" in argv


@pytest.mark.parametrize(("gpus", "processes", "picked"), [(0, 2, "all"), (1, 1, "all"), (2, 2, "all"),
                                                            (4, 2, (0, 1))])
def test_example_profile_fits_the_gpus_nvml_reports(gpus, processes, picked):
    fake = gpu_reference_nvml(*[h200_idle(f"GPU-{i}") for i in range(gpus)]) if gpus else FakeNvml()
    spec = example_profile(Nvml(module=fake.module).report(with_processes=False)).spec
    assert (spec.nproc_per_node, spec.gpus, spec.backend) == (processes, picked, "auto")
    assert example_profile().spec == example_profile(None).spec and example_profile().spec.nproc_per_node == 2


@pytest.mark.torchrun
def test_run_example_on_one_gpu_launches_one_nccl_rank(tmp_path):
    # The launch path of `rankwatch run`: what it started, as the run store recorded it. This
    # machine has no GPU behind the fake, so the rank then fails in init_process_group(nccl).
    home = tmp_path / "home"
    env = dict(machine(tmp_path, ONE_H200), RANKWATCH_HOME=str(home))
    result = rankwatch("run", "--example", "--plain", env=env, timeout=240)
    assert result.returncode != 0
    with RunStore(home / "data" / "runs.db", readonly=True) as store:
        [run] = store.runs(limit=5)
        ranks = store.ranks(run.id)
    command = run.command or ""
    assert run.world_size == 1 and [rank.rank for rank in ranks] == [0]
    assert "CUDA_VISIBLE_DEVICES=0 " in command and "RANKWATCH_BACKEND=nccl " in command
    assert "--nproc-per-node=1 " in command
    said = [line for line in (result.stdout + result.stderr).splitlines() if line.startswith("[rank ")]
    assert said and all(line.startswith("[rank 0] ") for line in said)
    assert "nccl" in said[-1].lower()  # the one rank tried the backend it was given
