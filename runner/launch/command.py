"""Build the exact torchrun command for each node of a resolved launch.

One builder serves two readers:

* ``for_user`` commands are what ``rankwatch command`` prints and the GUI previews:
  plain torchrun, runnable by hand on each node without Rankwatch.
* ``for_runner`` commands are what the runner actually starts: the same flags, plus
  torchrun's ``--log-dir`` in the run's folder (for its error files; workers' output
  does not go there but to the runner's output socket, see
  ``runner.launch.worker_output``), the worker bootstrap (``-m rankwatch._bootstrap``)
  in front of the script, and the job's environment contract (socket, token, marker).

Keeping both in one function is what makes "the preview is what runs" true.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field

from runner.profile.resolve import ResolvedLaunch, ResolvedNode

TORCHRUN_MODULE = "torch.distributed.run"
BOOTSTRAP_MODULE = "rankwatch._bootstrap"


@dataclass(frozen=True)
class RendezvousPlan:
    """Concrete rendezvous values for one launch (ports already chosen)."""

    mode: str
    endpoint: str | None = None
    job_id: str | None = None
    master_addr: str | None = None
    master_port: int | None = None


@dataclass(frozen=True)
class RunnerContext:
    """What the runner adds to each command: the environment contract to workers."""

    socket: str
    token: str
    run_key: str
    """Unique per job; also the marker by which every process of the job is found."""
    run_id: int
    log_dir: str
    stacks_dir: str
    instrument: bool = True
    hash_every: int = 0
    extra_env: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class NodeCommand:
    node: ResolvedNode
    argv: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)
    """Variables set on top of the inherited environment."""
    cwd: str = "."

    def shell_text(self) -> str:
        """One line a person can paste into a POSIX shell on that node."""
        assignments = " ".join(f"{k}={shlex.quote(v)}" for k, v in self.env.items())
        command = shlex.join(self.argv)
        body = f"{assignments} {command}" if assignments else command
        return f"cd {shlex.quote(self.cwd)} && {body}"


def rendezvous_flags(plan: RendezvousPlan, node: ResolvedNode, node_count: int) -> list[str]:
    if plan.mode == "standalone":
        return ["--standalone"]
    if plan.mode == "c10d":
        flags = ["--rdzv-backend=c10d", f"--rdzv-endpoint={plan.endpoint}"]
        if plan.job_id:
            flags.append(f"--rdzv-id={plan.job_id}")
        return flags
    flags = [f"--node-rank={node.node_rank}", f"--master-addr={plan.master_addr or 'localhost'}"]
    if plan.master_port is not None:
        flags.append(f"--master-port={plan.master_port}")
    return flags


def script_part(launch: ResolvedLaunch, node: ResolvedNode, *, bootstrap: bool) -> list[str]:
    """The torchrun arguments from the entry point on: the worker command."""
    spec = launch.spec
    entry = launch.script if node.is_local else (spec.script or "")
    if bootstrap:
        target = ["-m", spec.module] if spec.module else [entry]
        return ["-m", BOOTSTRAP_MODULE, *target, *spec.args]
    if spec.legacy_local_rank:
        # torch.distributed.launch passed --local_rank=N before the script's own
        # arguments; torchrun does not, so a tiny shell wrapper adds it per worker.
        launch_target = f"-m {shlex.quote(spec.module)}" if spec.module else shlex.quote(entry)
        wrapper = f'exec {shlex.quote(node.python)} -u {launch_target} --local_rank="$LOCAL_RANK" "$@"'
        return ["--no-python", "sh", "-c", wrapper, "rankwatch-legacy", *spec.args]
    if spec.module:
        return ["-m", spec.module, *spec.args]
    return [entry, *spec.args]


def base_environment(launch: ResolvedLaunch) -> dict[str, str]:
    """Environment every worker of this launch gets, with or without Rankwatch."""
    env: dict[str, str] = {}
    if launch.gpus:
        env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"  # indices as nvidia-smi and NVML number them
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in launch.gpus)
    else:
        env["CUDA_VISIBLE_DEVICES"] = ""
    env["OMP_NUM_THREADS"] = str(launch.omp_num_threads)
    env["RANKWATCH_BACKEND"] = launch.backend
    env.update(launch.spec.env_dict)
    return env


def runner_environment(launch: ResolvedLaunch, node: ResolvedNode, context: RunnerContext) -> dict[str, str]:
    env = {
        "PYTHONUNBUFFERED": "1",
        "RANKWATCH_SOCKET": context.socket,
        "RANKWATCH_TOKEN": context.token,
        "RANKWATCH_RUN_KEY": context.run_key,
        "RANKWATCH_RUN": str(context.run_id),
        "RANKWATCH_NODE_RANK": str(node.node_rank),
        "RANKWATCH_NODE_HOST": node.host,
        "RANKWATCH_INSTRUMENT": "1" if context.instrument else "0",
        "RANKWATCH_LEGACY_LOCAL_RANK": "1" if launch.spec.legacy_local_rank else "0",
        "RANKWATCH_STACKS_DIR": context.stacks_dir,
        "RANKWATCH_HASH_EVERY": str(context.hash_every),
    }
    env.update(context.extra_env)
    return env


def build_node_command(
    launch: ResolvedLaunch,
    node: ResolvedNode,
    plan: RendezvousPlan,
    context: RunnerContext | None = None,
) -> NodeCommand:
    """The torchrun command for ``node``; with ``context``, the runner's instrumented form."""
    argv = [node.python, "-m", TORCHRUN_MODULE,
            f"--nnodes={len(launch.nodes)}",
            f"--nproc-per-node={node.processes}",
            *rendezvous_flags(plan, node, len(launch.nodes))]
    if launch.spec.max_restarts:
        argv.append(f"--max-restarts={launch.spec.max_restarts}")
    env = base_environment(launch)
    if context is not None:
        argv.append(f"--log-dir={context.log_dir}")
        env.update(runner_environment(launch, node, context))
    argv += script_part(launch, node, bootstrap=context is not None)
    return NodeCommand(node=node, argv=tuple(argv), env=env, cwd=node.workdir)


def build_commands(launch: ResolvedLaunch, plan: RendezvousPlan, context: RunnerContext | None = None) -> list[NodeCommand]:
    return [build_node_command(launch, node, plan, context) for node in launch.nodes]
