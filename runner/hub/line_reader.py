"""A connection's stream that can hand each line to the hub as the bytes arrive.

An asyncio ``StreamReader`` read line by line costs, for every line, a future, a task wake-up
and the stream's bookkeeping: 1,024 Unix connections sending three lines a second took 22.8 us
of loop CPU a line that way, against 12.3 us for a protocol that splits the lines in
``data_received`` (``tests/bench/PERFORMANCE.md``, "Scale, third pass"). At 1,024 ranks that
is most of a record's way from the socket to the store that is neither decoding nor ingest.

``LineReader`` is a ``StreamReader`` (the hub reads a connection's first lines, and a
subscriber's, as before) that, once told to ``push_lines``, hands every later line to a
callback in ``feed_data``, in order, with what ``read_bounded_line`` would have returned: the
line, ``OVERSIZED`` for one longer than the reader's limit (discarded up to its newline), the
last partial line at the end of the stream.

A connection is read to its end even when a write to it fails. The hub answers a worker's
hello with ``pace``; a script that ends quickly (a check that fails, a crash on its first line)
has sent its notices, its exception and its ``exit`` and closed before that answer, which then
fails (EPIPE). asyncio's transport stops reading at a failed write, so the bytes the kernel still
held for the hub were lost and the rank read as "disconnected without an exit message", its
last words gone. ``LineReaderProtocol`` reads what is left before the stream ends.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Iterable
from typing import SupportsIndex

from runner.hub.lines import OVERSIZED

MAX_LEFT_BYTES = 16 << 20
"""At most this much is read from a connection after it failed: more than a Unix socket's
kernel buffer holds (a few hundred KiB), a bound if the peer still writes."""
READ_CHUNK = 1 << 16

LineCallback = Callable[[bytes | object], bool]
"""Takes a line (or ``OVERSIZED``); False to hang up."""


class LineReader(asyncio.StreamReader):
    def __init__(self, limit: int, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(limit=limit, loop=loop)
        self._on_line: LineCallback | None = None
        self._pushed: asyncio.Future[None] | None = None
        self._discarding = False
        """Inside a line longer than the limit: its bytes are dropped up to its newline."""

    @property
    def ended(self) -> bool:
        """The peer's end of the stream was seen (``feed_eof``)."""
        return bool(self._eof)  # type: ignore[attr-defined]

    def push_lines(self, on_line: LineCallback) -> asyncio.Future[None]:
        """From now on hand every line to ``on_line`` as it arrives, those already buffered first.

        Returns a future done when the stream ends (after its last partial line, if any), when
        ``on_line`` returns False, or with the exception the connection ended with, or that
        ``on_line`` raised. Read nothing else from the reader meanwhile.
        """
        self._pushed = self._loop.create_future()  # type: ignore[attr-defined]
        self._pushed.add_done_callback(self._stop_pushing)  # cancelled with its handler: no line after that
        self._on_line = on_line
        self._deliver()
        if self._exception is not None:  # type: ignore[attr-defined]
            self._end(self._exception)  # type: ignore[attr-defined]
        elif self._eof:  # type: ignore[attr-defined]
            self._finish()
        return self._pushed

    # ---- StreamReaderProtocol calls these on the loop ------------------------------------------

    def feed_data(self, data: Iterable[SupportsIndex]) -> None:  # bytes from the transport
        if self._on_line is None:
            super().feed_data(data)
            return
        if data:
            self._buffer.extend(data)  # type: ignore[attr-defined]
            self._deliver()

    def feed_eof(self) -> None:
        super().feed_eof()
        if self._on_line is not None:
            self._finish()

    def set_exception(self, exc: Exception) -> None:
        super().set_exception(exc)
        if self._on_line is not None:
            self._end(exc)

    # ---- delivering --------------------------------------------------------------------------

    def _deliver(self) -> None:
        buffer: bytearray = self._buffer  # type: ignore[attr-defined]
        limit: int = self._limit  # type: ignore[attr-defined]
        start = 0
        while self._on_line is not None:
            end = buffer.find(b"\n", start)
            if end < 0:
                break
            if self._discarding or end - start > limit:
                self._discarding = False
                line: bytes | object = OVERSIZED
            else:
                line = bytes(buffer[start:end + 1])
            start = end + 1
            self._hand(line)
        del buffer[:start]
        if self._on_line is not None and len(buffer) > limit:  # a line already longer than the bound
            buffer.clear()
            self._discarding = True
        self._maybe_resume_transport()  # type: ignore[attr-defined]

    def _finish(self) -> None:
        """The end of the stream: its last partial line (or the oversized one it was in), then done."""
        buffer: bytearray = self._buffer  # type: ignore[attr-defined]
        if self._discarding:
            self._discarding = False
            buffer.clear()
            self._hand(OVERSIZED)
        elif buffer:
            line = bytes(buffer)
            buffer.clear()
            self._hand(line)
        self._end(None)

    def _hand(self, line: bytes | object) -> None:
        on_line = self._on_line
        if on_line is None:
            return
        try:
            keep = on_line(line)
        except Exception as error:  # ends the connection's handler, as it did reading line by line
            self._end(error)
            return
        if not keep:
            self._end(None)

    def _stop_pushing(self, _pushed: asyncio.Future[None]) -> None:
        self._on_line = None

    def _end(self, error: BaseException | None) -> None:
        self._on_line = None
        pushed = self._pushed
        if pushed is not None and not pushed.done():
            if error is None:
                pushed.set_result(None)
            else:
                pushed.set_exception(error)


class LineReaderProtocol(asyncio.StreamReaderProtocol):
    """A ``StreamReaderProtocol`` that reads what the peer sent before a failed write ended the
    connection (see the module), and takes a peer that closed for an end, not an error."""

    def __init__(self, reader: LineReader, handler: Callable[..., object], loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(reader, handler, loop=loop)  # type: ignore[arg-type]
        self._line_reader = reader
        self._fd: int | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        sock = transport.get_extra_info("socket")
        self._fd = sock.fileno() if sock is not None else None
        super().connection_made(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        # asyncio closes the socket after this call, not before: what the kernel holds is readable
        if exc is not None and self._fd is not None and not self._line_reader.ended:
            reached_the_end = read_what_is_left(self._fd, self._line_reader.feed_data)
            if reached_the_end and isinstance(exc, ConnectionError):
                exc = None  # the peer closed after sending all of it: the stream ended
        super().connection_lost(exc)


def read_what_is_left(fd: int, feed: Callable[[bytes], None]) -> bool:
    """Feed what the socket ``fd`` (non-blocking) still holds; True when that reached the peer's end.

    The error a socket holds (ECONNRESET: the peer closed with our answer unread) is reported
    once, and what arrived before it is still there after; a second error ends the reading."""
    left, errors = MAX_LEFT_BYTES, 0
    while left > 0:
        try:
            data = os.read(fd, min(READ_CHUNK, left))
        except BlockingIOError:
            return False  # the peer is still there and sent nothing more
        except OSError:
            errors += 1
            if errors > 1:
                return False
            continue
        if not data:
            return True
        left -= len(data)
        feed(data)
    return False


def line_reader_factory(handler: Callable[[asyncio.StreamReader, asyncio.StreamWriter], object],
                        limit: int) -> Callable[[], asyncio.StreamReaderProtocol]:
    """What ``asyncio.start_unix_server`` and ``start_server`` build for each connection: a
    ``LineReaderProtocol`` with a ``LineReader`` in place of the ``StreamReader``."""
    loop = asyncio.get_running_loop()

    def factory() -> asyncio.StreamReaderProtocol:
        return LineReaderProtocol(LineReader(limit, loop), handler, loop)

    return factory
