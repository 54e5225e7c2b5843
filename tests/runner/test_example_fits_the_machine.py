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

from tests.jobs import REPO, rankwatch

ONE_H200 = "gpu_reference_nvml()"


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


def test_two_nccl_ranks_on_one_gpu_are_refused_with_the_way_to_share_it(tmp_path):
    env = machine(tmp_path, ONE_H200)
    refused = rankwatch("command", "--example", "--nproc-per-node", "2", env=env)
    assert refused.returncode == 2
    assert "nproc_per_node: 2 processes but 1 GPU(s) picked" in refused.stderr
    assert 'share the GPU(s) on purpose with backend "gloo" (--backend gloo;' in refused.stderr

    # As it says: with gloo, two ranks share GPU 0.
    environment, argv = planned(env, "--nproc-per-node", "2", "--backend", "gloo")
    assert (environment["CUDA_VISIBLE_DEVICES"], environment["RANKWATCH_BACKEND"]) == ("0", "gloo")
    assert "--nproc-per-node=2" in argv
