"""The agent's stand-in for the hub on its node: workers connect here, as they would
to the runner on a single machine, and every message goes on to the head.

Workers reach the relay on a Unix socket in the user's private 0700 folder and
authenticate with a token of the agent's own (the job's token never leaves the
agent). The relay checks each line (size bound, JSON, a worker message type),
stamps it with the rank the connection said hello as, drops the token from
``hello``, and hands it to ``forward``. A connection that ends without the
worker's ``exit`` becomes a ``worker_lost`` message, as the hub does for a local
worker. Awaiting ``forward`` is the back-pressure: a slow head slows reading here,
and the workers' bounded queues drop (and count) rather than block training.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import os
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from rankwatch import protocol
from runner.hub.line_reader import line_reader_factory
from runner.hub.lines import OVERSIZED, STREAM_LIMIT, peer_pid, read_bounded_line

Forward = Callable[[protocol.Message | dict[str, Any]], Awaitable[None]]
"""Sends a worker's message on to the head: as decoded (its fields), or typed."""


class WorkerRelay:
    def __init__(self, token: str, forward: Forward):
        self.token = token
        self.forward = forward
        self.pids: dict[int, int] = {}
        """rank -> pid of workers connected now (what the agent's process sampler samples)."""
        self.local_ranks: dict[int, int] = {}
        """local rank -> global rank, from the hellos (older torch prefixes lines with local ranks)."""
        self.dropped_lines = 0
        self._connections: set[asyncio.Task] = set()
        self._server: asyncio.base_events.Server | None = None

    async def serve(self, path: Path) -> None:
        """Listen on ``path`` (created 0600, never briefly wider)."""
        path.unlink(missing_ok=True)
        old_umask = os.umask(0o177)
        try:
            loop = asyncio.get_running_loop()  # read to the end even after a failed write (line_reader)
            self._server = await loop.create_unix_server(line_reader_factory(self._handle, STREAM_LIMIT), path=str(path))
        finally:
            os.umask(old_umask)

    @property
    def connections(self) -> int:
        return len(self._connections)

    async def drain(self, timeout: float) -> None:
        """Let connected workers finish sending (they close after ``exit``), up to ``timeout`` s."""
        if self._connections:
            await asyncio.wait(set(self._connections), timeout=timeout)

    def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._connections):
            task.cancel()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        rank: int | None = None
        exited = False
        try:
            rank = await self._accept(reader, writer)
            if rank is None:
                return
            while True:
                line = await read_bounded_line(reader)
                if line is None:
                    break
                message = self._decode(line)
                if message is None:
                    continue
                if message["type"] == protocol.Hello.TYPE:
                    again = protocol.Hello.from_wire(dict(message, rank=rank))
                    self._remember(again, proven=again.pid is not None and peer_pid(writer) == again.pid)
                    message.pop("token", None)
                message["rank"] = rank  # the rank this connection said hello as
                exited = exited or message["type"] == "exit"
                await self.forward(message)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            self._connections.discard(task)
            if rank is not None:
                self.pids = {r: pid for r, pid in self.pids.items() if r != rank}
                if not exited:
                    with contextlib.suppress(Exception):
                        await self.forward(protocol.WorkerLost(rank, time.time()))
            writer.close()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> int | None:
        """The rank of a worker whose first message is a hello with the right token."""
        while True:
            line = await read_bounded_line(reader)
            if line is None:
                return None
            message = self._decode(line)
            if message is None:
                continue
            if message["type"] == protocol.Ping.TYPE:
                writer.write(protocol.Pong().encode())
                continue
            token = str(message.get("token", "")).encode()
            try:
                hello = protocol.Hello.from_wire(message) if message["type"] == protocol.Hello.TYPE else None
            except protocol.ProtocolError:
                hello = None
            if hello is None or not hmac.compare_digest(token, self.token.encode()):
                writer.write(protocol.Error("wrong or missing token").encode())
                with contextlib.suppress(ConnectionError):
                    await writer.drain()
                return None
            self._remember(hello, proven=hello.pid is not None and peer_pid(writer) == hello.pid)
            message.pop("token", None)
            await self.forward(message)
            return hello.rank

    def _remember(self, hello: protocol.Hello, proven: bool) -> None:
        """``proven``: the hello came from the pid it names (``peer_pid``); only such a pid is
        sampled and signalled for its stack as the rank's, never a pid a hello merely names."""
        if proven and hello.pid is not None:
            self.pids = {**self.pids, hello.rank: hello.pid}  # replaced, not changed: the sampler thread reads it
        elif hello.rank in self.pids:
            self.pids = {r: pid for r, pid in self.pids.items() if r != hello.rank}
        if hello.local_rank is not None:
            self.local_ranks[hello.local_rank] = hello.rank

    def _decode(self, line: bytes | object) -> dict[str, Any] | None:
        if line is OVERSIZED or not isinstance(line, bytes):
            self.dropped_lines += 1
            return None
        try:
            message = protocol.decode(line, allowed=protocol.WORKER_TYPES | {"ping"})
        except protocol.ProtocolError:
            self.dropped_lines += 1
            return None
        return message
