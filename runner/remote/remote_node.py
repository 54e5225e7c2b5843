"""The head's handle on one remote node: its agent, started and stopped over ssh.

``start`` runs ``ssh ... python -m runner agent`` (own session, so a Ctrl-C in the
runner's terminal reaches only the runner, which then stops every node in order;
a parent-death signal, so ssh ends with a killed runner and the agent notices),
writes the launch message with the job's token to ssh's stdin, and returns once
the agent has connected back over TCP, or raises with the reason it could not
(ssh's own message turned into advice).

The node's output and telemetry reach the hub over the agent's TCP connection;
ssh's stdout and stderr carry only what goes wrong before or outside it (ssh
errors, the agent's one-line errors) and are shown as the node's launcher lines.

A node is **lost** when its agent's connection drops, or its ssh session ends,
before the agent reported the end (``node_exit``) and without a stop from here:
the node crashed, rebooted or fell off the network. ``lost_at`` is when that was
first seen.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections import deque
from collections.abc import Callable

from rankwatch.protocol import NodeExit, StackRequest
from runner.launch.nodes import NodeHandle
from runner.launch.output import OutputLine
from runner.launch.process_tree import set_parent_death_signal
from runner.launch.supervisor import exit_status
from runner.profile.resolve import ResolvedNode
from runner.remote.launch_message import LaunchMessage, stop_line
from runner.remote.ssh import (
    RUNNER_MODULE,
    explain_ssh_failure,
    last_error_line,
    remote_python_command,
    ssh_argv,
)

AGENT_CONNECT_SECONDS = 60.0
"""ssh's own connect timeout (10 s) plus starting Python on a slow node, with room to spare."""
STOP_MARGIN_SECONDS = 10.0
"""Beyond the grace period: the agent's SIGKILL round and its last messages."""
FINAL_MESSAGE_SECONDS = 5.0
"""After ssh ends: how long the agent's ``node_exit`` may still take over TCP."""
SSH_FAILED = 255
"""ssh's exit status when it could not connect (the remote command never ran)."""


class RemoteNode(NodeHandle):
    def __init__(self, node: ResolvedNode, launch: LaunchMessage,
                 on_lines: Callable[[ResolvedNode, list[OutputLine]], None],
                 on_lost: Callable[[RemoteNode], None]):
        self.node = node
        self.launch = launch
        self.argv = ssh_argv(node, remote_python_command(
            node.python, ["-m", RUNNER_MODULE, "agent"], env={"RANKWATCH_RUN_KEY": launch.run_key}))
        """The job key rides in the remote command (it is not a secret; the token is):
        the agent carries the job marker, so a leftover agent is found like any worker."""
        self.on_lines = on_lines
        self.on_lost = on_lost
        self.process: asyncio.subprocess.Process | None = None
        self.exit_message: NodeExit | None = None
        self.lost_at: float | None = None
        self.lost_reason: str | None = None
        self._connected = asyncio.Event()
        self._agent_closed = asyncio.Event()
        self._stopping = False
        self._readers: list[asyncio.Task] = []
        self._output_tail: deque[str] = deque(maxlen=20)

    @property
    def stopping(self) -> bool:
        """A stop was asked from here (the node ending now is expected, not lost)."""
        return self._stopping

    @property
    def head_address(self) -> str:
        return f"{self.launch.head_host}:{self.launch.head_port}"

    # ---- what the hub reports about this node's agent (via runner.remote.head) ----------

    def on_agent_connected(self) -> None:
        self._connected.set()

    def on_node_exit(self, message: NodeExit) -> None:
        self.exit_message = message

    def on_agent_closed(self) -> None:
        self._agent_closed.set()
        if self.exit_message is None and not self._stopping:
            self._mark_lost("the connection to its agent dropped")

    def _mark_lost(self, reason: str) -> None:
        if self.lost_at is not None:
            return
        self.lost_at = time.time()
        self.lost_reason = reason
        self.on_lost(self)

    # ---- NodeHandle ----------------------------------------------------------------------

    async def start(self) -> None:
        """Start the agent and wait until it has connected back.

        Raises:
            OSError: ssh is missing, the node cannot be reached, the agent failed
                there, or it did not connect back in time (the message says which).
        """
        env = {key: value for key, value in os.environ.items() if not key.startswith("RANKWATCH_RUN_KEY")}
        try:
            process = self.process = await asyncio.create_subprocess_exec(
                *self.argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE, start_new_session=True, preexec_fn=set_parent_death_signal,
                env=env)
        except FileNotFoundError:
            raise OSError(f"node {self.node.node_rank} ({self.node.host}): ssh is not installed here; "
                          "install the OpenSSH client (e.g. apt-get install openssh-client)") from None
        assert process.stdout is not None and process.stderr is not None
        self._readers = [asyncio.create_task(self._read(process.stdout, "stdout")),
                         asyncio.create_task(self._read(process.stderr, "stderr"))]
        await self._send(self.launch.encode())
        exited = asyncio.create_task(process.wait())
        connected = asyncio.create_task(self._connected.wait())
        done, _ = await asyncio.wait({exited, connected}, timeout=AGENT_CONNECT_SECONDS,
                                     return_when=asyncio.FIRST_COMPLETED)
        if connected in done:
            exited.cancel()
            return
        connected.cancel()
        if exited not in done:
            exited.cancel()
            await self._end_ssh()
            raise OSError(f"node {self.node.node_rank} ({self.node.host}): its agent did not connect back to "
                          f"{self.head_address} within {AGENT_CONNECT_SECONDS:.0f} s; can that node reach this "
                          "machine on that address (firewall)? RANKWATCH_HEAD_ADDRESS picks another address")
        await self._finish_readers()
        raise OSError(self._start_failure(process.returncode if process.returncode is not None else SSH_FAILED))

    def _start_failure(self, returncode: int) -> str:
        where = f"node {self.node.node_rank} ({self.node.host})"
        output = "\n".join(self._output_tail)
        if returncode == SSH_FAILED:
            return f"{where}: {explain_ssh_failure(self.node, output)}"
        detail = last_error_line(output) or f"its agent exited with status {exit_status(returncode)}"
        if "not found" in detail and self.node.python in detail:
            return (f"{where}: {self.node.python} was not found there; set python for this node "
                    "to an interpreter with torch and Rankwatch")
        return f"{where}: {detail}"

    async def wait(self) -> int:
        """The node's torchrun exit status, as its agent reported it (ssh's status otherwise)."""
        returncode = await self._ssh.wait()
        await self._finish_readers()
        if self.exit_message is None and not self._agent_closed.is_set():
            with contextlib.suppress(asyncio.TimeoutError):  # node_exit may still be on its way over TCP
                await asyncio.wait_for(self._agent_closed.wait(), FINAL_MESSAGE_SECONDS)
        if self.exit_message is not None and self.exit_message.code is not None:
            return self.exit_message.code
        status = exit_status(returncode)
        if not self._stopping:
            detail = last_error_line("\n".join(self._output_tail))
            self._mark_lost(f"its ssh session ended (status {status}{': ' + detail if detail else ''}) "
                            "before the agent reported the end")
        return status or SSH_FAILED

    async def stop(self, grace: float, force: bool = False) -> None:
        """Ask the agent to stop the node (it ends every process with the job marker there);
        if it has not ended after the grace period and a margin, cut its ssh session, which
        the agent also takes as a stop, and end ssh."""
        if self.process is None or self.process.returncode is not None:
            return
        self._stopping = True
        await self._send(stop_line(force))
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self.process.wait(), (0.0 if force else grace) + STOP_MARGIN_SECONDS)
            return
        await self._end_ssh()

    # ---- ssh's pipes ---------------------------------------------------------------------

    @property
    def _ssh(self) -> asyncio.subprocess.Process:
        assert self.process is not None, "start() first"
        return self.process

    def request_stacks(self, ranks: list[int]) -> bool:
        """Ask the agent to signal ``ranks`` for their stacks; False when it cannot be asked."""
        if self.process is None or self.lost_at is not None or self.stopping:
            return False
        stdin = self.process.stdin
        if stdin is None or stdin.is_closing():
            return False
        asyncio.get_running_loop().create_task(self._send(StackRequest(ranks).encode()))
        return True

    async def _send(self, line: bytes) -> None:
        stdin = self._ssh.stdin
        if stdin is None or stdin.is_closing():
            return
        with contextlib.suppress(ConnectionError, OSError):
            stdin.write(line)
            await stdin.drain()

    async def _end_ssh(self) -> None:
        """Close ssh's stdin (the agent sees the end and stops), then end ssh itself."""
        process = self._ssh
        if process.stdin is not None:
            process.stdin.close()
        for action in (None, process.terminate, process.kill):
            if action is not None and process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    action()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(process.wait(), 5.0)
                return

    async def _read(self, stream: asyncio.StreamReader, name: str) -> None:
        while True:
            try:
                raw = await stream.readline()
            except (ValueError, asyncio.LimitOverrunError):  # an absurdly long line: skip it
                continue
            if not raw:
                return
            text = raw.decode("utf-8", errors="replace").rstrip("\r\n")
            self._output_tail.append(text)
            self.on_lines(self.node, [OutputLine(rank=None, stream=name, text=text, t=time.time())])

    async def _finish_readers(self) -> None:
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.gather(*self._readers, return_exceptions=True), 5.0)
