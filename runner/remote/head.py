"""The head runner's side of a multi-node job: the agents' listener, their nodes, and
what the hub hears about them.

``Run`` owns one ``RemoteNodes`` for a multi-node launch. It opens the hub's TCP
listener on the address the nodes need (``addresses``), creates a ``RemoteNode``
for each remote node with the launch message its agent will get, and routes the
hub's agent events (connected, ``node_exit``, connection closed) to the right
node. When a node is lost it records that where everyone looks (the node's state
and the time, a ``node_lost`` event, its ranks LOST) and tells the job, which
stops the other nodes: with a node gone, their collectives can only hang.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Callable
from typing import Any, Protocol

from rankwatch.protocol import AgentHello, EventKind, Message, NodeExit
from runner.hub.hub import Hub
from runner.hub.observer import HubObserver
from runner.launch.command import RendezvousPlan, RunnerContext, build_node_command
from runner.launch.nodes import NodeHandle
from runner.launch.output import OutputLine
from runner.profile.parse import parse_host_port
from runner.profile.resolve import ResolvedLaunch, ResolvedNode
from runner.remote.addresses import HeadAddressError, agent_addresses
from runner.remote.launch_message import LaunchMessage, context_for_agent
from runner.remote.remote_node import RemoteNode
from runner.remote.ssh import SshOptionsError
from runner.state import NodeState, RankState


class AgentNode(Protocol):
    """What ``RemoteNodes`` needs of a node whose agent reports to the hub: a ``RemoteNode``
    (started over ssh) or a ``runner.slurm.nodes.SlurmNode`` (started by Slurm)."""

    node: ResolvedNode
    exit_message: NodeExit | None
    lost_at: float | None
    lost_reason: str | None

    @property
    def stopping(self) -> bool: ...

    def on_agent_connected(self) -> None: ...

    def on_node_exit(self, message: NodeExit) -> None: ...

    def on_agent_closed(self) -> None: ...


class RemoteNodes(HubObserver):
    def __init__(self, hub: Hub, run_key: str, token: str, on_lost: Callable[[str], None]):
        self.hub = hub
        self.run_key = run_key
        self.token = token
        self.on_lost = on_lost
        """Called with a reason when a node is lost (the job then stops the others)."""
        self.nodes: dict[int, AgentNode] = {}
        self.addresses: dict[int, str] = {}
        """node rank -> the head's address its agent connects to."""
        self.port: int | None = None
        self.error: str | None = None
        """Why agents cannot connect (no listener); creating a node then fails with it."""

    async def listen(self, launch: ResolvedLaunch, plan: RendezvousPlan) -> None:
        """Open the hub's TCP listener for the agents; never raises (see ``error``)."""
        self.hub.add_observer(self)
        try:
            self.addresses = agent_addresses(launch)
        except HeadAddressError as error:
            self.error = str(error)
            return
        endpoint = parse_host_port(plan.endpoint) if plan.endpoint else None
        avoid = endpoint[1] if endpoint is not None else plan.master_port
        distinct = list(dict.fromkeys(self.addresses.values()))
        try:
            for address in distinct:
                self.port = await self.hub.serve_tcp(address, self.port or _free_port(address, avoid))
        except OSError as error:
            self.error = f"cannot listen for the nodes' agents on {address}: {error.strerror or error}"
            return
        where = ", ".join(f"{_bracketed(address)}:{self.port}" for address in distinct)
        self.hub.add_event(EventKind.AGENTS_LISTENING, None, f"listening for node agents on {where} (token required)",
                           addresses=distinct, port=self.port)

    def create(self, launch: ResolvedLaunch, node: ResolvedNode, plan: RendezvousPlan, context: RunnerContext,
               on_lines: Callable[[ResolvedNode, list[OutputLine]], None], grace: float) -> NodeHandle:
        """The handle for ``node``, its launch message built from the job's own command.

        Raises:
            OSError: the head cannot listen for agents, or ``RANKWATCH_SSH_OPTIONS`` is malformed.
        """
        if self.error is not None or self.port is None:
            raise OSError(self.error or "not listening for the nodes' agents")
        command = build_node_command(launch, node, plan, context_for_agent(context))
        message = LaunchMessage(
            token=self.token, head_host=self.addresses[node.node_rank], head_port=self.port, run_key=self.run_key,
            run=context.run_id, node_rank=node.node_rank, host=node.host, argv=command.argv, env=command.env,
            cwd=command.cwd, grace=grace, sample_interval=launch.spec.telemetry.sample_interval)
        try:
            handle = RemoteNode(node, message, on_lines=on_lines, on_lost=self._node_lost)
        except SshOptionsError as error:
            raise OSError(str(error)) from None
        self.nodes[node.node_rank] = handle
        return handle

    def request_stacks(self, rows: list[Any]) -> list[int]:
        """Ask each node's agent for its ranks' stacks (``StackCapture.remote_capture``); the ranks asked."""
        by_node: dict[int, list[int]] = {}
        for row in rows:
            if row.node_rank is not None:
                by_node.setdefault(row.node_rank, []).append(row.rank)
        asked: list[int] = []
        for node_rank, ranks in by_node.items():
            # a Slurm node's agent reads no stdin from the head: its ranks stay "missing"
            request = getattr(self.nodes.get(node_rank), "request_stacks", None)
            if request is not None and request(ranks):
                asked += ranks
        return asked

    # ---- hub events ------------------------------------------------------------------------

    def on_agent_connected(self, hello: AgentHello) -> None:
        handle = self.nodes.get(hello.node_rank) if hello.node_rank is not None else None
        if handle is not None:
            handle.on_agent_connected()

    def on_agent_closed(self, node_rank: int | None) -> None:
        handle = self.nodes.get(node_rank) if node_rank is not None else None
        if handle is not None:
            handle.on_agent_closed()

    def on_message(self, message: Message) -> None:
        if not isinstance(message, NodeExit) or message.node_rank is None:
            return
        handle = self.nodes.get(message.node_rank)
        if handle is None:
            return
        handle.on_node_exit(message)
        reason = message.reason
        if reason and not handle.stopping:  # the agent stopped its workers on its own: say why
            self.hub.add_event(EventKind.WARNING, None, f"node {handle.node.node_rank} ({handle.node.host}): "
                                                        f"its agent stopped the workers: {reason}")

    def _node_lost(self, handle: AgentNode) -> None:
        node = handle.node
        when = time.strftime("%H:%M:%S", time.localtime(handle.lost_at))
        message = f"node {node.node_rank} ({node.host}) was lost at {when}: {handle.lost_reason}"
        asyncio.get_running_loop().create_task(
            self.hub.update_node(node.node_rank, node.host, NodeState.LOST.value, detail=message))
        self.hub.add_event(EventKind.NODE_LOST, None, message, t=handle.lost_at, node_rank=node.node_rank, host=node.host,
                           reason=handle.lost_reason)
        for row in list(self.hub.model.ranks.values()):
            if row.node_rank == node.node_rank and not RankState(row.state).finished:
                self.hub.model.on_exit(row.rank, row.exit_code, RankState.LOST)
                self.hub.rank_lost(row.rank, handle.lost_at or time.time())  # failure triage: these ranks ended then
        self.on_lost(message)


def _free_port(address: str, avoid: int | None) -> int:
    """A free port on ``address`` other than ``avoid`` (the rendezvous port, not bound yet)."""
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    while True:
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.bind((address, 0))
            port = probe.getsockname()[1]
        if port != avoid:
            return port


def _bracketed(address: str) -> str:
    return f"[{address}]" if ":" in address else address
