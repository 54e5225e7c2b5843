"""Which address the head listens on for its agents: only the one the nodes use.

The head's TCP listener exists only for multi-node jobs and is bound to the
address by which the remote nodes reach this machine, never to every interface.
For each remote node we ask the kernel which local address it would send from
toward that node (``connect()`` on a UDP socket picks the route and sends
nothing). Nodes that are this machine (``localhost``, its own name: how tests
run two "nodes" on one box) are served on the loopback address. The host name is
taken from ``ssh -G``, so an alias from ``~/.ssh/config`` is resolved as ssh
would resolve it.

``RANKWATCH_HEAD_ADDRESS`` overrides all of this, for networks where the route
toward a node is not the way back (NAT, a jump host).
"""

from __future__ import annotations

import ipaddress
import os
import socket

from runner.profile.parse import SpecError
from runner.profile.resolve import ResolvedLaunch, ResolvedNode, is_local_host
from runner.remote.ssh import configured_hostname

HEAD_ADDRESS_VARIABLE = "RANKWATCH_HEAD_ADDRESS"
LOOPBACK = "127.0.0.1"


class HeadAddressError(SpecError):
    """No address toward a node could be found (``field`` names the node, the message the fix)."""


def remote_nodes(launch: ResolvedLaunch) -> list[ResolvedNode]:
    """The nodes reached over ssh (every node but a local head)."""
    return [node for node in launch.nodes if not node.is_local]


def head_name_for_nodes(launch: ResolvedLaunch) -> str:
    """How the other nodes should address the head (for the rendezvous endpoint).

    Its fully qualified name, unless that name only means "this machine" (Debian maps
    the host name to 127.0.1.1, containers to 127.0.0.1): a node elsewhere would then
    look for the rendezvous on itself. Then: the head's address on the route to the
    first remote node (or ``RANKWATCH_HEAD_ADDRESS``), the address its agent uses too.
    """
    name = socket.getfqdn()
    remote = remote_nodes(launch)
    if not remote or not _only_loopback(name):
        return name
    try:
        return os.environ.get(HEAD_ADDRESS_VARIABLE, "").strip() or address_toward(remote[0])
    except HeadAddressError:
        return name  # preflight reports the same problem with its fix


def _only_loopback(name: str) -> bool:
    try:
        infos = socket.getaddrinfo(name, None, type=socket.SOCK_STREAM)
    except socket.gaierror:
        return False
    return all(ipaddress.ip_address(str(info[4][0]).split("%")[0]).is_loopback for info in infos)


def agent_addresses(launch: ResolvedLaunch) -> dict[int, str]:
    """node rank -> the local address its agent connects to (the listener binds each one).

    Raises:
        HeadAddressError: a node's host cannot be resolved, or no route leads to it.
    """
    override = address_override()
    return {node.node_rank: override or address_toward(node) for node in remote_nodes(launch)}


def address_override() -> str | None:
    """``RANKWATCH_HEAD_ADDRESS``, checked to be an address of this machine.

    Raises:
        HeadAddressError: not an IP address, or not one of this machine's.
    """
    override = os.environ.get(HEAD_ADDRESS_VARIABLE, "").strip()
    if not override:
        return None
    try:
        family = socket.AF_INET6 if ipaddress.ip_address(override).version == 6 else socket.AF_INET
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.bind((override, 0))
    except ValueError:
        raise HeadAddressError(HEAD_ADDRESS_VARIABLE, f"{override!r} is not an IP address") from None
    except OSError as error:
        raise HeadAddressError(HEAD_ADDRESS_VARIABLE, f"{override} is not an address of this machine "
                                                      f"({error.strerror})") from None
    return override


def address_toward(node: ResolvedNode) -> str:
    """The local address this machine would use to reach ``node``.

    Raises:
        HeadAddressError: the host cannot be resolved or no route leads to it.
    """
    host = configured_hostname(node)
    if is_local_host(host):
        return LOOPBACK
    try:
        family, _, _, _, target = socket.getaddrinfo(host, node.ssh_port or 22, type=socket.SOCK_DGRAM)[0]
    except socket.gaierror as error:
        raise HeadAddressError(
            f"nodes[{node.node_rank}].host", f"cannot resolve {host} ({error.strerror}) to find the address it "
            f"reaches this machine at; set {HEAD_ADDRESS_VARIABLE} to this machine's address as the nodes see it"
        ) from None
    try:
        with socket.socket(family, socket.SOCK_DGRAM) as probe:
            probe.connect(target)  # picks the route; sends nothing
            return probe.getsockname()[0]
    except OSError as error:
        raise HeadAddressError(
            f"nodes[{node.node_rank}].host", f"no route from this machine to {host} ({error.strerror}); "
            f"set {HEAD_ADDRESS_VARIABLE} to this machine's address as the nodes see it") from None
