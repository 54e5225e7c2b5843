"""Choose the concrete rendezvous of a launch: ports picked or checked before anything starts."""

from __future__ import annotations

import secrets
import socket

from runner.launch.command import RendezvousPlan
from runner.launch.ports import describe_taken_port, free_port, port_is_free
from runner.spec.parse import SpecError, SpecErrors, parse_host_port
from runner.spec.resolve import ResolvedLaunch, is_local_host


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
            endpoint = f"{launch.head.host if not is_local_host(launch.head.host) else socket.getfqdn()}:{free_port()}"
        host, port = parse_host_port(endpoint)
        if is_local_host(host) and not port_is_free(port):
            raise SpecErrors([SpecError("rendezvous.endpoint", describe_taken_port("", port, host).split(": ", 1)[1])])
        return RendezvousPlan(mode="c10d", endpoint=endpoint, job_id=spec.job_id or f"rankwatch-{secrets.token_hex(4)}")
    master_addr = spec.master_addr or ("localhost" if not launch.spec.is_multi_node else socket.getfqdn())
    port = spec.master_port
    if port is None:
        port = free_port()
    elif is_local_host(master_addr) and launch.head.is_local and not port_is_free(port):
        raise SpecErrors([SpecError("rendezvous.master_port", describe_taken_port("", port, master_addr).split(": ", 1)[1])])
    return RendezvousPlan(mode="static", master_addr=master_addr, master_port=port)
