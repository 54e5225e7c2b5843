"""Reading size-bounded lines from one client, and judging whether it misbehaves.

asyncio's ``readuntil`` raises when a line exceeds the stream limit and leaves the
data in the buffer; ``read_bounded_line`` discards the whole oversized line
instead and reports it, so one huge line costs a client that line, not its
connection (and never the hub its memory).
"""

from __future__ import annotations

import asyncio
import socket
import struct
from collections import Counter
from dataclasses import dataclass, field

from rankwatch.protocol import MAX_LINE_BYTES

_PEER_CREDENTIALS = struct.Struct("3i")
"""``struct ucred``: pid, uid, gid."""

OVERSIZED = object()
"""Returned in place of a line that was longer than the bound (already discarded)."""

STREAM_LIMIT = MAX_LINE_BYTES + 1


def peer_pid(writer: asyncio.StreamWriter) -> int | None:
    """The pid of the process that connected to this Unix socket, as the kernel tells it
    (``SO_PEERCRED``, translated into this pid namespace); None over TCP or where unknown.

    A hello's pid is the worker's word; this is proof: a worker whose hello names the pid
    that connected is that process (the reporter connects from the rank process itself).
    """
    sock = writer.get_extra_info("socket")
    if sock is None or sock.family != socket.AF_UNIX or not hasattr(socket, "SO_PEERCRED"):
        return None
    try:
        credentials = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEER_CREDENTIALS.size)
    except OSError:
        return None
    pid = _PEER_CREDENTIALS.unpack(credentials)[0]
    return pid if pid > 0 else None


async def read_bounded_line(reader: asyncio.StreamReader) -> bytes | object | None:
    """The next line (with its newline), ``OVERSIZED``, or ``None`` at end of stream."""
    try:
        return await reader.readuntil(b"\n")
    except asyncio.IncompleteReadError as exc:
        return exc.partial or None
    except asyncio.LimitOverrunError as exc:
        await reader.readexactly(exc.consumed)
        while True:  # discard up to and including the newline
            try:
                await reader.readuntil(b"\n")
                return OVERSIZED
            except asyncio.LimitOverrunError as more:
                await reader.readexactly(more.consumed)
            except asyncio.IncompleteReadError:
                return OVERSIZED


@dataclass
class ClientConduct:
    """Bad lines of one connection. A client that is mostly garbage gets disconnected."""

    good: int = 0
    bad: Counter = field(default_factory=Counter)
    tolerance: int = 100
    """Bad lines allowed before the ratio is judged at all."""

    def record_good(self) -> None:
        self.good += 1

    def record_bad(self, reason: str) -> None:
        self.bad[reason] += 1

    @property
    def bad_total(self) -> int:
        return sum(self.bad.values())

    def should_disconnect(self) -> bool:
        return self.bad_total > self.tolerance and self.bad_total > self.good
