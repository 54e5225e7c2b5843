"""The launch spec: what a person asked for, before anything runs.

A ``LaunchSpec`` is plain, immutable data. It is what a profile TOML file holds,
what the GUI form edits and what ``rankwatch run`` launches. It is never mutated
by a run: live facts (pids, ports actually used, states) belong to the run state
(``runner.run``), not here. Values such as ``"auto"`` stay symbolic in the spec and
are resolved against a machine in ``runner.profile.resolve``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Union

SCHEMA_VERSION = 1
BACKENDS = ("auto", "nccl", "gloo", "mpi")
RENDEZVOUS_MODES = ("standalone", "c10d", "static")
SLURM_TELEMETRY_ROUTES = ("auto", "direct", "login")
AUTO = "auto"
TORCHRUN = "torchrun"
SELF_SPAWN = "self-spawn"
LAUNCH_MODES = (AUTO, TORCHRUN, SELF_SPAWN)
"""How the script is started (``runner.profile.launch_mode``)."""
CPU = "cpu"
ALL = "all"

GpuSelection = Union[str, tuple[int, ...]]
"""``"all"`` (every GPU, the default), ``"cpu"`` (no GPU), or explicit indices."""


@dataclass(frozen=True)
class NodeSpec:
    """One machine of the job. The first node is the head (where the runner lives)."""

    host: str = "localhost"
    processes: int | str = AUTO
    """Worker processes on this node; ``"auto"`` follows ``nproc_per_node``."""
    user: str | None = None
    port: int | None = None
    """SSH port (remote nodes only)."""
    python: str | None = None
    """Interpreter on that node; defaults to the spec's interpreter."""
    workdir: str | None = None
    """Working directory on that node; defaults to the spec's workdir."""


@dataclass(frozen=True)
class RendezvousSpec:
    """How ranks find each other (torchrun's rendezvous flags)."""

    mode: str = "standalone"
    """``standalone`` (one node, free port picked by torchrun), ``c10d`` (endpoint host:port
    plus a job id, for elastic multi-node) or ``static`` (master address/port + node rank)."""
    endpoint: str | None = None
    job_id: str | None = None
    master_addr: str | None = None
    master_port: int | None = None
    node_rank: int = 0
    """Static mode: the rank of the node this command is for (0 on the head)."""


@dataclass(frozen=True)
class TelemetrySpec:
    """What the workers measure and how the runner watches them."""

    instrument: bool = True
    """Zero-code instrumentation (loss, step time, data wait). Off: logs and exits only."""
    parse_stdout: bool = False
    """Also read loss values from printed lines (labelled ``parsed``)."""
    loss_pattern: str | None = None
    """Regex with one group for the value; ``None`` uses the built-in pattern."""
    sample_interval: float = 1.0
    """Seconds between GPU / process samples (0.25 .. 60)."""
    stall_timeout: float | None = None
    """Seconds without progress before a rank is flagged stalled; ``None`` derives it
    from the rank's recent step times."""
    hash_every: int = 0
    """Check every N steps that parameters are identical on all ranks (0 = off)."""


@dataclass(frozen=True)
class SlurmSpec:
    """Run on a Slurm cluster: ``sbatch`` allocates the nodes (a profile's ``[slurm]`` table).

    One task per allocated node starts Rankwatch's node agent, which starts torchrun
    with c10d rendezvous on the allocation's first node (``runner.slurm``).
    """

    nodes: int = 1
    gpus_per_node: int = 0
    """GPUs Slurm gives each node (``--gpus-per-node``); 0 is CPU mode (gloo)."""
    cpus_per_node: int | None = None
    """CPUs for each node's one task (``--cpus-per-task``); ``None``: one per process."""
    partition: str | None = None
    time_limit: str | None = None
    """Slurm's own format: ``MM``, ``HH:MM:SS``, ``D-HH:MM`` ...; ``None``: the partition's default."""
    account: str | None = None
    qos: str | None = None
    job_name: str | None = None
    """``None``: ``rankwatch-<script or module>``."""
    sbatch_options: tuple[str, ...] = ()
    """More ``#SBATCH`` lines, one option each (``--mem=64G``, ``--constraint=a100``)."""
    login_host: str | None = None
    """Submit over ssh on this login host; ``None``: this machine is a login node."""
    login_user: str | None = None
    login_port: int | None = None
    telemetry_route: str = "auto"
    """How the compute nodes' agents reach the runner: ``direct`` (TCP to this machine),
    ``login`` (through the login host's ssh connection), ``auto`` (direct when submitting
    from this machine, else through the login host)."""


@dataclass(frozen=True)
class LaunchSpec:
    """Everything torchrun needs, plus what Rankwatch adds around it.

    Exactly one of ``script`` / ``module`` is set.
    """

    script: str | None = None
    module: str | None = None
    args: tuple[str, ...] = ()
    interpreter: str | None = None
    """Python with torch to run torchrun in; ``None`` is Rankwatch's own Python."""
    workdir: str | None = None
    """``None`` is the directory Rankwatch is started from."""
    env: tuple[tuple[str, str], ...] = ()
    nproc_per_node: int | str = AUTO
    """``"auto"`` = number of picked GPUs, or the CPU count in CPU mode."""
    gpus: GpuSelection = ALL
    backend: str = AUTO
    """``auto`` = nccl with GPUs, gloo on CPU. Exported as RANKWATCH_BACKEND."""
    nodes: tuple[NodeSpec, ...] = (NodeSpec(),)
    rendezvous: RendezvousSpec = field(default_factory=RendezvousSpec)
    max_restarts: int = 0
    omp_num_threads: int | str = AUTO
    """``"auto"`` = cores divided by local processes (at least 1)."""
    legacy_local_rank: bool = False
    """Pass ``--local_rank=N`` to scripts written for ``torch.distributed.launch``."""
    launch_mode: str = AUTO
    """``torchrun`` (one process per rank), ``self-spawn`` (the script is started once and
    starts its own ranks, ``torch.multiprocessing.spawn``; or one process, ``DataParallel``), or
    ``auto`` (self-spawn when the script calls torch's spawn; ``runner.profile.launch_mode``)."""
    telemetry: TelemetrySpec = field(default_factory=TelemetrySpec)
    slurm: SlurmSpec | None = None
    """Set: the job runs on a Slurm cluster, and ``nodes``/``rendezvous``/``gpus`` are Slurm's."""
    description: str | None = None
    version: int = SCHEMA_VERSION

    @property
    def env_dict(self) -> dict[str, str]:
        return dict(self.env)

    @property
    def is_multi_node(self) -> bool:
        return len(self.nodes) > 1

    @property
    def entry_label(self) -> str:
        """What a person would call this job: the script's file name or the module."""
        if self.module:
            return self.module
        return (self.script or "").rsplit("/", 1)[-1]

    def with_changes(self, **changes) -> LaunchSpec:
        return replace(self, **changes)


def field_names(cls) -> list[str]:
    return [f.name for f in fields(cls)]
