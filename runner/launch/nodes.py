"""The nodes of a job, as the runner drives them: start, wait, stop.

``LocalNode`` runs torchrun on this machine (``TorchrunSupervisor``) and hands its
per-rank lines to the hub. Remote nodes (``runner.remote``) have the same shape but
run torchrun through an agent over SSH; their lines and telemetry reach the hub
over TCP. The job does not care which is which.
"""

from __future__ import annotations

import abc
from collections.abc import Callable

from runner.launch.command import NodeCommand
from runner.launch.output import OutputLine
from runner.launch.supervisor import TorchrunSupervisor
from runner.profile.resolve import ResolvedNode


class NodeHandle(abc.ABC):
    node: ResolvedNode

    @property
    def label(self) -> str:
        """How logs name this node: its host."""
        return self.node.host

    @abc.abstractmethod
    async def start(self) -> None:
        """Start torchrun on the node.

        Raises:
            OSError: it could not be started at all (the message says why).
        """

    @abc.abstractmethod
    async def wait(self) -> int:
        """The node's torchrun exit status, once it has ended and its output is read."""

    @abc.abstractmethod
    async def stop(self, grace: float, force: bool = False) -> None:
        """End every process of the job on the node (SIGTERM, SIGKILL after ``grace``)."""

    @property
    def pids(self) -> list[int]:
        """Local pids to leave alone or watch (torchrun on this machine)."""
        return []

    def claim_output(self, pid: int, rank: int) -> None:
        """Process ``pid`` of this node said hello as ``rank`` (its pending output is that rank's);
        only a local node's processes can be pending (``runner.launch.worker_output``)."""
        return  # a remote node's output is attributed by its agent


class LocalNode(NodeHandle):
    def __init__(self, node: ResolvedNode, command: NodeCommand, run_key: str,
                 on_lines: Callable[[ResolvedNode, list[OutputLine]], None]):
        self.node = node
        self.supervisor = TorchrunSupervisor(command, run_key, lambda lines: on_lines(node, lines))

    async def start(self) -> None:
        await self.supervisor.start()

    async def wait(self) -> int:
        return await self.supervisor.wait()

    async def stop(self, grace: float, force: bool = False) -> None:
        await self.supervisor.stop(grace, force=force)

    def claim_output(self, pid: int, rank: int) -> None:
        self.supervisor.claim_output(pid, rank)

    @property
    def pids(self) -> list[int]:
        return [self.supervisor.pid] if self.supervisor.pid else []
