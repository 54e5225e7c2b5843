"""Subscribers of a run, and how each receives batched updates.

The hub commits a batch to the store, then hands every subscriber one ``update``
message for it (so at most one per flush: ~20 per second). A subscriber that falls
behind (its socket buffer grows) gets the metrics of an update thinned: the last
point of every series is always kept, so tables stay exact and charts stay
faithful in shape; the message says ``decimated`` and the store has everything.
A subscriber hopelessly behind is disconnected rather than letting the hub's
memory grow.
"""

from __future__ import annotations

import abc
import asyncio
from collections.abc import Callable
from typing import Any

from rankwatch import _protocol as protocol

DECIMATE_ABOVE_BYTES = 4 << 20
DISCONNECT_ABOVE_BYTES = 256 << 20
DECIMATED_POINTS_PER_SERIES = 8


def decimate_metrics(rows: list[list], keep_per_series: int = DECIMATED_POINTS_PER_SERIES) -> list[list]:
    """Thin ``[[rank, t, step, name, value, source], ...]`` to ~``keep_per_series`` per series,
    always keeping each series' last row."""
    by_series: dict[tuple, list[int]] = {}
    for index, row in enumerate(rows):
        by_series.setdefault((row[0], row[3], row[5]), []).append(index)
    keep: set[int] = set()
    for indices in by_series.values():
        stride = max(1, len(indices) // keep_per_series)
        keep.update(indices[::stride])
        keep.add(indices[-1])
    return [rows[i] for i in sorted(keep)]


class Subscriber(abc.ABC):
    """Base: something that receives hub->subscriber messages as dicts."""

    name = "subscriber"

    def __init__(self) -> None:
        self.live = False
        """False while a history replay is being sent; live updates queue until then."""
        self.queued: list[tuple[int, dict[str, Any]]] = []
        self.closed = False

    def backlog_bytes(self) -> int:
        return 0

    @abc.abstractmethod
    def send(self, message: dict[str, Any]) -> None:
        """Deliver one message now (it has passed queueing and decimation)."""

    def close(self) -> None:
        self.closed = True

    def deliver_update(self, seq: int, message: dict[str, Any]) -> None:
        if self.closed:
            return
        if not self.live:
            self.queued.append((seq, message))
            return
        backlog = self.backlog_bytes()
        if backlog > DISCONNECT_ABOVE_BYTES:
            self.close()
            return
        if backlog > DECIMATE_ABOVE_BYTES and message.get("metrics"):
            message = dict(message, metrics=decimate_metrics(message["metrics"]), decimated=True)
        self.send(message)

    def go_live(self, replayed_through: int) -> None:
        """Send what queued during the replay, skipping batches the replay already held."""
        self.live = True
        queued, self.queued = self.queued, []
        for seq, message in queued:
            if seq > replayed_through:
                self.deliver_update(seq, message)


class LocalSubscriber(Subscriber):
    """An in-process subscriber (the terminal view of ``rankwatch run``)."""

    name = "local"

    def __init__(self, callback: Callable[[dict[str, Any]], None]):
        super().__init__()
        self.callback = callback
        self.live = True

    def send(self, message: dict[str, Any]) -> None:
        self.callback(message)


class SocketSubscriber(Subscriber):
    """A subscriber on the hub's socket (the GUI, ``rankwatch attach``)."""

    name = "socket"

    def __init__(self, writer: asyncio.StreamWriter):
        super().__init__()
        self.writer = writer

    def backlog_bytes(self) -> int:
        transport = self.writer.transport
        return transport.get_write_buffer_size() if transport is not None else 0

    def send(self, message: dict[str, Any]) -> None:
        if self.closed or self.writer.is_closing():
            self.closed = True
            return
        body = dict(message)
        message_type = body.pop("type")
        body.pop("v", None)
        self.writer.write(protocol.encode(message_type, **body))

    def close(self) -> None:
        super().close()
        if not self.writer.is_closing():
            self.writer.close()
