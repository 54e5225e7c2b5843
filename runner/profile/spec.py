"""The launch spec: what a person asked for, before anything runs.

A ``LaunchSpec`` is plain, immutable data. It is what a profile TOML file holds,
what the GUI form edits and what ``rankwatch run`` launches. It is never mutated
by a run: live facts (pids, ports actually used, states) belong to the run state
(``runner.run``), not here. Values such as ``"auto"`` stay symbolic in the spec and
are resolved against a machine in ``runner.profile.resolve``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, fields, replace
from typing import Union

from runner.profile.schema import BOOL, CHOICE, INTEGER, NUMBER, SETTINGS_TABLE, TEXT, setting

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


def loss_pattern_problem(pattern: str) -> str | None:
    """Why ``pattern`` cannot read a loss from a printed line, or ``None``."""
    try:
        compiled = re.compile(pattern)
    except re.error as exc:
        return f"not a valid regular expression ({exc})"
    if compiled.groups < 1:
        return "needs one capturing group around the number, e.g. 'loss[:=]\\s*([-+.\\deE]+)'"
    return None


TELEMETRY = "Telemetry"
"""The launch form's section for ``TelemetrySpec``."""


@dataclass(frozen=True)
class TelemetrySpec:
    """What the workers measure and how the runner watches them (a profile's ``[telemetry]``).

    Each field is a ``setting``: its TOML key, CLI flag and form row come from it.
    """

    instrument: bool = setting(
        True, BOOL, flag="--no-instrument", negative=True,
        help="no zero-code instrumentation (logs, exits and rankwatch.log only)",
        label="Instrument", section=TELEMETRY, placeholder="Zero-code instrumentation",
        tip="Measure loss, step time and data wait without changing the script; "
            "off: logs, exits and rankwatch.log only")
    """Zero-code instrumentation (loss, step time, data wait). Off: logs and exits only."""
    parse_stdout: bool = setting(
        False, BOOL, flag="--parse-stdout",
        help="also read metrics from printed lines (loss, val_loss, lr, ...; HF Trainer and nanoGPT formats); "
             "each key is its own curve",
        label="Parse stdout", section=TELEMETRY, placeholder="Also read metrics from printed lines")
    """Also read loss values from printed lines (labelled ``parsed``)."""
    loss_pattern: str | None = setting(
        None, TEXT, check=loss_pattern_problem,
        help="regular expression with one group around the loss in a printed line (default: the built-in one)",
        label="Loss pattern", section=TELEMETRY, placeholder="built-in (loss=, loss:, HF, nanoGPT)")
    """Regex with one group for the value; ``None`` uses the built-in pattern."""
    sample_interval: float = setting(
        1.0, NUMBER, low=0.25, high=60.0, unit="seconds", flag="--sample-interval", metavar="SECONDS",
        help="seconds between GPU and process samples (0.25 to 60, default 1)",
        label="Sample every (s)", section=TELEMETRY, placeholder="1 (seconds)")
    """Seconds between GPU / process samples (0.25 .. 60)."""
    stall_timeout: float | None = setting(
        None, NUMBER, low=1.0, high=86400.0, auto=True, unit="seconds", flag="--stall-timeout",
        metavar="SECONDS", help="flag a rank stalled after this long without progress (default: from its step times)",
        label="Stall timeout (s)", section=TELEMETRY, placeholder="auto (from the rank's step times)")
    """Seconds without progress before a rank is flagged stalled; ``None`` derives it
    from the rank's recent step times."""
    hash_every: int = setting(
        0, INTEGER, low=0, flag="--hash-every", metavar="N",
        help="every N steps check that parameters are identical on all ranks (DDP consistency)",
        label="Hash every", section=TELEMETRY, placeholder="0 (off), or N steps")
    """Check every N steps that parameters are identical on all ranks (0 = off)."""
    full_detail_hours: float = setting(
        1.0, NUMBER, low=0.05, high=8760.0, unit="hours", flag="--full-detail-hours", metavar="HOURS",
        help="hours of every record kept as it came; older metrics are kept as one point per 10 s "
             "(per 5 min after a day) with their range, so a long run's store stays small (default 1)",
        label="Full detail (h)", section=TELEMETRY, placeholder="1 (hours; older: decimated)")
    """Hours of metrics kept in full; older ones become the store's pyramid (``runner.store.pyramid``)."""


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

    Exactly one of ``script`` / ``module`` is set. A field declared with ``setting`` (or a
    ``settings_table``) is read, written, offered as a flag and shown on the form from that
    declaration alone (``runner.profile.schema``); the others have rules of their own.
    """

    script: str | None = None
    module: str | None = None
    args: tuple[str, ...] = ()
    interpreter: str | None = None
    """Python with torch to run torchrun in; ``None`` is Rankwatch's own Python."""
    workdir: str | None = None
    """``None`` is the directory Rankwatch is started from."""
    env: tuple[tuple[str, str], ...] = ()
    nproc_per_node: int | str = setting(
        AUTO, INTEGER, low=1, high=1024, auto=True, flag="--nproc-per-node", aliases=("--nproc_per_node",),
        metavar="N|auto", help="processes per node (auto: one per picked GPU, or the CPU count)")
    """``"auto"`` = number of picked GPUs, or the CPU count in CPU mode."""
    gpus: GpuSelection = ALL
    backend: str = setting(AUTO, CHOICE, choices=BACKENDS, flag="--backend", help="exported as RANKWATCH_BACKEND")
    """``auto`` = nccl with GPUs, gloo on CPU. Exported as RANKWATCH_BACKEND."""
    nodes: tuple[NodeSpec, ...] = (NodeSpec(),)
    rendezvous: RendezvousSpec = field(default_factory=RendezvousSpec)
    max_restarts: int = setting(0, INTEGER, low=0, high=1000, flag="--max-restarts", metavar="N",
                                help="restart the workers up to N times after a failure")
    omp_num_threads: int | str = setting(
        AUTO, INTEGER, low=1, high=1024, auto=True, flag="--omp-num-threads", metavar="N|auto",
        help="OMP_NUM_THREADS for each worker (auto: the shell's, else cores / processes per node)")
    """``"auto"`` = the ``OMP_NUM_THREADS`` the shell exported, else cores divided by local processes
    (at least 1)."""
    legacy_local_rank: bool = setting(False, BOOL, flag="--legacy-local-rank",
                                      help="pass --local_rank=N to the script (torch.distributed.launch style)")
    """Pass ``--local_rank=N`` to scripts written for ``torch.distributed.launch``."""
    launch_mode: str = setting(
        AUTO, CHOICE, choices=LAUNCH_MODES, omit_default=True, flag="--launch-mode",
        help="torchrun: one process per rank; self-spawn: start the script once and watch the processes it "
             "spawns (torch.multiprocessing.spawn) as ranks, or it as the only rank (DataParallel); "
             "auto (default): self-spawn when the script calls torch's spawn")
    """``torchrun`` (one process per rank), ``self-spawn`` (the script is started once and
    starts its own ranks, ``torch.multiprocessing.spawn``; or one process, ``DataParallel``), or
    ``auto`` (self-spawn when the script calls torch's spawn; ``runner.profile.launch_mode``)."""
    telemetry: TelemetrySpec = field(default_factory=TelemetrySpec, metadata=SETTINGS_TABLE)
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
