"""What the head runner tells an agent, over ssh's stdin.

The first line on the agent's stdin is one ``launch`` message; every later line
is a control message; end of stdin means the head is gone (it was killed, or the
ssh session died), and the agent then stops its workers. Same framing as the
wire protocol (``rankwatch.protocol``: one JSON object per line, ``type`` and
``v``)::

    launch  token, head_host, head_port, run_key, run, node_rank, host, argv, env, cwd,
            grace, sample_interval
    stop    force: bool      (graceful: SIGTERM, SIGKILL after ``grace``; force: now)

Why stdin: the job's token must reach the node without showing up in an argv
(every user sees those in ``ps``) or in a file someone else could read. ssh's
stdin is private to its two ends and encrypted in between.

The head builds the node's torchrun command exactly as for a local node
(``build_node_command`` with the job's ``RunnerContext``) except for what only
the node knows: where its workers' socket is, their token, and its folders for
torchrun's log files and stack dumps. The agent fills those in (``localise``).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from rankwatch import protocol
from runner.launch.command import BOOTSTRAP_MODULE, NodeCommand, RunnerContext

LAUNCH = protocol.Launch.TYPE
STOP = protocol.AgentStop.TYPE
STACK_REQUEST = protocol.StackRequest.TYPE
CONTROL_TYPES = protocol.AGENT_CONTROL_TYPES
LOG_DIR_FLAG = "--log-dir="
NODE_LOCAL_VARIABLES = ("RANKWATCH_SOCKET", "RANKWATCH_TOKEN", "RANKWATCH_STACKS_DIR")
"""Set by the agent on the node; the head leaves them empty."""


class LaunchMessageError(ValueError):
    """The agent's stdin did not start with a valid launch message (the message says why)."""


class LaunchMessage(protocol.Launch):
    """The contract's ``launch`` message (fields: ``rankwatch.protocol.Launch``), as the agent reads it."""

    __slots__ = ()

    @classmethod
    def decode(cls, line: bytes) -> LaunchMessage:
        """Parse the first stdin line.

        Raises:
            LaunchMessageError: not a launch message, or a field is missing or of the wrong type.
        """
        if not line.strip():
            raise LaunchMessageError("no launch message on stdin (run by the head runner over ssh, not by hand)")
        try:
            fields = protocol.decode(line, allowed=CONTROL_TYPES)
        except protocol.ProtocolError as error:
            raise LaunchMessageError(f"the launch message is not valid ({error})") from None
        if fields["type"] != LAUNCH:
            raise LaunchMessageError(f"expected a launch message first, got {fields['type']!r}")
        try:
            message = cls.from_wire(fields)
        except protocol.ProtocolError as error:
            raise LaunchMessageError(str(error).removeprefix("invalid: ")) from None
        assert isinstance(message, LaunchMessage)
        return message


def stop_line(force: bool) -> bytes:
    return protocol.AgentStop(bool(force)).encode()


def decode_control(line: bytes) -> dict[str, Any] | None:
    """A control line after the launch message; ``None`` for anything else (ignored)."""
    try:
        message = protocol.decode(line, allowed=CONTROL_TYPES)
    except protocol.ProtocolError:
        return None
    return message if message["type"] in (STOP, STACK_REQUEST) else None


def context_for_agent(context: RunnerContext) -> RunnerContext:
    """The job's context with the node-local parts (socket, token, folders) left empty
    for the agent; the head's own token never goes into a remote command."""
    return replace(context, socket="", token="", log_dir="", stacks_dir="")


def localise(message: LaunchMessage, socket: str, token: str, log_dir: str, stacks_dir: str) -> NodeCommand:
    """The node's command with its own socket, worker token and folders filled in.

    Only ``--log-dir=`` among torchrun's own flags (before the bootstrap module) is
    replaced, so a script argument that happens to look the same is left alone.
    """
    argv = list(message.argv)
    script_start = _index_of_bootstrap(argv)
    for index, word in enumerate(argv[:script_start]):
        if word.startswith(LOG_DIR_FLAG):
            argv[index] = LOG_DIR_FLAG + log_dir
            break
    env = dict(message.env)
    env.update({"RANKWATCH_SOCKET": socket, "RANKWATCH_TOKEN": token, "RANKWATCH_STACKS_DIR": stacks_dir,
                "RANKWATCH_RUN_KEY": message.run_key})
    # no ResolvedNode on the node: nothing there reads it
    return NodeCommand(node=None, argv=tuple(argv), env=env, cwd=message.cwd)  # type: ignore[arg-type]


def _index_of_bootstrap(argv: list[str]) -> int:
    for index in range(len(argv) - 1):
        if argv[index] == "-m" and argv[index + 1] == BOOTSTRAP_MODULE:
            return index
    return len(argv)

