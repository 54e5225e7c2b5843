"""The agent's one TCP connection to the head runner.

The agent opens it, introduces itself with ``agent_hello`` and the job's token
(the head refuses anything else), and then only sends: its workers' messages,
torchrun's lines, process samples and finally ``node_exit``. The head sends
nothing back except an ``error`` when it refuses; end of stream means the head is
gone, which is one of the two ways an agent learns that it must stop its workers
(the other is the end of its ssh session).

TCP keepalive is on, with short timers, so a head machine that vanishes without
closing the connection (power loss, a cable) is noticed in well under a minute.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from typing import Any

from rankwatch import protocol
from runner.hub.lines import STREAM_LIMIT, read_bounded_line

KEEPALIVE_IDLE_SECONDS = 15
KEEPALIVE_INTERVAL_SECONDS = 5
KEEPALIVE_PROBES = 4
MAX_BUFFERED_BYTES = 64 << 20
"""Lines posted while the head reads too slowly are dropped beyond this (and counted)."""


class HeadLink:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.reader = reader
        self.writer = writer
        self.closed = False
        self.dropped = 0
        self._drain_lock = asyncio.Lock()

    @classmethod
    async def open(cls, host: str, port: int, hello: protocol.AgentHello, timeout: float) -> HeadLink:
        """Connect and send ``agent_hello`` (token included).

        Raises:
            OSError: the head is not reachable on that address.
            asyncio.TimeoutError: no connection within ``timeout`` seconds.
        """
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port, limit=STREAM_LIMIT), timeout)
        _enable_keepalive(writer.get_extra_info("socket"))
        link = cls(reader, writer)
        await link.send(hello)
        return link

    def post(self, message: protocol.Message | dict[str, Any]) -> None:
        """Queue ``message`` (the agent's own, or a worker's as decoded: its fields, ``type`` included)
        without waiting (for callbacks that cannot await)."""
        if self.closed or self.writer.is_closing():
            self.dropped += 1
            return
        if self.writer.transport.get_write_buffer_size() > MAX_BUFFERED_BYTES:
            self.dropped += 1
            return
        if isinstance(message, protocol.Message):
            self.writer.write(message.encode())
            return
        fields = {k: v for k, v in message.items() if k not in ("type", "v")}
        self.writer.write(protocol.encode(message["type"], **fields))

    async def send(self, message: protocol.Message | dict[str, Any]) -> None:
        """Send ``message`` and wait while the head is slow to read (back-pressure).
        Never raises: once the head is gone, messages are dropped and counted."""
        self.post(message)
        if self.closed:
            return
        async with self._drain_lock:
            try:
                await self.writer.drain()
            except (ConnectionError, OSError):
                self.closed = True

    async def wait_closed_by_head(self) -> str:
        """Return (with the reason) once the head closes the connection or refuses us."""
        reason = await self._read_until_closed()
        self.closed = True
        return reason

    async def _read_until_closed(self) -> str:
        try:
            while True:
                line = await read_bounded_line(self.reader)
                if line is None:
                    return "the connection to the head runner was closed"
                try:
                    message = protocol.decode(line) if isinstance(line, bytes) else None
                except protocol.ProtocolError:
                    continue
                if message is not None and message["type"] == "error":
                    return f"the head runner refused this agent ({message.get('message')})"
        except (ConnectionError, OSError) as error:
            return f"the connection to the head runner was lost ({error.strerror or error})"

    async def close(self, timeout: float = 5.0) -> None:
        """Send what is buffered (up to ``timeout`` seconds), then close."""
        if not self.writer.is_closing():
            with contextlib.suppress(ConnectionError, OSError, asyncio.TimeoutError):
                await asyncio.wait_for(self.writer.drain(), timeout)
            with contextlib.suppress(OSError):
                self.writer.write_eof()
        self.closed = True
        self.writer.close()
        with contextlib.suppress(ConnectionError, OSError, asyncio.TimeoutError):
            await asyncio.wait_for(self.writer.wait_closed(), timeout)


def _enable_keepalive(sock: socket.socket | None) -> None:
    if sock is None:
        return
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if hasattr(socket, "TCP_KEEPIDLE"):  # Linux; elsewhere the system's timers apply
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, KEEPALIVE_IDLE_SECONDS)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, KEEPALIVE_INTERVAL_SECONDS)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, KEEPALIVE_PROBES)
