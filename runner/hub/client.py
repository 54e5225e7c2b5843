"""Subscribing to a runner from another process: ``rankwatch attach``, ``rankwatch stacks``.

``HubClient`` connects to a runner's Unix socket, sends ``subscribe`` and yields the
hub's messages one by one. Every line the hub sends fits ``MAX_LINE_BYTES`` (a
history replay is cut into lines of ``HISTORY_LINE_BYTES``); should one not, it is
skipped and counted (``lines_dropped``), never a crash. The client holds one line
at a time: its memory does not grow with the size of the run (the GUI's link,
``gui/gateway/link.py``, reads the same stream the same way).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from rankwatch import protocol
from runner.hub.lines import OVERSIZED, STREAM_LIMIT, read_bounded_line
from runner.rows import JsonObject
from runner.runstate.messages import HubMessage, decode_hub_message


class HubClient:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.lines_dropped = 0

    @classmethod
    async def subscribe(cls, socket_path: str, history: bool = True, logs: bool = True,
                        records: bool = True, from_store: bool = False) -> HubClient:
        """Connect and subscribe (``records`` False: a history without the metric records and
        samples, for a view that does not chart them; ``from_store``: no history, but where the
        store's ends, for a subscriber that reads it itself).

        Raises:
            OSError: the socket cannot be reached (the runner is gone).
        """
        reader, writer = await asyncio.open_unix_connection(socket_path, limit=STREAM_LIMIT)
        client = cls(reader, writer)
        await client.send(protocol.Subscribe(history=history, logs=logs, records=records, from_store=from_store))
        return client

    async def send(self, message: protocol.Message) -> None:
        self.writer.write(message.encode())
        await self.writer.drain()

    async def hub_messages(self) -> AsyncIterator[HubMessage]:
        """The run's messages, typed (``runner.runstate.messages``), until the hub hangs up; the
        ones that are not a run's (``pong``, ``error``, ``pace``) are left out."""
        async for fields in self.messages():
            message = decode_hub_message(fields)
            if message is not None:
                yield message

    async def messages(self) -> AsyncIterator[JsonObject]:
        """The hub's messages as JSON objects, until it hangs up: what a test or a relay reads raw;
        a view takes :meth:`hub_messages`."""
        while True:
            line = await read_bounded_line(self.reader)
            if line is None:
                return
            if line is OVERSIZED or not isinstance(line, bytes):
                self.lines_dropped += 1
                continue
            try:
                yield protocol.decode(line, protocol.HUB_TYPES)
            except protocol.ProtocolError:
                self.lines_dropped += 1

    def close(self) -> None:
        self.writer.close()
