"""Receive every worker's stdout and stderr through pipes of the runner, as lines of its rank.

The runner does not use torchrun's ``--tee``: that writes each worker's output to a
log file in the data directory and tails it, so a full data disk kills the ranks
(ENOSPC on their next ``print``). Instead each worker's bootstrap connects to a
private Unix socket once per stream (``rankwatch._output``) and announces its rank and
stream in a header line; the runner answers with the write end of a fresh pipe
(``SCM_RIGHTS``), which becomes the worker's file descriptor 1 or 2, and reads the
other end. Output thus never touches a disk, and its rank comes from the worker's own
``RANK``, with any torch version.

A process that does not know its rank yet (a self-spawning script's main process and
the processes it starts, ``rankwatch._spawn``) connects *pending*: its header names its
pid, not a rank. Its lines are held until the runner learns whose they are: ``claim``
(the process said ``hello`` as a rank: its lines, held ones included, are that rank's),
a launcher declaration on the socket (its lines are the launcher's, rank ``None``, as
torchrun's own are), the end of its pipe, or ``PENDING_HOLD_SECONDS`` (the held lines
go out as the launcher's: late, never lost).

One ``WorkerOutput`` serves one node's torchrun (the runner's local node, or an
agent's node), or a self-spawning script's processes. Each stream's lines are what a terminal
would show (``runner.launch.output.TerminalLines``): a progress bar rewritten with ``\r`` is its
last state, delivered as it stands while it keeps changing; lines are cut at ``MAX_LINE_CHARS``; a
partial line (``print(..., end="")``) is delivered when it has waited ``PARTIAL_FLUSH_SECONDS``
for its newline, as torchrun's own output is.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import fcntl
import functools
import os
import socket
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import NamedTuple

from rankwatch._output import (
    HEADER_VERSION,
    HEADER_WORD,
    LAUNCHER_STREAM,
    OUTPUT_SOCKET,
    PIPE_ANSWER,
    UNKNOWN,
)
from runner.launch.output import PARTIAL_FLUSH_SECONDS, OutputLine, TerminalLines

HEADER_TIMEOUT_SECONDS = 10.0
STREAM_NAMES = ("stdout", "stderr")
PIPE_BYTES = 256 * 1024
"""Each pipe's buffer (Linux's default is 64 KiB): how far the runner may fall behind a
stream before the worker's writes wait. Modest, because a user's pipe buffers count
against a per-user limit past which every new pipe gets 4 KiB."""
F_SETPIPE_SZ = 1031
PENDING_HOLD_SECONDS = 10.0
"""How long lines of a process whose rank is not known yet wait for it (its hello) before they
go out as the launcher's: a self-spawned rank says hello when it joins its process group or
takes its first step, seconds after its first lines."""
MAX_HELD_LINES = 10_000
"""Held lines of one pending process beyond this go out at once (as the launcher's)."""


class LineAssembler:
    """Bytes of one connection (one rank's one stream) in, complete lines out."""

    def __init__(self, rank: int | None, stream: str, pid: int | None = None):
        self.rank = rank
        """``None`` with ``pending``: not known yet; ``None`` without: the launcher's lines."""
        self.stream = stream
        self.pid = pid
        self.pending = rank is None and pid is not None
        """Whose lines these are is not known yet (``WorkerOutput.claim``)."""
        self.held: list[OutputLine] = []
        """Lines waiting for the process's rank (pending only)."""
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._terminal = TerminalLines()

    def feed(self, data: bytes, now: float) -> list[OutputLine]:
        return self._lines(self._terminal.feed(self._decoder.decode(data), now))

    def flush_stale(self, now: float, older_than: float = PARTIAL_FLUSH_SECONDS) -> list[OutputLine]:
        """Lines still waiting for their newline, as ``TerminalLines.flush_stale`` delivers them."""
        return self._lines(self._terminal.flush_stale(now, older_than))

    def flush_all(self, now: float) -> list[OutputLine]:
        lines = self._terminal.feed(self._decoder.decode(b"", final=True), now)
        return self._lines(lines + self._terminal.flush_all(now))

    def _lines(self, lines: list[tuple[str, float]]) -> list[OutputLine]:
        return [OutputLine(rank=self.rank, stream=self.stream, text=text, t=t) for text, t in lines]


class _PipeReader(asyncio.Protocol):
    """Feeds one pipe's bytes to its assembler as they come; ``closed`` is done at its end."""

    def __init__(self, assembler: LineAssembler, emit: Callable[[list[OutputLine]], None]):
        self.assembler = assembler
        self.emit = emit
        self.transport: asyncio.ReadTransport | None = None
        self.closed = asyncio.get_running_loop().create_future()

    def connection_made(self, transport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.emit(self.assembler.feed(data, time.time()))

    def connection_lost(self, exc) -> None:
        if not self.closed.done():
            self.closed.set_result(None)


def _hand_over_pipe(writer: asyncio.StreamWriter) -> int:
    """Make a pipe, pass its write end to the worker on the socket; returns the read end.

    Raises:
        OSError: no pipe could be made or passed (out of descriptors, the worker hung up).
    """
    read_end, write_end = os.pipe()
    try:
        with contextlib.suppress(OSError):  # best effort: the default buffer works too
            fcntl.fcntl(write_end, F_SETPIPE_SZ, PIPE_BYTES)
        connection = writer.get_extra_info("socket")
        with socket.socket(fileno=os.dup(connection.fileno())) as raw:
            socket.send_fds(raw, [PIPE_ANSWER], [write_end])
    except BaseException:
        os.close(read_end)
        raise
    finally:
        os.close(write_end)
    return read_end


class Header(NamedTuple):
    """A connection's first line: whose output it carries."""

    rank: int | None
    """``None``: not known yet (pending), or a launcher declaration."""
    stream: str
    """``stdout``, ``stderr``, or ``launcher`` (a declaration: no pipe)."""
    pid: int | None


def parse_header(line: bytes) -> Header | None:
    """The header of a connection's first line; ``None`` when it is not one of ours."""
    try:
        word, version, rank, local_rank, stream, pid = line.decode("ascii").split()
        if word != HEADER_WORD or int(version) != HEADER_VERSION:
            return None
        if stream not in (*STREAM_NAMES, LAUNCHER_STREAM) or (stream == LAUNCHER_STREAM and rank != UNKNOWN):
            return None
        if local_rank != UNKNOWN:
            int(local_rank)
        return Header(None if rank == UNKNOWN else int(rank), stream, int(pid))
    except (UnicodeDecodeError, ValueError):
        return None


class WorkerOutput:
    """The output socket of one node's workers.

    ``environment`` goes into torchrun's environment (workers inherit it); ``on_lines``
    gets every line, on the event loop. ``drained`` waits until every worker's pipe
    has ended (every process writing to it has exited); ``close`` delivers what is left,
    ends pipes still open and removes the socket.
    """

    def __init__(self, path: Path, on_lines: Callable[[list[OutputLine]], None]):
        self.path = Path(path)
        self.on_lines = on_lines
        self._server: asyncio.AbstractServer | None = None
        self._assemblers: set[LineAssembler] = set()
        self._claims: dict[int, int] = {}
        """pid -> rank, for processes that said hello as a rank (``claim``)."""
        self._launchers: set[int] = set()
        """pids that declared themselves launchers."""
        self._connections: set[asyncio.Task] = set()
        self._idle = asyncio.Event()
        self._idle.set()
        self._closing: asyncio.Event | None = None
        """Set by ``close``: every connection ends where it stands (made on the loop, in ``start``)."""

    @property
    def environment(self) -> dict[str, str]:
        return {OUTPUT_SOCKET: str(self.path)}

    async def start(self) -> None:
        """Listen (the socket file is 0600 in the private socket folder).

        Raises:
            OSError: the socket cannot be made (its folder is gone, the path is too long).
        """
        self._closing = asyncio.Event()
        self._server = await asyncio.start_unix_server(self._serve, path=str(self.path), limit=1024)
        self.path.chmod(0o600)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """One stream of one worker: the header in, a pipe out, then the pipe read to its end."""
        task = asyncio.current_task()
        assert task is not None  # a server's connection runs in a task
        self._connections.add(task)
        self._idle.clear()
        assembler = pipe = pipe_file = None
        try:
            with contextlib.suppress(asyncio.TimeoutError, ValueError, OSError):
                header = await self._unless_closing(reader.readline(), HEADER_TIMEOUT_SECONDS)
                parsed = parse_header(header) if header is not None else None
                if parsed is None:
                    return
                if parsed.stream == LAUNCHER_STREAM:
                    self.declare_launcher(parsed.pid)
                    return
                pipe_file = os.fdopen(_hand_over_pipe(writer), "rb", buffering=0)
                writer.close()
                assembler = LineAssembler(parsed.rank, parsed.stream, parsed.pid)
                self._assemblers.add(assembler)
                self._settle(assembler)
                pipe = _PipeReader(assembler, functools.partial(self._route, assembler))
                await asyncio.get_running_loop().connect_read_pipe(lambda: pipe, pipe_file)
                await self._unless_closing(pipe.closed)
        finally:
            writer.close()
            if pipe is not None and pipe.transport is not None:
                pipe.transport.close()  # closes the pipe's read end too
            elif pipe_file is not None:
                pipe_file.close()
            if assembler is not None:
                self._assemblers.discard(assembler)
                self._route(assembler, assembler.flush_all(time.time()))
                self._release(assembler)  # the process ended without saying whose they were
            self._connections.discard(task)
            if not self._connections:
                self._idle.set()

    async def _unless_closing(self, awaitable, timeout: float | None = None):
        """``awaitable``'s result, or ``None`` once ``close`` was called (or after ``timeout``).

        A connection ends this way rather than by cancelling its task: asyncio's stream server
        asks a finished connection task for its exception, which for a cancelled one raises
        (and prints a traceback) instead of answering.
        """
        assert self._closing is not None  # started
        work = asyncio.ensure_future(awaitable)
        closing = asyncio.ensure_future(self._closing.wait())
        try:
            done, _ = await asyncio.wait({work, closing}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            closing.cancel()
            if not work.done():
                work.cancel()
        return work.result() if work in done else None

    def _emit(self, lines: list[OutputLine]) -> None:
        if lines:
            self.on_lines(lines)

    def flush_stale(self, now: float) -> None:
        """Deliver partial lines that have waited too long for their newline (progress bars),
        and held lines that have waited too long for their process's rank."""
        for assembler in list(self._assemblers):
            self._route(assembler, assembler.flush_stale(now))
            if assembler.held and now - assembler.held[0].t >= PENDING_HOLD_SECONDS:
                self._release(assembler)

    # ---- pending processes: whose lines are these? ------------------------------------------

    def claim(self, pid: int, rank: int) -> None:
        """Process ``pid`` said hello as ``rank``: its lines (held ones too) are that rank's."""
        self._claims[pid] = rank
        for assembler in list(self._assemblers):
            if assembler.pid == pid:
                self._settle(assembler)

    def declare_launcher(self, pid: int | None) -> None:
        """Process ``pid`` started the ranks: its pending lines are the launcher's."""
        if pid is None:
            return
        self._launchers.add(pid)
        for assembler in list(self._assemblers):
            if assembler.pid == pid:
                self._settle(assembler)

    def _settle(self, assembler: LineAssembler) -> None:
        """Once whose a pending process's lines are is known: say so, and deliver what was held."""
        if not assembler.pending:
            return
        if assembler.pid in self._claims:
            assembler.rank = self._claims[assembler.pid]
        elif assembler.pid not in self._launchers:
            return
        assembler.pending = False
        held, assembler.held = assembler.held, []
        self._emit([replace(line, rank=assembler.rank) for line in held])

    def _route(self, assembler: LineAssembler, lines: list[OutputLine]) -> None:
        """Deliver ``lines``, or hold them while their process's rank is not known."""
        if not assembler.pending:
            self._emit(lines)
            return
        assembler.held.extend(lines)
        if len(assembler.held) > MAX_HELD_LINES:
            self._release(assembler)

    def _release(self, assembler: LineAssembler) -> None:
        """Deliver held lines as the launcher's (their process never said whose they were, yet)."""
        held, assembler.held = assembler.held, []
        self._emit(held)

    async def drained(self) -> None:
        """Return once every pipe handed out has ended (every process writing to it has exited)."""
        await self._idle.wait()

    async def close(self) -> None:
        """Stop listening, end connections still open (a straggler that outlived its rank),
        deliver their last partial lines, and remove the socket."""
        if self._server is not None:
            self._server.close()
        if self._closing is not None:
            self._closing.set()
        await asyncio.gather(*self._connections, return_exceptions=True)
        self.path.unlink(missing_ok=True)
