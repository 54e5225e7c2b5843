"""Rendezvous ports: find a free one, or say who holds a taken one.

"Address already in use" is the most common torchrun failure, usually a zombie of
the previous run. Saying which process holds the port (pid and command line) turns
a mystery into a one-line fix.
"""

from __future__ import annotations

import errno
import socket
from dataclasses import dataclass

import psutil


@dataclass(frozen=True)
class PortHolder:
    pid: int | None
    command: str | None

    def describe(self) -> str:
        if self.pid is None:
            return "another process (not visible to you)"
        return f"pid {self.pid} ({self.command})" if self.command else f"pid {self.pid}"


def free_port(host: str = "") -> int:
    """A TCP port that is free right now on ``host`` (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        return probe.getsockname()[1]


def port_is_free(port: int, host: str = "") -> bool:
    """Whether a server could bind ``port`` now (SO_REUSEADDR, as torch's TCPStore does)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            if exc.errno in (errno.EADDRINUSE, errno.EACCES):
                return False
            raise
    return True


def port_holder(port: int) -> PortHolder:
    """Who listens on ``port`` (best effort: other users' processes are not visible)."""
    try:
        connections = psutil.net_connections(kind="tcp")
    except (psutil.AccessDenied, OSError):
        connections = []
    for connection in connections:
        if connection.laddr and connection.laddr.port == port and connection.status == psutil.CONN_LISTEN:
            if connection.pid is None:
                return PortHolder(None, None)
            try:
                command = " ".join(psutil.Process(connection.pid).cmdline()) or None
            except (psutil.Error, OSError):
                command = None
            if command and len(command) > 120:
                command = command[:117] + "..."
            return PortHolder(connection.pid, command)
    return PortHolder(None, None)


def describe_taken_port(field: str, port: int, host: str = "") -> str:
    holder = port_holder(port)
    where = host or "this machine"
    return (f"{field}: port {port} on {where} is already in use by {holder.describe()}; "
            "pick another port (or leave it empty for a free one), or stop that process")
