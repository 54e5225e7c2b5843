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
AUTO = "auto"
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
    telemetry: TelemetrySpec = field(default_factory=TelemetrySpec)
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
