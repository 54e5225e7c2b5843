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

Per-rank argument templates (``--rank {rank}``, ``rankwatch._templates``): torchrun gives
every worker the same arguments, so the runner's form passes them as written and each
worker's bootstrap expands its own; the user's form expands them in a tiny shell wrapper
per worker (``"$RANK"``), as the legacy ``--local_rank`` option does. ``rank_lines`` is
the line each rank ends up running, for the preview.

A self-spawning script (``runner.profile.launch_mode``) is started once with the
interpreter, no torchrun: ``python -u SCRIPT ARGS`` (the runner's form with the bootstrap
in front and ``RANKWATCH_LAUNCH_MODE=self-spawn``).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field

from rankwatch import _templates as templates
from rankwatch._environment import LAUNCH_MODE, SELF_SPAWN
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
    init_file: str | None = None
    """The fresh path ``{init_method:file}`` names (in the run's folder; removed after the run)."""
    extra_env: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class NodeCommand:
    node: ResolvedNode
    argv: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)
    """Variables set on top of the inherited environment."""
    cwd: str = "."
    rank_lines: tuple[str, ...] = ()
    """The script line each rank of this node runs, its templates expanded (``rank_lines``);
    empty when the arguments hold none."""
    shell_env: tuple[tuple[str, str], ...] = ()
    """Variables the shell sets when the line is pasted, each a shell expression written unquoted
    (``"$(mktemp -d)"/store``): only in ``shell_text``, never in a process Rankwatch starts."""

    def shell_text(self) -> str:
        """One line a person can paste into a POSIX shell on that node."""
        assignments = " ".join([*(f"{k}={shlex.quote(v)}" for k, v in self.env.items()),
                                *(f"{k}={expression}" for k, expression in self.shell_env)])
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


SHELL_VALUES = {
    "rank": '"$RANK"', "local_rank": '"$LOCAL_RANK"', "world_size": '"$WORLD_SIZE"', "node_rank": '"$GROUP_RANK"',
    "master_addr": '"$MASTER_ADDR"', "master_port": '"$MASTER_PORT"',
    "init_method": 'tcp://"$MASTER_ADDR":"$MASTER_PORT"',
    "init_method:file": f'file://"${templates.INIT_FILE_VARIABLE}"',
}
"""Each placeholder as a POSIX shell expression of the variables torchrun gives its workers."""


def shell_word(argument: str) -> str:
    """``argument`` as one shell word that a worker's shell expands as the bootstrap would."""
    if not templates.is_template(argument):
        return shlex.quote(argument)
    parts = [shlex.quote(piece) if isinstance(piece, str) else SHELL_VALUES[templates.key(*piece)]
             for piece in templates.parse(argument)]
    return "".join(parts) or "''"


def script_part(launch: ResolvedLaunch, node: ResolvedNode, *, bootstrap: bool) -> list[str]:
    """The torchrun arguments from the entry point on: the worker command."""
    spec = launch.spec
    entry = launch.script if node.is_local else (spec.script or "")
    if bootstrap:
        target = ["-m", spec.module] if spec.module else [entry]
        return ["-m", BOOTSTRAP_MODULE, *target, *spec.args]
    launch_target = f"-m {shlex.quote(spec.module)}" if spec.module else shlex.quote(entry or "")
    if templates.uses_templates(spec.args):
        # torchrun passes every worker the same arguments: a shell per worker expands them.
        words = [shlex.quote(node.python), "-u", launch_target]
        if spec.legacy_local_rank:
            words.append('--local_rank="$LOCAL_RANK"')
        words += [shell_word(argument) for argument in spec.args]
        return ["--no-python", "sh", "-c", "exec " + " ".join(words)]
    if spec.legacy_local_rank:
        # torch.distributed.launch passed --local_rank=N before the script's own
        # arguments; torchrun does not, so a tiny shell wrapper adds it per worker.
        wrapper = f'exec {shlex.quote(node.python)} -u {launch_target} --local_rank="$LOCAL_RANK" "$@"'
        return ["--no-python", "sh", "-c", wrapper, "rankwatch-legacy", *spec.args]
    if spec.module:
        return ["-m", spec.module, *spec.args]
    return [entry or "", *spec.args]


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
    if templates.uses_templates(launch.spec.args):
        env[templates.EXPAND_VARIABLE] = "1"
    if context.init_file is not None:
        env[templates.INIT_FILE_VARIABLE] = context.init_file
    if launch.self_spawn:
        env[LAUNCH_MODE] = SELF_SPAWN
    env.update(context.extra_env)
    return env


def uses_init_file(launch: ResolvedLaunch) -> bool:
    """Whether an argument names ``{init_method:file}`` (the runner then makes its folder)."""
    return any(templates.key(name, spelling) == "init_method:file"
               for _index, name, spelling in templates.placeholders(launch.spec.args))


def rank_lines(launch: ResolvedLaunch, node: ResolvedNode, plan: RendezvousPlan) -> tuple[str, ...]:
    """``rank R: python -u train.py --rank R ...`` for each rank of ``node``, its templates
    expanded (ranks numbered node by node, as a static rendezvous numbers them); empty
    when the arguments hold none. A value only known at launch is shown as ``<...>``."""
    spec = launch.spec
    if not templates.uses_templates(spec.args):
        return ()
    first = sum(other.processes for other in launch.nodes if other.node_rank < node.node_rank)
    master_addr = plan.master_addr or (plan.endpoint.rsplit(":", 1)[0] if plan.endpoint else "localhost")
    master_port = str(plan.master_port) if plan.master_port is not None else "<port torchrun picks>"
    target = ["-m", spec.module] if spec.module else [launch.script if node.is_local else (spec.script or "")]
    lines = []
    for local_rank in range(node.processes):
        values = {"rank": str(first + local_rank), "local_rank": str(local_rank),
                  "world_size": str(launch.world_size), "node_rank": str(node.node_rank),
                  "master_addr": master_addr, "master_port": master_port,
                  "init_method": templates.tcp_address(master_addr, master_port),
                  "init_method:file": "file://<a fresh file, removed after the run>"}
        legacy = [f"--local_rank={local_rank}"] if spec.legacy_local_rank else []
        words = [node.python, "-u", *target, *legacy, *templates.expand(spec.args, values)]
        lines.append(f"rank {first + local_rank}: {shlex.join(str(word) for word in words)}")
    return tuple(lines)


BY_HAND_INIT_FILE = '"$(mktemp -d)"/store'
"""``{init_method:file}``'s file in a command run by hand: in a fresh private (0700) folder of its own,
as a run's is in the run's folder; the shell makes it once, before torchrun starts the ranks."""


def build_node_command(
    launch: ResolvedLaunch,
    node: ResolvedNode,
    plan: RendezvousPlan,
    context: RunnerContext | None = None,
    init_file: str | None = None,
) -> NodeCommand:
    """The torchrun command for ``node``; with ``context``, the runner's instrumented form.

    ``init_file``: the file ``{init_method:file}`` names in the user's form (a run records its
    own); without it, the shell makes a fresh private one (``BY_HAND_INIT_FILE``)."""
    if launch.self_spawn:
        return self_spawn_command(launch, node, context)
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
    shell_env: tuple[tuple[str, str], ...] = ()
    if context is None and uses_init_file(launch):
        if init_file is not None:
            env[templates.INIT_FILE_VARIABLE] = init_file
        else:
            shell_env = ((templates.INIT_FILE_VARIABLE, BY_HAND_INIT_FILE),)
    return NodeCommand(node=node, argv=tuple(argv), env=env, cwd=node.workdir,
                       rank_lines=rank_lines(launch, node, plan), shell_env=shell_env)


def self_spawn_command(launch: ResolvedLaunch, node: ResolvedNode, context: RunnerContext | None) -> NodeCommand:
    """``python -u SCRIPT ARGS``: the script starts its own ranks (``runner.profile.launch_mode``)."""
    spec = launch.spec
    target = ["-m", spec.module] if spec.module else [launch.script or ""]
    env = base_environment(launch)
    if context is None:
        argv = [node.python, "-u", *target, *spec.args]
    else:
        argv = [node.python, "-u", "-m", BOOTSTRAP_MODULE, *target, *spec.args]
        env.update(runner_environment(launch, node, context))
    return NodeCommand(node=node, argv=tuple(argv), env=env, cwd=node.workdir)


def build_commands(launch: ResolvedLaunch, plan: RendezvousPlan, context: RunnerContext | None = None,
                   init_file: str | None = None) -> list[NodeCommand]:
    return [build_node_command(launch, node, plan, context, init_file) for node in launch.nodes]
