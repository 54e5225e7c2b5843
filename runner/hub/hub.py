"""The hub: one per run. Receives telemetry, writes the store, publishes to subscribers.

Everything arrives on the runner's event loop: worker and agent connections on the
Unix socket (and, for multi-node jobs, TCP), captured output lines and samples from
the runner itself. Records collect in a pending batch; every ``FLUSH_SECONDS`` the
batch is committed to the store on the hub's single writer thread and only then
published, so a subscriber never sees a record the store does not have, and each
subscriber gets at most one update per flush.

The writer thread is the only thread that touches the writer's SQLite connection;
history replays run on it too, which orders them exactly against commits.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hmac
import json
import logging
import os
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from rankwatch import _protocol as protocol
from runner.hub.lines import OVERSIZED, STREAM_LIMIT, ClientConduct, read_bounded_line
from runner.hub.live_model import LiveModel
from runner.hub.publisher import LocalSubscriber, SocketSubscriber, Subscriber
from runner.state import RankState
from runner.store.store import RecordBatch, RunStore

log = logging.getLogger(__name__)

FLUSH_SECONDS = 0.05
FLUSH_NOW_RECORDS = 50_000
HISTORY_LOG_LINES = 50_000
HISTORY_CHUNK = 20_000
_NUMBER = (int, float)
"""Exact types accepted as numbers (``type(True)`` is ``bool``, so booleans are refused)."""
ACCEPT_SETTLE_SECONDS = 0.1
TCP_FIRST_MESSAGE_SECONDS = 10.0
"""A TCP client must authenticate (agent_hello with the token) within this time."""


class Hub:
    def __init__(self, store_path: Path, token: str):
        self.store_path = Path(store_path)
        self.token = token
        self.run_id: int | None = None
        self.model = LiveModel()
        self.pending = RecordBatch()
        self.subscribers: list[Subscriber] = []
        self.stats: Counter = Counter()
        self.connections: set[asyncio.StreamWriter] = set()
        self._producer_tasks: set[asyncio.Task] = set()
        """Handlers of connections that may still send records (not subscribers)."""
        self.worker_connections = 0
        self.on_stop_requested: Callable[[bool], None] | None = None
        self.on_dump_stacks: Callable[[], None] | None = None
        self.on_hello: Callable[[dict[str, Any]], None] | None = None
        self.on_worker_lost: Callable[[int, float], None] | None = None
        """Called when a worker's connection ends without an exit message (it died from outside)."""
        self.agent_hooks: list[Callable[[str, int | None], None]] = []
        """Called with ("connected", node_rank) after an agent's agent_hello was accepted and
        ("closed", node_rank) when its connection ends (remote nodes, ``runner.remote``)."""
        self._exited_ranks: set[int] = set()
        self.message_hooks: list[Callable[[dict[str, Any]], None]] = []
        """Called with every valid worker/agent message after ingestion (diagnosis hooks)."""
        self.log_hooks: list[Callable[[int | None, float, str, str, str | None], None]] = []
        """Called with (rank, t, stream, line, node) for every captured output line."""
        self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rankwatch-store")
        self._store: RunStore | None = None
        self._servers: list[asyncio.base_events.Server] = []
        self._flush_task: asyncio.Task | None = None
        self._flush_lock = asyncio.Lock()
        self._has_pending = asyncio.Event()
        self._seq = 0
        self._run_changed = False
        self._run_row: dict[str, Any] | None = None
        self._node_rows_changed: list[dict[str, Any]] = []
        self._spec_table: dict[str, Any] = {}
        self._closed = False

    # ---- lifecycle -----------------------------------------------------------------

    async def _on_writer(self, function, *args, **kwargs):
        call = functools.partial(function, *args, **kwargs)
        return await asyncio.get_running_loop().run_in_executor(self._writer, call)

    def _open_store(self) -> None:
        if self._store is None:
            self._store = RunStore(self.store_path)

    async def create_run(self, spec_table: dict[str, Any], **fields: Any) -> int:
        self._spec_table = spec_table

        def create():
            self._open_store()
            return self._store.create_run(**fields)

        self.run_id = await self._on_writer(create)
        self._run_row = await self._on_writer(self._store.run, self.run_id)
        return self.run_id

    async def update_run(self, **fields: Any) -> None:
        await self._on_writer(self._store.update_run, self.run_id, **fields)
        self._run_row = await self._on_writer(self._store.run, self.run_id)
        self._run_changed = True
        self._has_pending.set()

    async def update_node(self, node_rank: int, host: str, state: str, processes: int | None = None,
                          detail: str | None = None) -> None:
        await self._on_writer(self._store.upsert_node, self.run_id, node_rank, host, state, processes, detail)
        self._node_rows_changed.append({"node_rank": node_rank, "host": host, "state": state,
                                        "processes": processes, "changed": time.time(), "detail": detail})
        self._has_pending.set()

    @property
    def run_row(self) -> dict[str, Any] | None:
        return self._run_row

    async def serve_unix(self, path: Path) -> None:
        path.unlink(missing_ok=True)
        old_umask = os.umask(0o177)  # the socket is created 0600, never briefly wider
        try:
            server = await asyncio.start_unix_server(self._handle_client, path=str(path), limit=STREAM_LIMIT)
        finally:
            os.umask(old_umask)
        os.chmod(path, 0o600)
        self._servers.append(server)

    async def serve_tcp(self, host: str, port: int) -> int:
        """Listen on TCP (multi-node only); every client must present the token. Returns the port.

        Only agents may connect over TCP: anything but an ``agent_hello`` with the job's
        token as the first line (a subscriber, a ping, a worker hello) is refused.
        """
        handler = functools.partial(self._handle_client, over_tcp=True)
        server = await asyncio.start_server(handler, host=host, port=port, limit=STREAM_LIMIT)
        self._servers.append(server)
        return server.sockets[0].getsockname()[1]

    def start(self) -> None:
        self._flush_task = asyncio.get_running_loop().create_task(self._flush_forever(), name="hub-flush")

    async def close(self, reason: str = "run ended", drain_seconds: float = 5.0) -> None:
        """Stop listening, read what producers already sent (up to ``drain_seconds``), flush
        everything, say bye to subscribers, close the store."""
        if self._closed:
            return
        self._closed = True
        deadline = time.monotonic() + drain_seconds
        await asyncio.sleep(ACCEPT_SETTLE_SECONDS)  # accept connections already queued by the kernel
        while self._producer_tasks and time.monotonic() < deadline:
            await asyncio.wait(set(self._producer_tasks), timeout=deadline - time.monotonic())
        for server in self._servers:
            server.close()
        if self._flush_task is not None:
            self._flush_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._flush_task
        await self.flush()
        if self.stats:
            self.add_event("hub_stats", None, "hub counters", counters=dict(self.stats))
            await self.flush()
        for subscriber in list(self.subscribers):
            subscriber.send({"type": "bye", "reason": reason})
        await asyncio.sleep(0)
        for writer in list(self.connections):
            with contextlib.suppress(Exception):
                await asyncio.wait_for(writer.drain(), 2.0)
            writer.close()
        for subscriber in list(self.subscribers):
            subscriber.close()
        await self._on_writer(self._close_store)
        self._writer.shutdown(wait=True)

    def _close_store(self) -> None:
        if self._store is not None:
            self._store.close()
            self._store = None

    # ---- ingestion (event loop thread) ---------------------------------------------

    def add_log(self, rank: int | None, stream: str, line: str, t: float, node: str | None = None) -> None:
        self.pending.logs.append((rank, node, stream, t, line))
        self._has_pending.set()
        if rank is not None and rank not in self.model.ranks:
            self.model.row(rank)
        for hook in self.log_hooks:
            hook(rank, t, stream, line, node)

    def add_metric(self, rank: int, step: int | None, t: float, name: str, value: float | None, source: str) -> None:
        self.pending.metrics.append((rank, step, t, name, value, source))
        self.model.on_metric(rank, t, step, name, value, source)

    def add_event(self, kind: str, rank: int | None, message: str, t: float | None = None, **fields: Any) -> None:
        data = {"message": message, **fields}
        self.pending.events.append((t if t is not None else time.time(), kind, rank, json.dumps(data, default=str)))
        self._has_pending.set()

    def add_gpu_samples(self, rows: list[tuple]) -> None:
        self.pending.gpu_samples.extend(rows)
        self._has_pending.set()

    def add_process_samples(self, rows: list[tuple]) -> None:
        self.pending.process_samples.extend(rows)
        self._has_pending.set()

    def mark_changed(self) -> None:
        """Something outside the records changed (a rank's state, a run field): publish soon."""
        self._has_pending.set()

    def _ingest(self, message: dict[str, Any], rank: int | None) -> None:
        kind = message["type"]
        self._has_pending.set()
        if kind == "metrics":
            self._ingest_metrics(message, rank)
        elif kind == "heartbeat":
            self.model.on_heartbeat(rank, _number(message.get("t")) or time.time(),
                                    _integer(message.get("step")), _integer(message.get("dropped")))
        elif kind == "exception":
            fatal = message.get("fatal") is not False  # a dying thread is worth an event, not a failure
            self.add_event("exception" if fatal else "thread_exception", rank,
                           f"{message.get('exc_type')}: {message.get('message')}",
                           t=_number(message.get("t")), exc_type=message.get("exc_type"),
                           exc_message=message.get("message"), traceback=message.get("traceback"),
                           thread=message.get("thread"))
        elif kind == "exit":
            self._exited_ranks.add(rank)
            code = _integer(message.get("code"))
            state = RankState.EXITED if code == 0 else RankState.FAILED
            self.model.on_exit(rank, code, state)
            self.add_event("rank_exited" if code == 0 else "rank_failed", rank,
                           f"rank {rank} exited with code {code}", t=_number(message.get("t")), exit_code=code)
        elif kind == "param_hash":
            self.add_event("param_hash", rank, "parameter fingerprint", t=_number(message.get("t")),
                           step=_integer(message.get("step")), digest=str(message.get("digest")))
        elif kind == "stacks":
            self.add_event("stacks_written", rank, "stack dump written", path=str(message.get("path")))
        elif kind == "log":
            self.add_log(_integer(message.get("rank")), str(message.get("stream", "stdout")),
                         str(message.get("line", "")), _number(message.get("t")) or time.time(),
                         node=message.get("node"))
        elif kind == "worker_lost" and rank is not None and rank not in self._exited_ranks:
            self._worker_lost(rank, _number(message.get("t")) or time.time())
        elif kind == "process_samples":
            self._ingest_process_samples(message.get("rows"))
        for hook in self.message_hooks:
            hook(dict(message, rank=rank) if rank is not None else message)

    def _worker_lost(self, rank: int, t: float) -> None:
        """A worker's connection (to this hub, or to its node's agent) ended without ``exit``."""
        self.add_event("connection_lost", rank, f"rank {rank} disconnected without an exit message", t=t)
        if self.on_worker_lost is not None:
            self.on_worker_lost(rank, t)

    def _ingest_process_samples(self, rows: Any) -> None:
        """CPU and memory of a remote node's ranks, sampled by its agent."""
        if not isinstance(rows, list):
            self.stats["bad_process_samples"] += 1
            return
        good = []
        for row in rows:
            if (isinstance(row, list) and len(row) == 6 and _integer(row[1]) is not None
                    and all(_number(value) is not None for value in row)):
                good.append((_number(row[0]), _integer(row[1]), _integer(row[2]), _number(row[3]),
                             _number(row[4]), _integer(row[5])))
            else:
                self.stats["bad_process_samples"] += 1
        self.add_process_samples(good)
        for _t, rank, _pid, cpu, rss, _threads in good:
            self.model.on_process_sample(rank, cpu, rss)

    def _refuse_tcp(self, writer: asyncio.StreamWriter, why: str) -> None:
        self.stats["refused_tcp"] += 1
        self.add_event("refused", None, f"refused a TCP client: {why}")
        with contextlib.suppress(Exception):
            writer.write(protocol.encode("error", message=why))

    def _ingest_metrics(self, message: dict[str, Any], rank: int | None) -> None:
        """The hot path (100k+ records/s): validate each item cheaply, keep it, and update the
        live model once per batch with each series' newest value."""
        items = message.get("items")
        if rank is None or not isinstance(items, list):
            self.stats["bad_metrics"] += 1
            return
        rows = self.pending.metrics
        newest: dict[str, tuple] = {}
        step_times: list[float] = []
        bad = 0
        for item in items:
            if type(item) is not list or len(item) != 5:
                bad += 1
                continue
            t, step, name, value, source = item
            if type(t) not in _NUMBER or type(name) is not str or type(source) is not str:
                bad += 1
                continue
            if type(value) not in _NUMBER or (value - value) != 0:  # also NaN and +-inf
                value = None
            if step is not None and type(step) not in _NUMBER:
                step = None
            elif type(step) is float:
                step = int(step)
            if len(name) > 128:
                name = name[:128]
            rows.append((rank, step, t, name, value, source[:16]))
            newest[name] = (t, step, value, source)
            if name == protocol.STEP_TIME and value is not None:
                step_times.append(value)
        if bad:
            self.stats["bad_metric_items"] += bad
        self.model.on_metric_batch(rank, newest, step_times)
        if len(self.pending) >= FLUSH_NOW_RECORDS and not self._flush_lock.locked():
            asyncio.get_running_loop().create_task(self.flush())

    # ---- connections -----------------------------------------------------------------

    async def _handle_client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                             over_tcp: bool = False) -> None:
        self.connections.add(writer)
        task = asyncio.current_task()
        self._producer_tasks.add(task)
        conduct = ClientConduct()
        role: str | None = None
        rank: int | None = None
        subscriber: SocketSubscriber | None = None
        try:
            while True:
                if over_tcp and role is None:
                    line = await asyncio.wait_for(read_bounded_line(reader), TCP_FIRST_MESSAGE_SECONDS)
                else:
                    line = await read_bounded_line(reader)
                if line is None:
                    break
                if over_tcp and role is None and _message_type(line) != "agent_hello":
                    self._refuse_tcp(writer, "only agents of this job may connect over TCP")
                    break
                if line is OVERSIZED:
                    conduct.record_bad("oversized")
                    self.stats["bad_line_oversized"] += 1
                    if conduct.should_disconnect():
                        break
                    continue
                try:
                    message = protocol.decode(line)
                except protocol.ProtocolError as error:
                    conduct.record_bad(error.reason)
                    self.stats[f"bad_line_{error.reason}"] += 1
                    if conduct.should_disconnect():
                        break
                    continue
                kind = message["type"]
                if role is None and kind == "ping":
                    writer.write(protocol.encode("pong"))
                    conduct.record_good()
                    continue
                if role is None:
                    role, rank, subscriber = await self._first_message(message, writer)
                    if role is None:
                        conduct.record_bad("not_allowed_first")
                        self.stats["bad_first_message"] += 1
                        if kind in ("hello", "agent_hello"):
                            break  # wrong token: refused
                        if conduct.should_disconnect():
                            break
                        continue
                    conduct.record_good()
                    continue
                if role in ("worker", "agent") and kind in protocol.WORKER_TYPES | protocol.AGENT_TYPES:
                    conduct.record_good()
                    message_rank = rank if role == "worker" else _integer(message.get("rank"))
                    if role == "agent" and kind == "hello":
                        self._on_worker_hello(message)
                        continue
                    self._ingest(message, message_rank)
                elif role == "subscriber" and kind in protocol.SUBSCRIBER_TYPES:
                    conduct.record_good()
                    self._on_control(message, subscriber)
                else:
                    conduct.record_bad("wrong_direction")
                    self.stats["bad_line_wrong_direction"] += 1
                    if conduct.should_disconnect():
                        break
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        except asyncio.TimeoutError:  # over TCP: silent for too long before authenticating
            self._refuse_tcp(writer, "no agent_hello in time")
        finally:
            if conduct.should_disconnect():
                self.stats["clients_disconnected"] += 1
            self._producer_tasks.discard(task)
            if subscriber is not None:
                subscriber.close()
                if subscriber in self.subscribers:
                    self.subscribers.remove(subscriber)
            if role == "worker":
                self.worker_connections -= 1
                if rank not in self._exited_ranks:
                    self._worker_lost(rank, time.time())
            elif role == "agent":
                for hook in self.agent_hooks:
                    hook("closed", rank)
            self.connections.discard(writer)
            writer.close()

    async def _first_message(self, message: dict[str, Any], writer: asyncio.StreamWriter):
        kind = message["type"]
        if kind in ("hello", "agent_hello"):
            if not hmac.compare_digest(str(message.get("token", "")).encode(), self.token.encode()):
                self.stats["refused_bad_token"] += 1
                self.add_event("refused", None, f"refused a {kind} with a wrong or missing token")
                writer.write(protocol.encode("error", message="wrong or missing token"))
                return None, None, None
            if kind == "hello":
                rank = _integer(message.get("rank"))
                if rank is None:
                    return None, None, None
                self.worker_connections += 1
                self._on_worker_hello(message)
                return "worker", rank, None
            self.add_event("agent_connected", None, f"agent of node {message.get('node_rank')} connected",
                           node_rank=message.get("node_rank"), host=message.get("host"))
            if self.on_hello is not None:
                self.on_hello(message)
            node_rank = _integer(message.get("node_rank"))
            for hook in self.agent_hooks:
                hook("connected", node_rank)
            return "agent", node_rank, None  # for an agent, "rank" is its node rank
        if kind == "subscribe":
            self._producer_tasks.discard(asyncio.current_task())  # subscribers stay until bye
            subscriber = SocketSubscriber(writer)
            await self.add_subscriber(subscriber, history=bool(message.get("history", True)))
            return "subscriber", None, subscriber
        return None, None, None

    def _on_worker_hello(self, message: dict[str, Any]) -> None:
        self._has_pending.set()
        row = self.model.on_hello(message)
        self._exited_ranks.discard(row.rank)  # a restarted rank starts afresh
        self.add_event("rank_started", row.rank, f"rank {row.rank} started on {row.host} (pid {row.pid})",
                       host=row.host, pid=row.pid, local_rank=row.local_rank, node_rank=row.node_rank,
                       restart=row.restart)
        if self.on_hello is not None:
            self.on_hello(message)

    def _on_control(self, message: dict[str, Any], subscriber: SocketSubscriber | None) -> None:
        kind = message["type"]
        if kind == "stop" and self.on_stop_requested is not None:
            self.add_event("stop_requested", None, "stop requested by a subscriber", force=bool(message.get("force")))
            self.on_stop_requested(bool(message.get("force")))
        elif kind == "dump_stacks" and self.on_dump_stacks is not None:
            self.on_dump_stacks()
        elif kind == "ping" and subscriber is not None:
            subscriber.send({"type": "pong"})

    # ---- subscribers -------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        return {"type": "snapshot", "run": self._run_row, "ranks": self.model.all_rows(),
                "nodes": [], "spec": self._spec_table}

    async def add_subscriber(self, subscriber: Subscriber, history: bool = True) -> None:
        subscriber.live = False
        self.subscribers.append(subscriber)
        snapshot = self.snapshot()
        if self.run_id is not None:
            snapshot["nodes"] = await self._on_writer(self._store.nodes, self.run_id)
        subscriber.send(snapshot)
        replayed_through = 0  # without a replay, every queued live batch is new to it
        if history and self.run_id is not None:
            replayed_through = await self._replay(subscriber)
            subscriber.send({"type": "history_end"})
        subscriber.go_live(replayed_through)

    def add_local_subscriber(self, callback: Callable[[dict[str, Any]], None]) -> LocalSubscriber:
        subscriber = LocalSubscriber(callback)
        callback(self.snapshot())
        self.subscribers.append(subscriber)
        return subscriber

    async def _replay(self, subscriber: Subscriber) -> int:
        """Send the stored history; returns the last batch sequence number it includes."""
        def read_history():
            store, run_id = self._store, self.run_id
            messages = [{"type": "update", "t": time.time(), "metrics": [[r[0], r[2], r[1], r[3], r[4], r[5]] for r in chunk]}
                        for chunk in store.iter_metrics(run_id, HISTORY_CHUNK)]
            logs = store.logs(run_id, limit=HISTORY_LOG_LINES)
            events = store.events(run_id)
            messages.append({
                "type": "update", "t": time.time(),
                "logs": [[row["rank"], row["t"], row["stream"], row["line"], row["node"]] for row in logs],
                "events": [_event_json(row) for row in events],
                "gpus": [list(r) for r in store.gpu_samples(run_id)],
                "procs": [list(r) for r in store.process_samples(run_id)],
            })
            return self._seq, messages

        through, messages = await self._on_writer(read_history)
        for message in messages:
            subscriber.send(message)
            if isinstance(subscriber, SocketSubscriber):
                with contextlib.suppress(ConnectionError):
                    await subscriber.writer.drain()
        return through

    # ---- flushing ------------------------------------------------------------------------

    async def _flush_forever(self) -> None:
        """Flush as soon as something arrives, then rest ``FLUSH_SECONDS``: fresh data is
        published at once, and no subscriber gets more than ~20 updates a second."""
        while True:
            await self._has_pending.wait()
            self._has_pending.clear()
            try:
                await self.flush()
            except Exception:  # never let one bad batch stop ingestion
                log.exception("hub flush failed")
                self.stats["flush_errors"] += 1
            await asyncio.sleep(FLUSH_SECONDS)

    async def flush(self) -> None:
        async with self._flush_lock:
            batch, self.pending = self.pending, RecordBatch()
            rank_rows = self.model.take_changed()
            nodes, self._node_rows_changed = self._node_rows_changed, []
            run_changed, self._run_changed = self._run_changed, False
            if not batch and not rank_rows and not run_changed and not nodes:
                return
            seq = await self._on_writer(self._commit, batch, rank_rows)
            self._publish(seq, batch, rank_rows, run_changed, nodes)

    def _commit(self, batch: RecordBatch, rank_rows: list[dict[str, Any]]) -> int:
        """Writer thread: one transaction for the batch; rank rows upserted."""
        if batch:
            self._store.write_batch(self.run_id, batch)
        for row in rank_rows:
            self._store.upsert_rank(
                self.run_id, row["rank"], local_rank=row["local_rank"], node_rank=row["node_rank"],
                host=row["host"], pid=row["pid"], world_size=row["world_size"], python=row["python"],
                torch=row["torch"], gpu_index=row["gpu_index"], state=row["state"], exit_code=row["exit_code"],
                last_seen=row["last_seen"])
        self.stats["records_stored"] += len(batch)
        self._seq += 1
        return self._seq

    def _publish(self, seq: int, batch: RecordBatch, rank_rows, run_changed: bool, nodes) -> None:
        if not self.subscribers:
            return
        message = {
            "type": "update", "t": time.time(),
            "metrics": [[m[0], m[2], m[1], m[3], m[4], m[5]] for m in batch.metrics],
            "logs": [[lg[0], lg[3], lg[2], lg[4], lg[1]] for lg in batch.logs],
            "events": [_event_json({"t": e[0], "kind": e[1], "rank": e[2], "data": json.loads(e[3])})
                       for e in batch.events],
            "gpus": [list(g) for g in batch.gpu_samples],
            "procs": [list(p) for p in batch.process_samples],
            "ranks": rank_rows,
            "run": self._run_row if run_changed else None,
            "nodes": nodes,
            "decimated": False,
        }
        for subscriber in list(self.subscribers):
            subscriber.deliver_update(seq, message)
            if subscriber.closed:
                self.subscribers.remove(subscriber)
                self.stats["subscribers_dropped"] += 1


def _message_type(line: bytes | object) -> str | None:
    """The type of a valid message line, else ``None``."""
    if not isinstance(line, bytes):
        return None
    try:
        return protocol.decode(line)["type"]
    except protocol.ProtocolError:
        return None


def _event_json(row: dict[str, Any]) -> dict[str, Any]:
    data = row.get("data") or {}
    return {**data, "kind": row["kind"], "t": row["t"], "rank": row["rank"], "message": data.get("message", "")}


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if value == value and abs(value) != float("inf") else None


def _integer(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return int(value)
