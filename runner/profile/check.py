"""Checks that need the machine: files exist, GPUs exist, the interpreter has torch.

``parse`` decides whether a profile is well formed; this decides whether it can run
*here*. Both produce ``SpecError``s with the same shape, so the CLI and the GUI show
them the same way, and a launch with any error never starts.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from runner.profile.parse import SpecError
from runner.profile.resolve import MachineFacts, ResolvedLaunch
from runner.profile.spec import CPU

RESERVED_ENV = {
    "RANK": "set by torchrun for each worker",
    "LOCAL_RANK": "set by torchrun for each worker",
    "WORLD_SIZE": "set by torchrun from the nodes and processes",
    "LOCAL_WORLD_SIZE": "set by torchrun from processes per node",
    "MASTER_ADDR": "set by torchrun; use [rendezvous] master_addr",
    "MASTER_PORT": "set by torchrun; use [rendezvous] master_port",
    "CUDA_VISIBLE_DEVICES": 'set from "gpus"; pick GPUs there',
    "OMP_NUM_THREADS": 'set from "omp_num_threads"',
}


def describe_indices(indices: tuple[int, ...]) -> str:
    if not indices:
        return "none"
    if list(indices) == list(range(indices[0], indices[-1] + 1)) and len(indices) > 1:
        return f"{indices[0]}-{indices[-1]}"
    return ", ".join(str(i) for i in indices)


def check_gpus(launch: ResolvedLaunch, machine: MachineFacts) -> list[SpecError]:
    spec = launch.spec
    errors: list[SpecError] = []
    if isinstance(spec.gpus, tuple):
        if not machine.gpus.available:
            errors.append(SpecError("gpus", f"GPU {spec.gpus[0]} does not exist; this machine has "
                                            f'{machine.gpus.describe_unavailable()}; use gpus = "cpu"'))
        else:
            have = machine.gpus.indices
            for index in spec.gpus:
                if index not in have:
                    errors.append(SpecError("gpus", f"index {index} does not exist; this machine has GPUs {describe_indices(have)}"))
                    break
    if launch.backend == "nccl" and launch.cpu_mode:
        why = "CPU mode was picked" if spec.gpus == CPU else machine.gpus.describe_unavailable()
        errors.append(SpecError("backend", f'nccl needs NVIDIA GPUs, but {why}; use "gloo" (or "auto")'))
    if launch.backend == "nccl" and launch.gpus and launch.head.processes > len(launch.gpus):
        errors.append(SpecError(
            "nproc_per_node",
            f"{launch.head.processes} processes but {len(launch.gpus)} GPU(s) picked; NCCL needs one GPU per rank "
            "(two ranks on one GPU fail), so pick more GPUs or fewer processes"))
    return errors


def interpreter_has_torch(python: str, timeout: float = 20.0) -> bool | None:
    """Whether ``import torch`` would find torch in ``python`` (without importing it: fast).

    Returns ``None`` when the interpreter could not be run at all.
    """
    probe = "import importlib.util,sys; sys.exit(0 if importlib.util.find_spec('torch') else 3)"
    try:
        result = subprocess.run([python, "-c", probe], capture_output=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if result.returncode == 0:
        return True
    return False if result.returncode == 3 else None


def torch_missing(python: str) -> SpecError:
    """The error for an interpreter without torch (the GUI words its probe's answer with it)."""
    return SpecError("interpreter", f"torch is not installed for {python}; "
                                    f"install it there ({python} -m pip install torch) or pick another interpreter")


def check_launch(launch: ResolvedLaunch, machine: MachineFacts, *, probe_interpreter: bool = True) -> list[SpecError]:
    """Every reason ``launch`` cannot start on this machine (empty when it can)."""
    spec = launch.spec
    errors: list[SpecError] = []
    head = launch.head
    if head.is_local:
        workdir = Path(head.workdir)
        if not workdir.is_dir():
            errors.append(SpecError("workdir", f"{workdir} is not a directory"))
        if launch.script is not None:
            script = Path(launch.script)
            if not script.exists():
                errors.append(SpecError("script", f"{script} does not exist"))
            elif script.is_dir():
                errors.append(SpecError("script", f"{script} is a directory; give the training script file"))
        python = head.python
        if os.sep in python and not os.access(python, os.X_OK):
            errors.append(SpecError("interpreter", f"{python} does not exist or is not executable"))
        elif probe_interpreter:
            has_torch = interpreter_has_torch(python)
            if has_torch is None:
                errors.append(SpecError("interpreter", f"{python} could not be run as Python"))
            elif not has_torch:
                errors.append(torch_missing(python))
    for key in spec.env_dict:
        if key in RESERVED_ENV:
            errors.append(SpecError(f"env.{key}", RESERVED_ENV[key] + "; remove it from env"))
    errors.extend(check_gpus(launch, machine))
    return errors
