"""Reading size-bounded lines from one client, and judging whether it misbehaves.

asyncio's ``readuntil`` raises when a line exceeds the stream limit and leaves the
data in the buffer; ``read_bounded_line`` discards the whole oversized line
instead and reports it, so one huge line costs a client that line, not its
connection (and never the hub its memory).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import dataclass, field

from rankwatch._protocol import MAX_LINE_BYTES

OVERSIZED = object()
"""Returned in place of a line that was longer than the bound (already discarded)."""

STREAM_LIMIT = MAX_LINE_BYTES + 1


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
