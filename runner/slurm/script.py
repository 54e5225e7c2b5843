"""The sbatch script of a Slurm run: one builder for the script a person submits by hand
and the one ``rankwatch run --slurm`` submits.

Both ask Slurm for the same allocation (the ``#SBATCH`` header) and find the
rendezvous the same way: torchrun's c10d store on the allocation's first node, at
that node's address (``sinfo``'s NodeAddr, which is its host name unless the site
says otherwise) and a port derived from the job id, so two jobs sharing a node do
not collide. They differ in what one task per node runs:

* by hand (``rankwatch command --slurm``): plain torchrun, the same flags
  ``rankwatch command`` prints, with no Rankwatch on the cluster at all;
* the runner's: ``python -m runner.slurm.agent``, which builds that same torchrun
  command (``build_node_command``, the runner's instrumented form) and reports to
  the runner; the command reaches it in the job's environment, never in the script.

torchrun's command is built with two placeholders that only exist once the job
runs, the rendezvous endpoint and the job id; the script turns them into shell
variables, the agent into their values.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import replace

from runner.launch.command import NodeCommand, RendezvousPlan, RunnerContext, build_node_command
from runner.profile.resolve import ResolvedLaunch
from runner.profile.spec import SlurmSpec

RENDEZVOUS_PLACEHOLDER = "@RANKWATCH_SLURM_RENDEZVOUS@"
JOB_ID_PLACEHOLDER = "@RANKWATCH_SLURM_JOB_ID@"
RENDEZVOUS_VARIABLE = "RANKWATCH_SLURM_RENDEZVOUS"
"""The script exports the endpoint under this name for the agents."""
SHELL_EXPANSIONS = {RENDEZVOUS_PLACEHOLDER: "${head_address}:${rdzv_port}", JOB_ID_PLACEHOLDER: "${SLURM_JOB_ID}"}
OUTPUT_FILE = "rankwatch-slurm-%j.out"
"""Slurm's output for the job (the batch script, srun, agents), in the working directory."""
AGENT_MODULE = "runner.slurm.agent"
RDZV_PORT_BASE = 20000
RDZV_PORT_SPAN = 20000
GPU_VARIABLES = ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER")
"""Slurm sets the GPUs a job's node may use; Rankwatch must not override them."""


def slurm_table(launch: ResolvedLaunch) -> SlurmSpec:
    """The launch's ``[slurm]`` table (every builder of ``runner.slurm`` is about a Slurm launch).

    Raises:
        ValueError: the launch has no ``[slurm]`` table (the caller's mistake: not a Slurm run).
    """
    slurm = launch.spec.slurm
    if slurm is None:
        raise ValueError(f"{launch.spec.entry_label} is not a Slurm launch (its spec has no [slurm] table)")
    return slurm


def slurm_plan() -> RendezvousPlan:
    """c10d on the first allocated node; endpoint and id are known when the job runs."""
    return RendezvousPlan(mode="c10d", endpoint=RENDEZVOUS_PLACEHOLDER, job_id=JOB_ID_PLACEHOLDER)


def node_command(launch: ResolvedLaunch, context: RunnerContext | None = None) -> NodeCommand:
    """The torchrun command of every node (they are alike: c10d hands out the ranks).

    Built for node 0; the agent sets the node's own rank and name. Without
    ``context``: the plain command a person runs by hand.
    """
    command = build_node_command(launch, launch.nodes[0], slurm_plan(), context)
    if launch.gpus:
        env = {key: value for key, value in command.env.items() if key not in GPU_VARIABLES}
        command = replace(command, env=env)
    return command


def job_name(launch: ResolvedLaunch) -> str:
    """``slurm.job_name``, else ``rankwatch-<script stem or module>``."""
    spec, slurm = launch.spec, slurm_table(launch)
    if slurm.job_name:
        return slurm.job_name
    label = spec.entry_label.rsplit(".py", 1)[0] if spec.script else spec.entry_label
    return "rankwatch-" + (re.sub(r"[^A-Za-z0-9_.+-]", "_", label) or "job")


def header(launch: ResolvedLaunch) -> list[str]:
    """The ``#SBATCH`` lines: the allocation Slurm is asked for."""
    slurm = slurm_table(launch)
    processes = launch.head.processes
    options = [f"--job-name={job_name(launch)}", f"--nodes={slurm.nodes}", "--ntasks-per-node=1",
               f"--cpus-per-task={slurm.cpus_per_node or processes}",
               "--no-requeue"]  # one attempt: a requeued job would start again with nobody watching
    if slurm.gpus_per_node:
        options.append(f"--gpus-per-node={slurm.gpus_per_node}")
    for flag, value in (("--partition", slurm.partition), ("--time", slurm.time_limit),
                        ("--account", slurm.account), ("--qos", slurm.qos)):
        if value:
            options.append(f"{flag}={value}")
    options += [f"--output={OUTPUT_FILE}", f"--chdir={launch.head.workdir}", *slurm.sbatch_options]
    return [f"#SBATCH {option}" for option in options]


def describe(launch: ResolvedLaunch) -> str:
    slurm = slurm_table(launch)
    devices = f"{slurm.gpus_per_node} GPU(s) each, {launch.backend}" if slurm.gpus_per_node else \
        f"CPU mode, {launch.backend}"
    return (f"{launch.spec.entry_label} on Slurm: {slurm.nodes} node(s) x {launch.head.processes} "
            f"process(es) ({devices})")


def rendezvous_lines() -> list[str]:
    return [
        "# torchrun's c10d rendezvous on the allocation's first node, at a port derived from the job id",
        'head_node=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
        'head_address=$(sinfo --noheader --Node --nodes="$head_node" --format=%o | head -n 1)',
        f"rdzv_port=$(({RDZV_PORT_BASE} + SLURM_JOB_ID % {RDZV_PORT_SPAN}))",
    ]


def render_by_hand(launch: ResolvedLaunch) -> str:
    """The script a person submits with ``sbatch``: plain torchrun on every node."""
    command = node_command(launch)
    lines = ["#!/bin/bash", f"# Rankwatch: {describe(launch)}.",
             "# Submit it with `sbatch FILE`; `rankwatch run --slurm ...` submits the same job and watches it.",
             *header(launch), "set -eu", "", *rendezvous_lines(), ""]
    lines += [f"export {key}={shlex.quote(value)}" for key, value in command.env.items()]
    lines += ["srun --ntasks-per-node=1 --kill-on-bad-exit=1 \\",
              "  " + " ".join(shell_word(word) for word in command.argv)]
    return "\n".join(lines) + "\n"


def render_for_runner(launch: ResolvedLaunch) -> str:
    """The script ``rankwatch run --slurm`` submits: one agent per node, which runs the same
    torchrun (instrumented) and reports to the runner. The agent's launch and the run's
    token arrive in the job's environment (``runner.slurm.submit``), not in this text."""
    python = shlex.quote(launch.head.python)
    lines = ["#!/bin/bash", f"# Rankwatch: {describe(launch)}; submitted by `rankwatch run`, which watches it.",
             *header(launch), "set -eu", "", *rendezvous_lines(),
             f'export {RENDEZVOUS_VARIABLE}="${{head_address}}:${{rdzv_port}}"', "",
             "# One Rankwatch agent per node: it starts torchrun there and reports to the runner.",
             "# (from / so that nothing in the working directory shadows Rankwatch's modules)",
             f"srun --ntasks-per-node=1 --kill-on-bad-exit=1 --chdir=/ {python} -m {AGENT_MODULE}"]
    return "\n".join(lines) + "\n"


def shell_word(word: str) -> str:
    """``word`` quoted for the script; placeholders become the shell variables they stand for."""
    if not any(placeholder in word for placeholder in SHELL_EXPANSIONS):
        return shlex.quote(word)
    pieces = re.split("(" + "|".join(re.escape(p) for p in SHELL_EXPANSIONS) + ")", word)
    quoted = "".join(SHELL_EXPANSIONS.get(piece) or re.sub(r'(["\\$`])', r"\\\1", piece) for piece in pieces)
    return f'"{quoted}"'


def fill_placeholders(argv: tuple[str, ...], rendezvous: str, job_id: str) -> tuple[str, ...]:
    """The agent's side: the values the placeholders stand for."""
    return tuple(word.replace(RENDEZVOUS_PLACEHOLDER, rendezvous).replace(JOB_ID_PLACEHOLDER, job_id)
                 for word in argv)
