"""Where a Slurm run's agents reach the runner: the address, and the route.

Two routes (``slurm.telemetry_route``):

* ``direct``: the runner listens on TCP on this machine, on the one address by
  which it reaches a compute node of the job's partition (the kernel's route toward
  that node's ``NodeAddr`` as ``sinfo`` reports it; ``connect()`` on a UDP socket
  picks the route and sends nothing). Compute nodes of every cluster reach their
  login nodes, so this is the route when submitting from a login node.
  ``RANKWATCH_HEAD_ADDRESS`` overrides the address (NAT, several networks).
* ``login``: the runner listens on loopback only; its ssh connection to the login
  host forwards a private Unix socket there to that listener, and a relay on the
  login host (``runner.slurm.relay``) accepts the agents on the login host's
  address toward the compute nodes. Compute nodes rarely reach a workstation
  (NAT, firewalls), while they always reach the login host; so this is the route
  when submitting over ssh.

``auto`` picks ``direct`` when submitting from this machine and ``login`` when
submitting over ssh. Either way every connection must open with the run's token.
"""

from __future__ import annotations

import ipaddress
import socket

from runner.profile.spec import SlurmSpec
from runner.remote.addresses import HEAD_ADDRESS_VARIABLE, LOOPBACK, HeadAddressError

DIRECT = "direct"
LOGIN = "login"
ROUTE_FIELD = "slurm.telemetry_route"


def route_of(slurm: SlurmSpec) -> str:
    if slurm.telemetry_route != "auto":
        return slurm.telemetry_route
    return DIRECT if slurm.login_host is None else LOGIN


def source_address_toward(host: str) -> str:
    """The local address this machine sends from toward ``host`` (loopback for itself).

    Raises:
        HeadAddressError: ``host`` does not resolve, or no route leads there.
    """
    try:
        family, _, _, _, target = socket.getaddrinfo(host, 9, type=socket.SOCK_DGRAM)[0]
    except socket.gaierror as error:
        raise HeadAddressError(ROUTE_FIELD, f"cannot resolve the compute node {host} from this machine "
                                            f"({error.strerror}); set {HEAD_ADDRESS_VARIABLE} to this machine's "
                                            "address as the compute nodes see it, or use the login route") from None
    try:
        with socket.socket(family, socket.SOCK_DGRAM) as probe:
            probe.connect(target)  # picks the route; sends nothing
            address = probe.getsockname()[0]
    except OSError as error:
        raise HeadAddressError(ROUTE_FIELD, f"no route from this machine to the compute node {host} "
                                            f"({error.strerror}); set {HEAD_ADDRESS_VARIABLE} or use the "
                                            "login route") from None
    return LOOPBACK if ipaddress.ip_address(address.split("%")[0]).is_loopback else address


def first_node_address(sinfo_output: str) -> str | None:
    """The first ``NodeAddr`` in ``sinfo --noheader --Node --format=%o`` output."""
    for line in sinfo_output.splitlines():
        if line.strip():
            return line.strip()
    return None
