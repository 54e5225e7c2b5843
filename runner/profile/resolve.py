"""Resolve a spec's symbolic values ("auto", relative paths) against a machine.

The spec says what a person asked for; ``ResolvedLaunch`` says what will run on
each node: concrete interpreter and paths, process counts, GPU list, backend,
OMP threads and rendezvous flags. Command building works only from this.
"""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from runner.profile.launch_mode import LaunchModeChoice, choose_launch_mode
from runner.profile.spec import ALL, AUTO, CPU, SELF_SPAWN, LaunchSpec, NodeSpec, SlurmSpec
from runner.sampling.gpu_report import GpuReport

LOCAL_HOSTS = frozenset({"localhost", "127.0.0.1", "::1", ""})
SLURM_NODE_LABEL = "slurm node {}"
"""How a Slurm job's node is named until Slurm has allocated it (then: its node name)."""


@dataclass(frozen=True)
class MachineFacts:
    """What resolution needs to know about the head machine."""

    cpu_count: int
    gpus: GpuReport
    omp_num_threads: int | None = None
    """``OMP_NUM_THREADS`` as the user's shell exported it (a positive number), else None. With
    ``omp_num_threads = "auto"`` the workers get it, as torchrun leaves an exported value alone
    (and as ``rankwatch doctor`` judges it); a number in the profile still wins."""

    @classmethod
    def detect(cls, gpus: GpuReport) -> MachineFacts:
        """This machine's usable CPUs, with ``gpus`` as reported by NVML or `rankwatch probe`
        (NVML itself is queried by ``runner.run.detect_machine``)."""
        return cls(cpu_count=usable_cpus(), gpus=gpus, omp_num_threads=exported_omp_threads(os.environ))


def exported_omp_threads(environ: Mapping[str, str]) -> int | None:
    """``OMP_NUM_THREADS`` from ``environ`` when it is a positive whole number (what OpenMP reads)."""
    value = environ.get("OMP_NUM_THREADS", "").strip()
    return int(value) if value.isdigit() and int(value) > 0 else None


def usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def is_local_host(host: str) -> bool:
    return host in LOCAL_HOSTS or host == socket.gethostname()


@dataclass(frozen=True)
class ResolvedNode:
    node_rank: int
    host: str
    processes: int
    python: str
    workdir: str
    user: str | None
    ssh_port: int | None

    @property
    def is_local(self) -> bool:
        """Launched directly by the runner. Only the first node can be; every other
        node is reached over SSH, even when it is this machine (that is how two
        "nodes" on one machine are tested)."""
        return self.node_rank == 0 and is_local_host(self.host)


@dataclass(frozen=True)
class ResolvedLaunch:
    spec: LaunchSpec
    nodes: tuple[ResolvedNode, ...]
    gpus: tuple[int, ...]
    """Picked GPU indices (NVML / PCI order); empty in CPU mode."""
    backend: str
    omp_num_threads: int
    script: str | None
    """Absolute path on the head (relative on remote nodes is kept relative to their workdir)."""
    launch_mode: LaunchModeChoice
    """torchrun, or the script started once to start its own ranks (``runner.profile.launch_mode``)."""

    @property
    def self_spawn(self) -> bool:
        return self.launch_mode.mode == SELF_SPAWN

    @property
    def cpu_mode(self) -> bool:
        return not self.gpus

    @property
    def world_size(self) -> int:
        return sum(n.processes for n in self.nodes)

    @property
    def head(self) -> ResolvedNode:
        return self.nodes[0]


def default_interpreter() -> str:
    return sys.executable


def absolute_paths(spec: LaunchSpec, base_dir: Path | None = None) -> LaunchSpec:
    """``spec`` with workdir, script and a path-like interpreter made absolute, by the same
    rules as ``resolve`` (workdir from ``base_dir``, script from the workdir), so the spec
    means the same thing wherever it is written (a detached runner's copy, say)."""
    base = Path(base_dir).expanduser() if base_dir is not None else Path.cwd()
    workdir = Path(os.path.expanduser(spec.workdir)) if spec.workdir else base
    workdir = Path(os.path.normpath(workdir if workdir.is_absolute() else base / workdir))
    changes: dict = {"workdir": str(workdir)}
    if spec.script:
        script = Path(os.path.expanduser(spec.script))
        changes["script"] = str(script if script.is_absolute() else Path(os.path.normpath(workdir / script)))
    interpreter = spec.interpreter
    if interpreter and (os.sep in interpreter or interpreter.startswith(".")):
        path = Path(os.path.expanduser(interpreter))
        changes["interpreter"] = str(path if path.is_absolute() else Path(os.path.normpath(base / path)))
    return spec.with_changes(**changes)


def resolve(spec: LaunchSpec, machine: MachineFacts, base_dir: Path | None = None) -> ResolvedLaunch:
    """Resolve ``spec`` for launching from ``base_dir`` (default: the current directory).

    Relative ``workdir`` is taken from ``base_dir``; a relative ``script`` from the workdir.
    This never fails: whether the result can run is ``runner.profile.check``'s job.
    """
    base = Path(base_dir) if base_dir is not None else Path.cwd()
    workdir = Path(os.path.expanduser(spec.workdir)) if spec.workdir else base
    if not workdir.is_absolute():
        workdir = base / workdir
    workdir = Path(os.path.normpath(workdir))
    script = None
    if spec.script:
        script_path = Path(os.path.expanduser(spec.script))
        script = str(script_path if script_path.is_absolute() else Path(os.path.normpath(workdir / script_path)))

    if spec.slurm is not None:
        return _resolve_slurm(spec, spec.slurm, str(workdir), script)
    if spec.gpus == CPU or (spec.gpus == ALL and not machine.gpus.available):
        gpus: tuple[int, ...] = ()
    elif spec.gpus == ALL:
        gpus = machine.gpus.indices
    elif isinstance(spec.gpus, tuple):
        gpus = spec.gpus
    else:  # an unknown word: parse refuses it; nothing to pick
        gpus = ()

    if spec.nproc_per_node == AUTO:
        nproc = len(gpus) if gpus else machine.cpu_count
    else:
        nproc = int(spec.nproc_per_node)

    backend = spec.backend if spec.backend != AUTO else ("nccl" if gpus else "gloo")
    nodes = [_resolve_node(rank, node, nproc, spec.interpreter, str(workdir))
             for rank, node in enumerate(spec.nodes)]
    local_processes = nodes[0].processes
    if spec.omp_num_threads == AUTO:
        omp = machine.omp_num_threads or max(1, machine.cpu_count // max(1, local_processes))
    else:
        omp = int(spec.omp_num_threads)
    return ResolvedLaunch(spec=spec, nodes=tuple(nodes), gpus=gpus, backend=backend,
                          omp_num_threads=omp, script=script, launch_mode=choose_launch_mode(spec, script))


def _resolve_node(node_rank: int, node: NodeSpec, nproc: int, interpreter: str | None,
                  workdir: str) -> ResolvedNode:
    """A remote node without its own ``python`` uses the spec's interpreter when one is
    given (same path on every node, as on a cluster), else ``python3`` on its PATH."""
    processes = nproc if node.processes == AUTO else int(node.processes)
    on_head = node_rank == 0 and is_local_host(node.host)
    fallback = (interpreter or default_interpreter()) if on_head else (interpreter or "python3")
    return ResolvedNode(
        node_rank=node_rank,
        host=node.host,
        processes=processes,
        python=node.python or fallback,
        workdir=node.workdir or workdir,
        user=node.user,
        ssh_port=node.port,
    )


def _resolve_slurm(spec: LaunchSpec, slurm: SlurmSpec, workdir: str, script: str | None) -> ResolvedLaunch:
    """A Slurm job: ``slurm.nodes`` nodes, not known by name until allocated, each with
    ``slurm.gpus_per_node`` GPUs that Slurm picks (CPU mode with none).

    ``nproc_per_node = "auto"`` is one process per GPU, or in CPU mode one per CPU of
    ``slurm.cpus_per_node`` (1 when unset); ``omp_num_threads = "auto"`` shares the
    node's CPUs among its processes. The interpreter is the spec's (the same path on
    every node, as on a cluster), else this one when submitting from here, else
    ``python3`` on the nodes' PATH.
    """
    gpus = tuple(range(slurm.gpus_per_node))
    if spec.nproc_per_node == AUTO:
        processes = slurm.gpus_per_node or slurm.cpus_per_node or 1
    else:
        processes = int(spec.nproc_per_node)
    cpus = slurm.cpus_per_node or processes
    omp = max(1, cpus // processes) if spec.omp_num_threads == AUTO else int(spec.omp_num_threads)
    backend = spec.backend if spec.backend != AUTO else ("nccl" if gpus else "gloo")
    python = spec.interpreter or (default_interpreter() if slurm.login_host is None else "python3")
    nodes = tuple(ResolvedNode(node_rank=rank, host=SLURM_NODE_LABEL.format(rank), processes=processes,
                               python=python, workdir=workdir, user=None, ssh_port=None)
                  for rank in range(slurm.nodes))
    return ResolvedLaunch(spec=spec, nodes=nodes, gpus=gpus, backend=backend, omp_num_threads=omp, script=script,
                          launch_mode=choose_launch_mode(spec, script))
