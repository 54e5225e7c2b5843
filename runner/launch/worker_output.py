"""Receive every worker's stdout and stderr on a private Unix socket, as lines of its rank.

The runner does not use torchrun's ``--tee``: that writes each worker's output to a
log file in the data directory and tails it, so a full data disk kills the ranks
(ENOSPC on their next ``print``). Instead each worker's bootstrap connects here once
per stream (``rankwatch._output``), announces its rank and stream in a header line,
and makes the connection its file descriptor 1 or 2. Output thus never touches a
disk, and its rank comes from the worker's own ``RANK``, with any torch version.

One ``WorkerOutput`` serves one node's torchrun (the runner's local node, or an
agent's node). Lines are cut at ``MAX_LINE_CHARS``; a partial line (a progress bar,
``print(..., end="")``) is delivered when it has waited ``PARTIAL_FLUSH_SECONDS``
for its newline, as torchrun's own output is.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import time
from collections.abc import Callable
from pathlib import Path

from rankwatch._output import HEADER_VERSION, HEADER_WORD, OUTPUT_SOCKET
from runner.launch.output import MAX_LINE_CHARS, PARTIAL_FLUSH_SECONDS, OutputLine

READ_CHUNK = 64 * 1024
HEADER_TIMEOUT_SECONDS = 10.0
STREAM_NAMES = ("stdout", "stderr")


class LineAssembler:
    """Bytes of one connection (one rank's one stream) in, complete lines out."""

    def __init__(self, rank: int, stream: str):
        self.rank = rank
        self.stream = stream
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._partial = ""
        self._started: float | None = None
        """When the partial line's first piece arrived."""

    def feed(self, data: bytes, now: float) -> list[OutputLine]:
        text = self._partial + self._decoder.decode(data)
        *complete, rest = text.split("\n")
        started = self._started if self._started is not None else now
        lines = []
        for piece in complete:
            lines.extend(self._lines(piece, started))
            started = now
        while len(rest) > MAX_LINE_CHARS:  # one line must not hold the hub: the rest follows as further lines
            lines.append(self._line(rest[:MAX_LINE_CHARS], started))
            rest, started = rest[MAX_LINE_CHARS:], now
        self._partial = rest
        self._started = started if rest else None
        return lines

    def flush_stale(self, now: float, older_than: float = PARTIAL_FLUSH_SECONDS) -> list[OutputLine]:
        """The partial line, if it has waited ``older_than`` seconds for its newline."""
        if self._started is None or now - self._started < older_than:
            return []
        return self.flush_all(now)

    def flush_all(self, now: float) -> list[OutputLine]:
        text = self._partial + self._decoder.decode(b"", final=True)
        started = self._started if self._started is not None else now
        self._partial, self._started = "", None
        return [self._line(text, started)] if text else []

    def _lines(self, text: str, t: float) -> list[OutputLine]:
        return [self._line(text[start:start + MAX_LINE_CHARS], t)
                for start in range(0, max(len(text), 1), MAX_LINE_CHARS)]

    def _line(self, text: str, t: float) -> OutputLine:
        return OutputLine(rank=self.rank, stream=self.stream, text=text.rstrip("\r"), t=t)


def parse_header(line: bytes) -> tuple[int, str] | None:
    """``(rank, stream)`` from a connection's first line; ``None`` when it is not one of ours."""
    try:
        word, version, rank, _local_rank, stream = line.decode("ascii").split()
        if word != HEADER_WORD or int(version) != HEADER_VERSION or stream not in STREAM_NAMES:
            return None
        return int(rank), stream
    except (UnicodeDecodeError, ValueError):
        return None


class WorkerOutput:
    """The output socket of one node's workers.

    ``environment`` goes into torchrun's environment (workers inherit it); ``on_lines``
    gets every line, on the event loop. ``drained`` waits until every worker's
    connection has ended; ``close`` delivers what is left and removes the socket.
    """

    def __init__(self, path: Path, on_lines: Callable[[list[OutputLine]], None]):
        self.path = Path(path)
        self.on_lines = on_lines
        self._server: asyncio.AbstractServer | None = None
        self._assemblers: set[LineAssembler] = set()
        self._connections: set[asyncio.Task] = set()
        self._idle = asyncio.Event()
        self._idle.set()

    @property
    def environment(self) -> dict[str, str]:
        return {OUTPUT_SOCKET: str(self.path)}

    async def start(self) -> None:
        """Listen (the socket file is 0600 in the private socket folder).

        Raises:
            OSError: the socket cannot be made (its folder is gone, the path is too long).
        """
        self._server = await asyncio.start_unix_server(self._serve, path=str(self.path), limit=4 * READ_CHUNK)
        self.path.chmod(0o600)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        self._connections.add(task)
        self._idle.clear()
        assembler = None
        try:
            with contextlib.suppress(asyncio.TimeoutError, asyncio.LimitOverrunError, ValueError, OSError):
                parsed = parse_header(await asyncio.wait_for(reader.readline(), HEADER_TIMEOUT_SECONDS))
                if parsed is None:
                    return
                assembler = LineAssembler(*parsed)
                self._assemblers.add(assembler)
                while True:
                    data = await reader.read(READ_CHUNK)
                    if not data:
                        break
                    self._emit(assembler.feed(data, time.time()))
        finally:
            if assembler is not None:
                self._assemblers.discard(assembler)
                self._emit(assembler.flush_all(time.time()))
            writer.close()
            self._connections.discard(task)
            if not self._connections:
                self._idle.set()

    def _emit(self, lines: list[OutputLine]) -> None:
        if lines:
            self.on_lines(lines)

    def flush_stale(self, now: float) -> None:
        """Deliver partial lines that have waited too long for their newline (progress bars)."""
        for assembler in list(self._assemblers):
            self._emit(assembler.flush_stale(now))

    async def drained(self) -> None:
        """Return once no worker holds a connection (every process writing to one has exited)."""
        await self._idle.wait()

    async def close(self) -> None:
        """Stop listening, end connections still open (a straggler that outlived its rank),
        deliver their last partial lines, and remove the socket."""
        if self._server is not None:
            self._server.close()
        for task in list(self._connections):
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(*self._connections, return_exceptions=True)
        self.path.unlink(missing_ok=True)
