"""``python -m runner.slurm.agent``: one node of a Slurm run, started by ``srun`` (one task per node).

It is the multi-node agent (``runner.remote.agent``: torchrun for its node, a relay
for its workers' telemetry, one token-authenticated TCP connection to the runner)
with two differences that come from Slurm:

* its launch does not arrive on stdin from an ssh session but in the job's
  environment, put there by the runner at submission (``runner.slurm.submit``):
  ``RANKWATCH_SLURM_LAUNCH`` (the node command, the runner's address; no secret)
  and ``RANKWATCH_SLURM_TOKEN``; both are removed from the environment before
  anything starts, and no worker ever sees them;
* what only the allocation knows comes from Slurm's own variables: the node's rank
  (``SLURM_NODEID``) and name (``SLURMD_NODENAME``), the job id, and the rendezvous
  endpoint the batch script found (``RANKWATCH_SLURM_RENDEZVOUS``).

There is no control channel: the runner stops a Slurm run with ``scancel``. Slurm ends
a job step (a cancel, a time limit, a preemption) by signalling every process of it at
once: the agent, torchrun's keeper, torchrun and the workers all get SIGTERM (twice on a
time limit), then SIGKILL after Slurm's KillWait. torchrun thus has its stop from Slurm,
and the agent adds no signal of its own (torchrun's shutdown breaks off on a second
SIGTERM, see ``runner.launch.keeper``, which does not pass on a stop that did not come
from the agent either): it waits for its node's processes to end and SIGKILLs what is
left after the grace period, well before KillWait. When its connection to the runner
drops (the runner is gone) it stops its workers as over ssh, through the keeper.

The run's marker (``RANKWATCH_RUN_KEY``) is not in the job's environment: it starts at
torchrun's keeper, so Rankwatch's clean-up on a node reaches what the agent started and
never Slurm's own processes of the job (the batch script, ``srun``), which wait for the
agent and which Slurm ends.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import sys
from collections.abc import Mapping
from typing import Any

from rankwatch import protocol
from runner.remote.agent import EXIT_BAD_LAUNCH, Agent, StdinLines, say
from runner.remote.launch_message import LAUNCH, LaunchMessage, LaunchMessageError
from runner.slurm.script import RENDEZVOUS_VARIABLE, fill_placeholders

LAUNCH_VARIABLE = "RANKWATCH_SLURM_LAUNCH"
TOKEN_VARIABLE = "RANKWATCH_SLURM_TOKEN"
SECRET_VARIABLES = (TOKEN_VARIABLE, LAUNCH_VARIABLE)
NODE_VARIABLES = {"RANKWATCH_NODE_RANK", "RANKWATCH_NODE_HOST"}
"""Set per node by the agent (the runner's template is node 0's)."""


def launch_template(message: LaunchMessage) -> str:
    """The runner's side: the launch without the token and the node's own fields, as JSON."""
    return json.dumps({"head_host": message.head_host, "head_port": message.head_port, "run_key": message.run_key,
                       "run": message.run, "argv": list(message.argv), "env": message.env, "cwd": message.cwd,
                       "grace": message.grace, "sample_interval": message.sample_interval})


def launch_from_environment(environ: Mapping[str, str]) -> LaunchMessage:
    """The node's launch, from the runner's template and Slurm's variables.

    Raises:
        LaunchMessageError: not started by ``rankwatch run --slurm`` (a variable is
            missing) or the template is damaged.
    """
    missing = [name for name in (LAUNCH_VARIABLE, TOKEN_VARIABLE, RENDEZVOUS_VARIABLE, "SLURM_NODEID",
                                 "SLURM_JOB_ID") if not environ.get(name)]
    if missing:
        raise LaunchMessageError(f"{', '.join(missing)} not set: this runs inside a job submitted by "
                                 "`rankwatch run --slurm`, not by hand")
    try:
        template = json.loads(environ[LAUNCH_VARIABLE])
        node_rank = int(environ["SLURM_NODEID"])
    except ValueError as error:
        raise LaunchMessageError(f"the launch in {LAUNCH_VARIABLE} is damaged ({error})") from None
    if not isinstance(template, dict) or not isinstance(template.get("argv"), list) \
            or not isinstance(template.get("env"), dict):
        raise LaunchMessageError(f"the launch in {LAUNCH_VARIABLE} is damaged (no argv or env)")
    host = environ.get("SLURMD_NODENAME") or socket.gethostname()
    argv = fill_placeholders(tuple(str(word) for word in template["argv"]), environ[RENDEZVOUS_VARIABLE],
                             environ["SLURM_JOB_ID"])
    env = {**template["env"], "RANKWATCH_NODE_RANK": str(node_rank), "RANKWATCH_NODE_HOST": host}
    fields = {**template, "token": environ[TOKEN_VARIABLE], "node_rank": node_rank, "host": host,
              "argv": list(argv), "env": env}
    return LaunchMessage.decode(protocol.encode(LAUNCH, **fields))  # the same checks as over ssh


class SlurmAgent(Agent):
    async def _forward(self, message: protocol.Message | dict[str, Any]) -> None:
        """A worker's hello names this node as the run knows it: Slurm's node id, not the
        group rank torchrun's c10d rendezvous happened to give this node."""
        if isinstance(message, protocol.Hello):
            message.node_rank = self.launch.node_rank
        elif isinstance(message, dict) and message.get("type") == protocol.Hello.TYPE:
            message["node_rank"] = self.launch.node_rank
        await super()._forward(message)

    def _on_signal(self, number: int) -> None:
        """Slurm ending the job step: the same signal reached torchrun and its workers (more than
        once on a time limit, which is no reason to skip the grace period). A signal sent to the
        agent alone (a ``kill`` of its pid) thus ends the node's run with SIGKILL after the grace
        period, without a SIGTERM first."""
        self._stop_reached_torchrun = True
        self.request_stop(False, f"Slurm ended the job step ({signal.Signals(number).name})")

    def _read_controls(self) -> None:
        """No control lines under srun (its stdin is not the runner's): the runner stops a
        Slurm run with scancel, which arrives here as SIGTERM."""


def main() -> int:
    try:
        launch = launch_from_environment(os.environ)
    except LaunchMessageError as error:
        say(str(error))
        return EXIT_BAD_LAUNCH
    for name in SECRET_VARIABLES:
        os.environ.pop(name, None)
    return asyncio.run(SlurmAgent(launch, StdinLines(0)).run())


if __name__ == "__main__":
    sys.exit(main())
