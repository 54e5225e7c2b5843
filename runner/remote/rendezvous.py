"""Choose the concrete rendezvous of a launch: ports picked or checked before anything starts.

Here, beside the nodes, not in ``runner.launch``: the rendezvous is where the nodes meet, so a
multi-node job's endpoint names the head as the other nodes reach it (``runner.remote.addresses``).
"""

from __future__ import annotations

import secrets
import socket

from runner.launch.command import RendezvousPlan
from runner.launch.ports import describe_taken_port, free_port, port_is_free
from runner.profile.parse import SpecError, SpecErrors, parse_host_port
from runner.profile.resolve import ResolvedLaunch, is_local_host
from runner.remote.addresses import head_name_for_nodes


def plan_rendezvous(launch: ResolvedLaunch) -> RendezvousPlan:
    """Concrete rendezvous values: ports chosen or checked.

    Raises:
        SpecErrors: a requested port on this machine is taken (names the holder).
    """
    spec = launch.spec.rendezvous
    if spec.mode == "standalone":
        return RendezvousPlan(mode="standalone")
    if spec.mode == "c10d":
        endpoint = spec.endpoint
        if endpoint is None:
            endpoint = f"{launch.head.host if not is_local_host(launch.head.host) else head_name_for_nodes(launch)}:{free_port()}"
        parsed = parse_host_port(endpoint)
        if parsed is None:
            raise SpecErrors([SpecError("rendezvous.endpoint", f'{endpoint!r} is not "host:port"')])
        host, port = parsed
        if _is_this_machine(host) and not port_is_free(port):  # the head's torchrun will host it
            raise SpecErrors([SpecError("rendezvous.endpoint", describe_taken_port("", port, host).split(": ", 1)[1])])
        return RendezvousPlan(mode="c10d", endpoint=endpoint, job_id=spec.job_id or f"rankwatch-{secrets.token_hex(4)}")
    master_addr = spec.master_addr or ("localhost" if not launch.spec.is_multi_node else head_name_for_nodes(launch))
    asked = spec.master_port
    port = free_port() if asked is None else asked
    if asked is not None and is_local_host(master_addr) and launch.head.is_local and not port_is_free(port):
        raise SpecErrors([SpecError("rendezvous.master_port", describe_taken_port("", port, master_addr).split(": ", 1)[1])])
    return RendezvousPlan(mode="static", master_addr=master_addr, master_port=port)


def _is_this_machine(host: str) -> bool:
    """Whether ``host`` names this machine (by name, or by an address bound here), as
    torch decides which node hosts the c10d store."""
    if is_local_host(host) or host == socket.getfqdn():
        return True
    try:
        addresses = {str(info[4][0]) for info in socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)}
    except socket.gaierror:
        return False
    for address in addresses:
        family = socket.AF_INET6 if ":" in address else socket.AF_INET
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            try:
                probe.bind((address, 0))
            except OSError:
                continue
            return True
    return False
