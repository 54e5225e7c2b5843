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

There is no control channel: the runner stops a Slurm run with ``scancel``, which
reaches the agent as SIGTERM (then SIGKILL after Slurm's KillWait), and the agent
stops its workers as for any other stop. It also stops them when its connection to
the runner drops (the runner is gone).
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import sys
from collections.abc import Mapping

from rankwatch import _protocol as protocol
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
    async def _forward(self, message: dict) -> None:
        """A worker's hello names this node as the run knows it: Slurm's node id, not the
        group rank torchrun's c10d rendezvous happened to give this node."""
        if message.get("type") == "hello":
            message["node_rank"] = self.launch.node_rank
        await super()._forward(message)

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
