"""Checks that need the machine: files exist, GPUs exist, the interpreter has torch.

``parse`` decides whether a profile is well formed; this decides whether it can run
*here*. Both produce ``SpecError``s with the same shape, so the CLI and the GUI show
them the same way, and a launch with any error never starts.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from runner import paths, privacy
from runner.probe import probe_interpreter
from runner.profile.parse import SpecError
from runner.profile.resolve import MachineFacts, ResolvedLaunch
from runner.profile.spec import AUTO, CPU

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
            "(two ranks on one GPU fail), so pick more GPUs or fewer processes, or share the GPU(s) on purpose "
            'with backend "gloo" (--backend gloo; the script must then put several ranks on one GPU, '
            "as the bundled example does)"))
    return errors


INTERPRETER_ANSWER = "rankwatch-interpreter"
INTERPRETER_QUESTION = (
    "import importlib.util, sys; "
    f"print({INTERPRETER_ANSWER!r}, '%d.%d' % sys.version_info[:2], "
    "'torch' if importlib.util.find_spec('torch') else 'no-torch')"
)
"""Answered only by a Python 3 that ran it: an exit status of 0 alone proves nothing
(``/bin/true`` exits 0 for any arguments)."""
MIN_PYTHON = (3, 8)


@dataclass(frozen=True)
class InterpreterAnswer:
    """What a quick question to an interpreter found out (without importing torch: fast)."""

    problem: str | None
    """Why it cannot run the job as Python (``None`` when it answered as one)."""
    has_torch: bool = False


def ask_interpreter(python: str, timeout: float = 20.0) -> InterpreterAnswer:
    """Run a one-line question in ``python`` and check the answer is Python's.

    Never raises: every failure is a ``problem`` sentence.
    """
    try:
        result = subprocess.run([python, "-c", INTERPRETER_QUESTION], capture_output=True, timeout=timeout,
                                umask=privacy.user_umask())
    except subprocess.TimeoutExpired:
        return InterpreterAnswer(f"{python} did not answer within {timeout:.0f} s")
    except (OSError, ValueError) as error:
        return InterpreterAnswer(f"{python} could not be run ({getattr(error, 'strerror', None) or error})")
    answer = result.stdout.decode(errors="replace").split()
    if result.returncode != 0 or len(answer) != 3 or answer[0] != INTERPRETER_ANSWER:
        said = (result.stderr.decode(errors="replace").strip().splitlines() or ["no answer"])[-1][:200]
        if INTERPRETER_ANSWER in said:  # a program that echoes its arguments (/bin/ls): the question, not news
            said = "no answer"
        return InterpreterAnswer(f"{python} is not a working Python: it did not answer as one ({said})")
    try:
        version = tuple(int(part) for part in answer[1].split("."))
    except ValueError:
        return InterpreterAnswer(f"{python} is not a working Python: it did not answer as one")
    if version < MIN_PYTHON:
        return InterpreterAnswer(f"{python} is Python {answer[1]}; Rankwatch's workers need "
                                 f"Python {'.'.join(map(str, MIN_PYTHON))} or newer")
    return InterpreterAnswer(None, has_torch=answer[2] == "torch")


def torch_missing(python: str) -> SpecError:
    """The error for an interpreter without torch (the GUI words its probe's answer with it)."""
    return SpecError("interpreter", f"torch is not installed for {python}; "
                                    f"install it there ({python} -m pip install torch) or pick another interpreter")


BACKENDS_TO_PROBE = frozenset({"mpi"})
"""Backends whose presence in the interpreter's torch is asked before a launch: MPI is only in torch
built from source with it (pip and conda builds lack it). Asking imports torch there (seconds), so the
common backends are not asked: gloo is in every build, and nccl's needs are checked from the GPUs."""


def check_backend(python: str, backend: str) -> list[SpecError]:
    """Whether ``python``'s torch has ``backend`` (``runner.probe``, worded as the launch form words it)."""
    answer = probe_interpreter(python)
    found = (answer.get("backends") or {}).get(backend) or {}
    if found.get("available"):
        return []
    reason = found.get("reason") or answer.get("error") or "the interpreter could not be asked"
    return [SpecError("backend", f"{backend} is not available in {python}: {reason}; use \"gloo\" (CPU) or "
                                 "\"nccl\" (NVIDIA GPUs), or an interpreter whose torch was built with it")]


def check_interpreter(python: str) -> list[SpecError]:
    """Whether ``python`` runs as a Python that has torch (asked without importing torch: fast),
    the check before a launch; `rankwatch command` asks it too, so that no command it prints
    names a program that cannot run the job."""
    if os.sep in python and not os.access(python, os.X_OK):
        return [SpecError("interpreter", f"{python} does not exist or is not executable; "
                                         "give the path of a Python with torch")]
    answer = ask_interpreter(python)
    if answer.problem is not None:
        return [SpecError("interpreter", f"{answer.problem}; give the path of a Python with torch")]
    if not answer.has_torch:
        return [torch_missing(python)]
    return []


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
            problems = check_interpreter(python)
            errors.extend(problems)
            if not problems and launch.backend in BACKENDS_TO_PROBE:
                errors.extend(check_backend(python, launch.backend))
    if probe_interpreter:  # about to launch (not for a preview): Rankwatch's own folders must be usable
        errors.extend(check_own_folders())
    for key in spec.env_dict:
        if key in RESERVED_ENV:
            errors.append(SpecError(f"env.{key}", RESERVED_ENV[key] + "; remove it from env"))
    errors.extend(check_gpus(launch, machine))
    errors.extend(check_self_spawn(launch))
    return errors


def check_self_spawn(launch: ResolvedLaunch) -> list[SpecError]:
    """torchrun's own settings mean nothing to a script started once that starts its own ranks:
    refused rather than silently ignored."""
    if not launch.self_spawn:
        return []
    spec = launch.spec
    why = f"launch mode self-spawn ({launch.launch_mode.reason})"
    errors = []
    if spec.nproc_per_node != AUTO:
        errors.append(SpecError("nproc_per_node", f"{why}: its spawn call decides how many; leave nproc_per_node "
                                                  "auto, or choose launch_mode \"torchrun\" (--launch-mode torchrun)"))
    if spec.max_restarts:
        errors.append(SpecError("max_restarts", f"{why}: torchrun's restarts do not apply; set max_restarts = 0, "
                                                "or choose launch_mode \"torchrun\" (--launch-mode torchrun)"))
    if spec.legacy_local_rank:
        errors.append(SpecError("legacy_local_rank", f"{why}: nothing passes --local_rank; turn the legacy option "
                                                     "off, or choose launch_mode \"torchrun\" (--launch-mode torchrun)"))
    return errors


def check_own_folders() -> list[SpecError]:
    """Rankwatch's own folders must be usable before anything starts: the data folder (the
    run store, run folders) writable, and the socket folder private.

    A read-only data folder would otherwise fail the launch halfway, with a traceback.
    """
    errors: list[SpecError] = []
    folders = [paths.data_dir()]
    store = paths.store_path()
    foreign = paths.data_dir_problem()
    if foreign is not None:
        return [SpecError("data folder", foreign)]
    if store.parent != folders[0]:
        folders.append(store.parent)
    for folder in folders:
        problem = _unwritable(folder, store)
        if problem is not None:
            errors.append(SpecError("data folder", f"cannot write to {folder} ({problem}); make it writable, "
                                                   "or set RANKWATCH_HOME to a writable folder for Rankwatch's data"))
        else:
            problem = _too_full(folder)
            if problem is not None:
                errors.append(SpecError("data folder", problem))
    try:
        paths.socket_dir()
    except OSError as error:
        errors.append(SpecError("socket folder", str(error)))
    return errors


MIN_FREE_BYTES = 2 << 20
"""Room a run needs on the data disk to start: the store's schema and write-ahead log, and the
1 MiB the runner sets aside for the run's end (``runner.hub.writer.RESERVE_BYTES``)."""


def _too_full(folder: Path) -> str | None:
    """What is full, where and how much is needed, when the disk holding ``folder`` has less
    than ``MIN_FREE_BYTES`` free for this user; ``None`` otherwise (or when it cannot be told)."""
    try:
        disk = os.statvfs(folder)
    except OSError:
        return None
    free = disk.f_bavail * disk.f_frsize
    if free >= MIN_FREE_BYTES:
        return None
    return (f"the disk holding {folder} is full: {_size(free)} free, a run needs at least {_size(MIN_FREE_BYTES)} "
            "there (its store and log); free some space, or set RANKWATCH_HOME to a folder on another disk")


def _size(count: int) -> str:
    if count < 1 << 10:
        return f"{count} B"
    if count < 1 << 20:
        return f"{count / (1 << 10):.0f} KiB"
    return f"{count / (1 << 20):.1f} MiB"


def _unwritable(folder: Path, store: Path) -> str | None:
    """Why nothing can be written to ``folder`` (created privately if missing), or ``None``."""
    try:
        if folder == paths.data_dir():
            paths.private_data_dir()
        else:
            privacy.make_private_dir(folder)
        with tempfile.TemporaryFile(dir=folder):
            pass
        if store.parent == folder and store.exists() and not os.access(store, os.W_OK):
            return f"{store.name} is read-only"
    except OSError as error:
        return error.strerror or str(error)
    return None
