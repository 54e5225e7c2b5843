"""The hub's connection server: listening, authentication, and each connection's role.

Clients reach the hub on its Unix socket (0600, in the user's private folder) and,
for multi-node runs, on TCP. A connection has no role until its first valid
message gives it one:

* ``hello`` with the run's token: a **worker** (its messages go to ingest, stamped
  with the rank it said hello as);
* ``agent_hello`` with the token: a remote node's **agent** (TCP; it forwards its
  workers' messages, each with its rank);
* ``subscribe``: a **subscriber** (Unix socket only);
* ``ping`` gets ``pong`` and leaves the role open.

Over TCP only an agent may connect: anything but an ``agent_hello`` with the
token, as the first line, is refused (``error``, then the connection is closed).

Limits, so that a client without the token cannot grow the hub's memory or the
store (each is counted in the hub's stats):

* before authentication, over TCP, a line may hold at most ``PREAUTH_LINE_BYTES``;
  the first message must arrive within ``TCP_PREAUTH_SECONDS`` (``PREAUTH_SECONDS``
  on the Unix socket);
* at most ``MAX_PREAUTH_CONNECTIONS`` connections (per listener kind) may wait
  without a role: a new one closes the oldest waiting one (so holding connections
  open cannot lock an agent out, and costs the holder its oldest) -- except one
  that has a line to read (its hello is already there, queued behind the others of
  a burst: 1,024 ranks starting at once on a loaded machine may wait seconds for
  their turn; the pre-auth timeout still bounds them, and the line decides), or one
  younger than ``SILENT_GRACE_SECONDS`` (connected, its hello on the way);
* refusals are events only for the first ``REFUSALS_IN_FULL`` (each with its
  reason); after that they are counted, and one ``refused`` event per
  ``REFUSED_SUMMARY_SECONDS`` (and one at the end) says how many and why;
* a client that sends ``ping`` and never reads the ``pong`` is disconnected once
  ``MAX_UNREAD_BYTES`` are waiting for it;
* a client that is mostly garbage is disconnected (``ClientConduct``).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import functools
import hmac
import itertools
import os
import struct
import termios
import time
from collections import Counter, OrderedDict
from collections.abc import Callable
from pathlib import Path

from rankwatch import protocol
from runner.hub.freshness import WATCHED
from runner.hub.ingest import Ingest
from runner.hub.line_reader import LineReader, line_reader_factory
from runner.hub.lines import OVERSIZED, STREAM_LIMIT, ClientConduct, peer_pid, read_bounded_line
from runner.hub.observer import Observers
from runner.hub.publisher import Publisher, SocketSubscriber

PREAUTH_LINE_BYTES = 16 << 10
"""Over TCP, before authentication: an agent_hello is a few hundred bytes."""
PREAUTH_SECONDS = 60.0
TCP_PREAUTH_SECONDS = 10.0
"""A TCP client must authenticate (agent_hello with the token) within this time."""
MAX_PREAUTH_CONNECTIONS = 64
SILENT_GRACE_SECONDS = 0.25
"""A waiting connection that has sent nothing yet is kept this long beyond the limit: a rank
sends its hello right after connecting, but a busy machine can run the hub in between."""
MAX_UNREAD_BYTES = 256 << 10
"""Pongs (and errors) waiting for a client that does not read them."""
REFUSALS_IN_FULL = 5
REFUSED_SUMMARY_SECONDS = 60.0
WRONG_TOKEN = "wrong or missing token"


class Connection:
    """One client connection and what it turned out to be."""

    __slots__ = ("reader", "writer", "over_tcp", "role", "rank", "subscriber", "conduct", "task", "opened", "heard")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, over_tcp: bool) -> None:
        self.reader = reader
        self.writer = writer
        self.over_tcp = over_tcp
        self.role: str | None = None
        """None until authenticated: "worker", "agent" or "subscriber"."""
        self.rank: int | None = None
        """A worker's rank; an agent's node rank."""
        self.subscriber: SocketSubscriber | None = None
        self.conduct = ClientConduct()
        self.task: asyncio.Task[None] | None = None
        self.opened = time.monotonic()
        self.heard = False
        """Its first line is read and being handled (``wait_for`` hands it over a loop turn
        later): a connection about to get its role, never one holding a place without a word."""

    @property
    def peer(self) -> str:
        if not self.over_tcp:
            return "a local client"
        address = self.writer.get_extra_info("peername")
        return f"{address[0]}:{address[1]}" if isinstance(address, tuple) else "a TCP client"

    def unread_bytes(self) -> int:
        transport = self.writer.transport
        return transport.get_write_buffer_size() if transport is not None else 0


def _has_input(connection: Connection) -> bool:
    """Whether the client sent a line not read yet: in the stream's buffer (a whole line), or
    bytes in the kernel's. A part of a line already read is no hello waiting its turn."""
    buffered = connection.reader._buffer  # type: ignore[attr-defined]
    if buffered:
        return b"\n" in buffered
    sock = connection.writer.get_extra_info("socket")
    if sock is None:
        return False
    try:
        pending = fcntl.ioctl(sock.fileno(), termios.FIONREAD, b"\0\0\0\0")
    except (OSError, ValueError):
        return False
    return bool(struct.unpack("i", pending)[0])


async def _read_first_line(connection: Connection) -> bytes | object | None:
    line = await read_bounded_line(connection.reader)
    connection.heard = True
    return line


class Refusals:
    """Refused clients: counted always, recorded in full only for the first few (see the module)."""

    def __init__(self, stats: Counter[str], record: Callable[..., None]) -> None:
        self.stats = stats
        self._record = record
        self.total = 0
        self._unrecorded: Counter[str] = Counter()
        self._last_summary = time.monotonic()

    def refuse(self, reason: str, peer: str) -> None:
        self.total += 1
        if self.total <= REFUSALS_IN_FULL:
            self._record(f"refused {peer}: {reason}", count=1, reasons={reason: 1})
            return
        self._unrecorded[reason] += 1
        if time.monotonic() - self._last_summary >= REFUSED_SUMMARY_SECONDS:
            self.summarise()

    def summarise(self) -> None:
        """One event for the refusals not recorded yet (none when there are none)."""
        self._last_summary = time.monotonic()
        if not self._unrecorded:
            return
        count = sum(self._unrecorded.values())
        why = ", ".join(f"{reason}: {times}" for reason, times in self._unrecorded.most_common())
        self._record(f"refused {count} more client{'s' if count != 1 else ''} ({why})", count=count,
                     reasons=dict(self._unrecorded))
        self._unrecorded.clear()


class ConnectionServer:
    def __init__(self, token: str, ingest: Ingest, publisher: Publisher, observers: Observers,
                 stats: Counter[str], refusals: Refusals) -> None:
        self.token = token
        self.ingest = ingest
        self.publisher = publisher
        self.observers = observers
        self.stats = stats
        self.refusals = refusals
        self.connections: set[Connection] = set()
        self.worker_connections = 0
        self.worker_latency = WATCHED.worker_latency
        """What a worker is told at its hello (``pace``); the hub keeps it to its freshness."""
        self._waiting: dict[bool, OrderedDict[Connection, None]] = {False: OrderedDict(), True: OrderedDict()}
        """Connections without a role yet, oldest first (Unix: False, TCP: True)."""
        self._evicted: set[Connection] = set()
        self._limit_scheduled = {False: False, True: False}
        self._producers: set[asyncio.Task[None]] = set()
        """Handlers of connections that may still send records (not subscribers)."""
        self._servers: list[asyncio.base_events.Server] = []
        self.proven_pids: dict[int, int] = {}
        """rank -> the pid its hello named, where the kernel says that process connected (``peer_pid``):
        the only pids the runner may signal as that rank (a hello's pid alone is the sender's word)."""

    async def serve_unix(self, path: Path) -> None:
        path.unlink(missing_ok=True)
        old_umask = os.umask(0o177)  # the socket is created 0600, never briefly wider
        try:
            # Same user only (0600): full-size lines from the start (a hello carries the script's argv).
            loop = asyncio.get_running_loop()
            server = await loop.create_unix_server(line_reader_factory(self._handle, STREAM_LIMIT), path=str(path))
        finally:
            os.umask(old_umask)
        os.chmod(path, 0o600)
        self._servers.append(server)

    async def serve_tcp(self, host: str, port: int) -> int:
        """Listen on TCP (multi-node only); only agents with the token are let in. Returns the port."""
        handler = functools.partial(self._handle, over_tcp=True)
        loop = asyncio.get_running_loop()
        server = await loop.create_server(line_reader_factory(handler, PREAUTH_LINE_BYTES), host=host, port=port)
        self._servers.append(server)
        return int(server.sockets[0].getsockname()[1])

    def set_worker_latency(self, seconds: float) -> None:
        """Tell every worker connected here how long it may hold records (``pace``)."""
        self.worker_latency = seconds
        for connection in list(self.connections):
            if connection.role == "worker" and not connection.writer.is_closing():
                self._reply(connection, protocol.Pace(seconds))

    def stop_listening(self) -> None:
        for server in self._servers:
            server.close()

    async def wait_for_producers(self, deadline: float) -> None:
        """Let connections that may still send records finish (up to ``deadline``, monotonic)."""
        while self._producers and time.monotonic() < deadline:
            await asyncio.wait(set(self._producers), timeout=deadline - time.monotonic())

    async def close_all(self, drain_seconds: float = 2.0) -> None:
        for connection in list(self.connections):
            with contextlib.suppress(Exception):
                await asyncio.wait_for(connection.writer.drain(), drain_seconds)
            connection.writer.close()

    # ---- one connection ----------------------------------------------------------------------

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                      over_tcp: bool = False) -> None:
        connection = Connection(reader, writer, over_tcp)
        connection.task = asyncio.current_task()
        self.connections.add(connection)
        if connection.task is not None:
            self._producers.add(connection.task)
        self._wait_for_role(connection)
        try:
            await self._serve(connection)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        except asyncio.TimeoutError:  # silent for too long before authenticating
            self._refuse(connection, "no hello in time" if not over_tcp else "no agent_hello in time")
        except asyncio.CancelledError:  # evicted while waiting for a role, or the hub is closing
            if connection.role is None and connection in self._evicted:
                self.refusals.refuse("held a connection without saying who it is", connection.peer)
        finally:
            self._closed(connection)

    def _wait_for_role(self, connection: Connection) -> None:
        """Count ``connection`` among those waiting for a role; beyond the limit, close the oldest
        that has nothing to say (or has been given its grace), so that holding connections open
        costs the holder, and a rank whose hello waits to be read is never taken for one."""
        self._waiting[connection.over_tcp][connection] = None
        self._limit_waiting(connection.over_tcp)

    def _limit_waiting(self, over_tcp: bool) -> None:
        waiting = self._waiting[over_tcp]
        excess = len(waiting) - MAX_PREAUTH_CONNECTIONS
        if excess <= 0:
            return
        now = time.monotonic()
        for candidate in list(itertools.islice(waiting, 2 * MAX_PREAUTH_CONNECTIONS)):  # oldest first, bounded
            if excess <= 0:
                break
            age = now - candidate.opened
            if age < SILENT_GRACE_SECONDS or candidate.heard or _has_input(candidate):
                continue
            del waiting[candidate]
            excess -= 1
            self.stats["preauth_evicted"] += 1
            self._evicted.add(candidate)
            if candidate.task is not None:
                candidate.task.cancel()
        if excess > 0 and not self._limit_scheduled[over_tcp]:
            # look again once the spared ones had their time, even if no one connects meanwhile
            self._limit_scheduled[over_tcp] = True
            asyncio.get_running_loop().call_later(SILENT_GRACE_SECONDS, self._limit_again, over_tcp)

    def _limit_again(self, over_tcp: bool) -> None:
        self._limit_scheduled[over_tcp] = False
        self._limit_waiting(over_tcp)

    async def _serve(self, connection: Connection) -> None:
        reader = connection.reader
        conduct = connection.conduct
        while True:
            if connection.role is None:
                timeout = TCP_PREAUTH_SECONDS if connection.over_tcp else PREAUTH_SECONDS
                remaining = timeout - (time.monotonic() - connection.opened)
                if remaining <= 0:
                    raise asyncio.TimeoutError
                line = await asyncio.wait_for(_read_first_line(connection), remaining)
            else:
                line = await read_bounded_line(reader)
            connection.heard = False  # handled in this turn: a role now, or waiting again like any other
            if line is None:
                return
            if line is OVERSIZED:
                conduct.record_bad("oversized")
                self.stats["bad_line_oversized"] += 1
                if connection.over_tcp and connection.role is None:
                    self._refuse(connection, "only agents of this run may connect over TCP")
                    return
                if conduct.should_disconnect():
                    return
                continue
            assert isinstance(line, bytes)
            try:
                fields = protocol.decode(line)
            except protocol.ProtocolError as error:
                if connection.over_tcp and connection.role is None:
                    self.stats[f"bad_line_{error.reason}"] += 1
                    self._refuse(connection, "only agents of this run may connect over TCP")
                    return
                conduct.record_bad(error.reason)
                self.stats[f"bad_line_{error.reason}"] += 1
                if conduct.should_disconnect():
                    return
                continue
            if connection.role is None:
                if not await self._first_message(connection, fields):
                    return
                if connection.role in ("worker", "agent") and isinstance(reader, LineReader):
                    # from here on each line is taken as it arrives, not a loop turn later
                    await reader.push_lines(functools.partial(self._take_line, connection))
                    return
                continue
            if not self._take(connection, fields):
                return

    def _take_line(self, connection: Connection, line: bytes | object) -> bool:
        """A line of a worker or an agent (``LineReader.push_lines``), as ``_serve`` takes a line
        after the role is given; False to hang up."""
        conduct = connection.conduct
        if line is OVERSIZED:
            conduct.record_bad("oversized")
            self.stats["bad_line_oversized"] += 1
            return not conduct.should_disconnect()
        assert isinstance(line, bytes)
        try:
            fields = protocol.decode(line)
        except protocol.ProtocolError as error:
            conduct.record_bad(error.reason)
            self.stats[f"bad_line_{error.reason}"] += 1
            return not conduct.should_disconnect()
        return self._take(connection, fields)

    async def _first_message(self, connection: Connection, fields: dict[str, object]) -> bool:
        """Give the connection its role; False to hang up."""
        kind = fields["type"]
        if connection.over_tcp and kind != protocol.AgentHello.TYPE:
            self._refuse(connection, "only agents of this run may connect over TCP")
            return False
        if kind == protocol.Ping.TYPE:
            connection.conduct.record_good()
            return self._reply(connection, protocol.Pong())
        if kind in (protocol.Hello.TYPE, protocol.AgentHello.TYPE):
            if not hmac.compare_digest(str(fields.get("token", "")).encode(), self.token.encode()):
                self.stats["refused_bad_token"] += 1
                connection.conduct.record_bad("not_allowed_first")
                self.stats["bad_first_message"] += 1
                self._refuse(connection, WRONG_TOKEN, what=str(kind))
                return False
            try:
                message = protocol.message_from_wire(fields)
            except protocol.ProtocolError as error:
                connection.conduct.record_bad(error.reason)
                self.stats["bad_first_message"] += 1
                return False
            self._got_role(connection)
            connection.conduct.record_good()
            if isinstance(message, protocol.Hello):
                connection.role, connection.rank = "worker", message.rank
                self.worker_connections += 1
                self._prove_pid(connection, message)
                self.ingest.hello(message)
                self._reply(connection, protocol.Pace(self.worker_latency))
            elif isinstance(message, protocol.AgentHello):
                connection.role, connection.rank = "agent", message.node_rank
                self.ingest.add_event(protocol.EventKind.AGENT_CONNECTED, None,
                                      f"agent of node {message.node_rank} connected",
                                      node_rank=message.node_rank, host=message.host)
                self.observers.on_agent_connected(message)
            return True
        if kind == protocol.Subscribe.TYPE:
            subscribe = protocol.Subscribe.from_wire(dict(fields))
            self._got_role(connection)
            connection.conduct.record_good()
            connection.role = "subscriber"
            if connection.task is not None:
                self._producers.discard(connection.task)  # subscribers stay until bye
            connection.subscriber = SocketSubscriber(connection.writer)
            await self.publisher.add(connection.subscriber, history=subscribe.history, records=subscribe.records,
                                     from_store=subscribe.from_store)
            return True
        connection.conduct.record_bad("not_allowed_first")
        self.stats["bad_first_message"] += 1
        return not connection.conduct.should_disconnect()

    def proven_pid(self, rank: int) -> int | None:
        """The pid ``rank``'s worker proved is its own (see ``proven_pids``); None: none proven."""
        return self.proven_pids.get(rank)

    def _prove_pid(self, connection: Connection, hello: protocol.Hello) -> None:
        connected = peer_pid(connection.writer)
        if hello.pid is not None and connected == hello.pid:
            self.proven_pids[hello.rank] = hello.pid
        else:
            self.proven_pids.pop(hello.rank, None)
            if hello.pid is not None:
                self.stats["hello_pid_unproven"] += 1

    def _got_role(self, connection: Connection) -> None:
        self._waiting[connection.over_tcp].pop(connection, None)
        connection.reader._limit = STREAM_LIMIT  # type: ignore[attr-defined]  # authenticated: full-size lines

    def _take(self, connection: Connection, fields: dict[str, object]) -> bool:
        """A message on a connection that has a role; False to hang up."""
        kind = fields["type"]
        conduct = connection.conduct
        role = connection.role
        if role in ("worker", "agent") and (kind in protocol.WORKER_TYPES or kind in protocol.AGENT_TYPES):
            try:
                if kind == protocol.Metrics.TYPE:
                    # a worker's batches are its own rank's whatever they claim; an agent's carry theirs
                    message: protocol.Message = protocol.Metrics.from_wire(
                        fields, connection.rank if role == "worker" else None)
                else:
                    if role == "worker":
                        fields["rank"] = connection.rank
                    message = protocol.message_from_wire(fields)
            except protocol.ProtocolError as error:
                conduct.record_bad(error.reason)
                self.stats[f"bad_{kind}"] += 1
                return not conduct.should_disconnect()
            conduct.record_good()
            if isinstance(message, protocol.Hello):  # a worker's hello forwarded by its agent
                self.ingest.hello(message)
            else:
                self.ingest.message(message)
            return True
        if role == "subscriber" and kind in protocol.SUBSCRIBER_TYPES:
            conduct.record_good()
            if kind == protocol.StopRequest.TYPE:
                force = bool(fields.get("force"))
                self.ingest.add_event(protocol.EventKind.STOP_REQUESTED, None, "stop requested by a subscriber",
                                      force=force)
                self.observers.on_stop_requested(force)
            elif kind == protocol.DumpStacks.TYPE:
                self.observers.on_dump_stacks()
            elif kind == protocol.Ping.TYPE and connection.subscriber is not None:
                connection.subscriber.send({"type": protocol.Pong.TYPE})
            return True
        if kind == protocol.Ping.TYPE:
            conduct.record_good()
            return self._reply(connection, protocol.Pong())
        conduct.record_bad("wrong_direction")
        self.stats["bad_line_wrong_direction"] += 1
        return not conduct.should_disconnect()

    def _reply(self, connection: Connection, message: protocol.Message) -> bool:
        """Answer, unless the client has left too much unread; False to hang up."""
        if connection.unread_bytes() > MAX_UNREAD_BYTES:
            self.stats["clients_not_reading"] += 1
            return False
        connection.writer.write(message.encode())
        return True

    def _refuse(self, connection: Connection, why: str, what: str | None = None) -> None:
        if connection.over_tcp:
            self.stats["refused_tcp"] += 1
        article = "an" if what and what[0] in "aeiou" else "a"
        self.refusals.refuse(f"{article} {what} with a {why}" if what else why, connection.peer)
        with contextlib.suppress(Exception):
            connection.writer.write(protocol.Error(why).encode())

    def _closed(self, connection: Connection) -> None:
        self._evicted.discard(connection)
        if connection.conduct.should_disconnect():
            self.stats["clients_disconnected"] += 1
        self._waiting[connection.over_tcp].pop(connection, None)
        if connection.task is not None:
            self._producers.discard(connection.task)
        if connection.subscriber is not None:
            self.publisher.remove(connection.subscriber)
        if connection.role == "worker" and connection.rank is not None:
            self.worker_connections -= 1
            self.ingest.worker_lost(connection.rank, time.time())
        elif connection.role == "agent":
            self.observers.on_agent_closed(connection.rank)
        self.connections.discard(connection)
        if connection.unread_bytes() > MAX_UNREAD_BYTES and connection.writer.transport is not None:
            connection.writer.transport.abort()  # it does not read: close() would keep its backlog forever
        else:
            connection.writer.close()
