"""``python -m runner agent``: one node of a multi-node job, started by the head over ssh.

The head runner runs this on every remote node, in the interpreter the job uses
there, and writes one launch message to its stdin (``launch_message``). The agent
then:

1. connects to the head over TCP and says ``agent_hello`` with the job's token;
2. opens a relay (``relay.WorkerRelay``) on a Unix socket in the user's private
   folder, for its workers' telemetry, with a token of its own;
3. starts torchrun for its node (``TorchrunSupervisor``, as the runner does on a
   single machine: own session, parent-death signal, every process carrying the
   job marker) and forwards torchrun's per-rank lines as ``log`` messages tagged
   with its host, its workers' messages, and their CPU and memory;
4. ends with ``node_exit`` and torchrun's exit status as its own.

When the head asks for stacks (a ``stack_request`` line on stdin) it signals its
own ranks and sends their dumps back (``node_stacks``).

It stops its workers (SIGTERM, SIGKILL after the grace period, every process with
the job marker on this node) when the head asks (a ``stop`` line on stdin), on
SIGTERM/SIGINT/SIGHUP, and when the head is gone: its stdin ends (the ssh session
died with the head) or its TCP connection drops. No worker outlives its head.

Errors are one line on stderr, which the head shows as the node's own output.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import select
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rankwatch import protocol
from rankwatch.protocol import MAX_LINE_BYTES, LogLine
from runner import paths
from runner.launch.output import OutputLine
from runner.launch.supervisor import TorchrunSupervisor
from runner.remote.head_link import HeadLink
from runner.remote.launch_message import (
    STACK_REQUEST,
    LaunchMessage,
    LaunchMessageError,
    decode_control,
    localise,
)
from runner.remote.node_info import DISTRIBUTION, installed_version
from runner.remote.node_stacks import capture_node_stacks
from runner.remote.relay import WorkerRelay
from runner.sampling.samplers import ProcessSampler

LAUNCH_READ_TIMEOUT_SECONDS = 30.0
HEAD_CONNECT_TIMEOUT_SECONDS = 15.0
DRAIN_SECONDS = 3.0
"""After torchrun exits: how long workers may take to finish sending."""
FORCE_KILL_MARGIN_SECONDS = 10.0

EXIT_BAD_LAUNCH = 2
EXIT_NO_HEAD = 3
EXIT_NOT_STARTED = 127


def say(text: str) -> None:
    """One line on stderr (the head shows it); quiet once the ssh session is gone."""
    with contextlib.suppress(OSError, ValueError):
        print(f"rankwatch agent: {text}", file=sys.stderr, flush=True)


class StdinLines:
    """Lines from a file descriptor, read with ``os.read``.

    Not ``sys.stdin``: a daemon thread blocked inside a buffered reader at exit
    makes the interpreter abort; a blocked ``os.read`` holds no such lock.
    """

    def __init__(self, fd: int = 0):
        self.fd = fd
        self._buffer = b""

    def readline(self, timeout: float | None = None) -> bytes:
        """The next line with its newline; ``b""`` at end of input.

        Raises:
            TimeoutError: nothing complete arrived within ``timeout`` seconds.
            LaunchMessageError: a line longer than the protocol allows.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while b"\n" not in self._buffer:
            if len(self._buffer) > MAX_LINE_BYTES:
                raise LaunchMessageError("a line on stdin is longer than the protocol allows")
            if deadline is not None:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not select.select([self.fd], [], [], remaining)[0]:
                    raise TimeoutError
            chunk = os.read(self.fd, 65536)
            if not chunk:
                line, self._buffer = self._buffer, b""
                return line
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line + b"\n"


class Agent:
    def __init__(self, launch: LaunchMessage, stdin: StdinLines):
        self.launch = launch
        self.stdin = stdin
        # Set by ``run``, in this order, before anything uses them:
        self.link: HeadLink
        self.relay: WorkerRelay
        self.supervisor: TorchrunSupervisor
        self._loop: asyncio.AbstractEventLoop
        self.stop_reason: str | None = None
        self._stop = asyncio.Event()
        self._force = asyncio.Event()
        self._signals = 0
        self._stop_reached_torchrun = False
        """The stop was sent to torchrun directly too (a Slurm job step's signal): add no SIGTERM."""

    # ---- stopping ----------------------------------------------------------------------

    def request_stop(self, force: bool, reason: str) -> None:
        """Stop the node's workers: SIGTERM, SIGKILL after the grace period (``force``: at once)."""
        if force:
            self._force.set()
        self.stop_reason = self.stop_reason or reason
        self._stop.set()

    def _on_signal(self, number: int) -> None:
        """SIGTERM, SIGINT or SIGHUP: stop; a second one means now (as for the runner)."""
        self._signals += 1
        self.request_stop(self._signals > 1, signal.Signals(number).name)

    def _read_controls(self) -> None:
        """Thread: stop lines from the head; end of stdin means the head is gone."""
        while True:
            try:
                line = self.stdin.readline()
            except (OSError, LaunchMessageError):
                line = b""
            if not line:
                self._call_in_loop(self.request_stop, False, "the ssh session to the head runner ended")
                return
            message = decode_control(line)
            if message is None:
                continue
            if message["type"] == STACK_REQUEST:
                self._call_in_loop(self._capture_stacks, protocol.StackRequest.from_wire(message).ranks)
            else:
                self._call_in_loop(self.request_stop, bool(message.get("force")), "the head runner asked to stop")

    def _capture_stacks(self, ranks: list[int]) -> None:
        """The head asked for some of this node's ranks' stacks (``node_stacks``)."""
        launch = self.launch
        stacks_dir = workspace_of(launch.run_key, launch.node_rank) / "stacks"
        self._loop.create_task(capture_node_stacks(ranks, dict(self.relay.pids), stacks_dir, launch.run_key,
                                                   launch.node_rank, launch.host, self.link.post))

    def _call_in_loop(self, function: Callable, *args) -> None:
        with contextlib.suppress(RuntimeError):  # the loop is already closed: we are exiting anyway
            self._loop.call_soon_threadsafe(function, *args)

    def _install_signal_handlers(self) -> None:
        for number in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            self._loop.add_signal_handler(number, self._on_signal, number)

    async def _watch_head(self) -> None:
        reason = await self.link.wait_closed_by_head()
        self.request_stop(False, reason)

    # ---- forwarding --------------------------------------------------------------------

    async def _forward(self, message: protocol.Message | dict[str, Any]) -> None:
        """A worker's message on its way to the head (the relay's ``forward``)."""
        await self.link.send(message)

    def _on_lines(self, lines: list[OutputLine]) -> None:
        for line in lines:
            rank = line.rank
            if rank is not None and line.local_rank_only:
                rank = self.relay.local_ranks.get(rank, rank)
            self.link.post(protocol.Log(self.launch.node_rank,
                                        LogLine(rank, line.t, line.stream, line.text, self.launch.host)))

    def _on_process_rows(self, rows: list[protocol.ProcessSample]) -> None:
        self.link.post(protocol.ProcessSamples(self.launch.node_rank, rows))

    def _launcher_line(self, text: str) -> None:
        """A line of the agent's own, shown with torchrun's lines for this node."""
        self.link.post(protocol.Log(self.launch.node_rank, LogLine(None, time.time(), "stderr",
                                                                   f"rankwatch agent: {text}", self.launch.host)))

    # ---- the run -----------------------------------------------------------------------

    async def run(self) -> int:
        self._loop = asyncio.get_running_loop()
        launch = self.launch
        hello = protocol.AgentHello(launch.node_rank, token=launch.token, run_key=launch.run_key, host=launch.host,
                                    pid=os.getpid(), version=installed_version(DISTRIBUTION),
                                    torch=installed_version("torch"))
        try:
            self.link = await HeadLink.open(launch.head_host, launch.head_port, hello, HEAD_CONNECT_TIMEOUT_SECONDS)
        except (OSError, asyncio.TimeoutError) as error:
            detail = "timed out" if isinstance(error, asyncio.TimeoutError) else (error.strerror or str(error))
            say(f"cannot connect to the head runner at {launch.head_host}:{launch.head_port} ({detail}); "
                "this node must reach the head machine on that address")
            return EXIT_NO_HEAD
        local_token = secrets.token_urlsafe(32)
        self.relay = WorkerRelay(local_token, self._forward)
        try:
            socket_path = paths.socket_dir() / f"agent-{launch.run_key[:12]}-{launch.node_rank}.sock"
            paths.remove_stale_sockets(socket_path.parent)  # what SIGKILLed agents and runners left there
            workspace = paths.private_dir(workspace_of(launch.run_key, launch.node_rank))
            (workspace / "stacks").mkdir(exist_ok=True)
            await self.relay.serve(socket_path)
        except OSError as error:  # a folder of someone else's, a socket path too long, a full disk
            message = f"cannot prepare the node: {error}"
            say(message)
            self._launcher_line(message)
            return await self._report_end(EXIT_NOT_STARTED)
        command = localise(launch, socket=str(socket_path), token=local_token,
                           log_dir=str(workspace / "torchrun"), stacks_dir=str(workspace / "stacks"))
        self.supervisor = TorchrunSupervisor(command, launch.run_key, self._on_lines)
        self._install_signal_handlers()
        threading.Thread(target=self._read_controls, name="rankwatch-agent-stdin", daemon=True).start()
        head_watch = asyncio.create_task(self._watch_head(), name="agent-head-watch")
        sampler = ProcessSampler(launch.sample_interval, pids=lambda: self.relay.pids,
                                 emit=lambda rows: self._call_in_loop(self._on_process_rows, rows))
        try:
            code = await self._run_torchrun(sampler)
        finally:
            sampler.stop()
            self.relay.close()
            socket_path.unlink(missing_ok=True)
        head_watch.cancel()
        return await self._report_end(code)

    async def _report_end(self, code: int) -> int:
        """``node_exit`` (the last message: everything before it has been forwarded), then close."""
        await self.link.send(protocol.NodeExit(self.launch.node_rank, time.time(), code, self.stop_reason,
                                               self.link.dropped + self.relay.dropped_lines))
        await self.link.close()
        return code

    async def _run_torchrun(self, sampler: ProcessSampler) -> int:
        if self._stop.is_set():  # stopped before torchrun even started
            return EXIT_NOT_STARTED
        try:
            await self.supervisor.start()
        except OSError as error:
            message = f"cannot start torchrun on {self.launch.host}: {error.strerror or error}"
            say(message)
            self._launcher_line(message)
            return EXIT_NOT_STARTED
        sampler.start()
        exited = asyncio.create_task(self.supervisor.wait(), name="agent-torchrun")
        stop = asyncio.create_task(self._stop.wait(), name="agent-stop")
        await asyncio.wait({exited, stop}, return_when=asyncio.FIRST_COMPLETED)
        if not exited.done():
            self._launcher_line(f"stopping the workers on {self.launch.host}: {self.stop_reason}")
            escalate = asyncio.create_task(self._kill_on_force())
            await self.supervisor.stop(self.launch.grace, force=self._force.is_set(),
                                       reached_torchrun=self._stop_reached_torchrun)
            escalate.cancel()
        else:
            stop.cancel()
        code = await exited
        await self.relay.drain(DRAIN_SECONDS)
        return code

    async def _kill_on_force(self) -> None:
        await self._force.wait()
        await self.supervisor.stop(0.0, force=True)


def main() -> int:
    """Read the launch message, run the node, return torchrun's exit status."""
    stdin = StdinLines(0)
    try:
        launch = LaunchMessage.decode(stdin.readline(timeout=LAUNCH_READ_TIMEOUT_SECONDS))
    except TimeoutError:
        say(f"no launch message on stdin within {LAUNCH_READ_TIMEOUT_SECONDS:.0f} s "
            "(the head runner starts this over ssh; it is not meant to be run by hand)")
        return EXIT_BAD_LAUNCH
    except (LaunchMessageError, OSError) as error:
        say(str(error))
        return EXIT_BAD_LAUNCH
    return asyncio.run(Agent(launch, stdin).run())


def workspace_of(run_key: str, node_rank: int) -> Path:
    """Where an agent keeps torchrun's log files and stack dumps on its node."""
    return paths.data_dir() / "nodes" / f"{run_key}-{node_rank}"
