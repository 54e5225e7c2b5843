"""The publisher: what subscribers (the GUI, ``rankwatch attach``, the terminal view) receive.

A subscriber gets a ``snapshot`` (the run, its ranks and nodes now), then, when it
asked for history, the stored history as a series of ``update`` lines and
``history_end``, then live updates: the hub commits a batch to the store, then
hands every subscriber one ``update`` for it (so at most one per flush, ~20 a
second). A record is in the store before any subscriber sees it.

History is bounded: a replay sends a window of the run whose size does not grow with
the run (``runner.store.replay_window``: the most recent rows of each table, the recent
metrics in full, older ones thinned per series with each series' exact last record), or
every record when the run fits the window. Updates of thinned points say ``decimated``;
``history_end`` then says ``decimated`` and what it left out (``left_out``, rows per
table). A replay of every record of a big run took longer than the live updates queued
behind it could wait (1,024 ranks: dropped before ``history_end``).

History is streamed, not loaded: the writer thread fixes which rows a replay covers (the
rows committed when it began, so replay and live never overlap or leave a gap), then a
reader thread of its own plans the window over them and reads them a few thousand rows at
a time beside the commits (``runner.hub.store_reader``: behind them, each read waited
~0.3 s at 1,024 ranks), each chunk goes out as lines of at most ``HISTORY_LINE_BYTES``,
and the next chunk is read only once the subscriber's socket has taken the last
(``drain``: back-pressure). The hub holds one chunk per replaying subscriber, whatever the
size of the run.

Memory policy for subscribers that read slowly or never. What a subscriber has not
read sits in the hub's memory, and one budget counts all of it (``held_bytes``): the live
updates queued while its history replay goes on, what its socket's transport still
buffers, and the replay chunk in flight. A subscriber's queue keeps the encoded lines
only (not the records as Python objects, five times their size), so the bytes counted
are the bytes held.

* above ``DECIMATE_ABOVE_BYTES`` held, a live subscriber gets the metrics of an update
  thinned (the last point of every series always kept: tables stay exact, charts keep
  their shape); the update says ``decimated``; the store has them all;
* above ``DISCONNECT_ABOVE_BYTES`` held, live or still loading its history, it is
  disconnected; except a subscriber still loading its history that took a replay line in the
  last ``CATCH_UP_READ_SECONDS`` (reading, only slower than the run writes): its queued live
  updates are let go, and after the replay it is caught up from the store (the rows committed
  meanwhile: of metrics, GPU and process samples each series' newest record, logs and events
  bounded as in any replay; then every rank, node and the run as they are now), at most ``CATCH_UP_ROUNDS`` times.
  A catch-up costs what those seconds hold, not what the run does: sent as a replay of its own,
  a range past the budget read each series whole (seconds at 1,024 ranks), more live updates
  queued meanwhile than the GUI could take, and the catch-ups never ended;
* a replay waits for the subscriber to read (``drain``), but not forever: one that takes
  no byte for ``REPLAY_STALL_SECONDS`` (stopped with Ctrl-Z, a hung GUI) is disconnected.
  A slow reader keeps its place: any byte taken counts as progress;
* when all subscribers together hold more than ``TOTAL_BACKLOG_BYTES``, the ones
  holding the most are disconnected until they do not.

A disconnected subscriber is counted (``stats["subscribers_dropped"]`` and
``stats["subscribers_dropped_<reason>"]``) and told to ``Publisher.on_subscriber_dropped``
(the hub records a ``warning`` event that names it, why, and how much it held). The run
goes on, and the store keeps every record (``runs show`` and export read it all).
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import fcntl
import json
import struct
import termios
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any, ClassVar

from rankwatch import protocol
from rankwatch.protocol import Event, Update
from runner.hub.lines import peer_pid
from runner.hub.live_model import LiveModel
from runner.hub.store_reader import StoreReader
from runner.hub.writer import StoreWriter
from runner.store import replay_window
from runner.store.replay_window import MetricWindow, ReplayBudget, SeriesSpan
from runner.store.store import RECORD_CLASSES, RecordBatch, RunStore

DECIMATE_ABOVE_BYTES = 4 << 20
DISCONNECT_ABOVE_BYTES = 16 << 20
TOTAL_BACKLOG_BYTES = 64 << 20
REPLAY_STALL_SECONDS = 30.0
"""A replay drops a subscriber that took no byte of it for this long: long enough for a GUI
busy drawing, short of a terminal left stopped (Ctrl-Z)."""
READ_PROGRESS_POLL_SECONDS = 0.25
"""How often a waiting replay looks whether its subscriber took anything."""
DECIMATED_POINTS_PER_SERIES = 8
CATCH_UP_READ_SECONDS = 2.0
"""A replaying subscriber that took a replay line this recently is reading: when the live updates
queued behind its replay pass the budget, they are let go and caught up from the store instead
of dropping it."""
CATCH_UP_ROUNDS = 3
"""Catch-up replays at most, before a subscriber whose queue keeps overflowing is dropped."""
HISTORY_ROWS_PER_READ = 5_000
LINE_BYTES = protocol.HISTORY_LINE_BYTES
"""Every update line (replay and live) is cut to about this size."""
RECORDS_PER_LINE = 3_000
"""Metric records (or samples) per update line: ~60-100 bytes each."""

Message = dict[str, Any]


def decimate_metrics(rows: list[Any], keep_per_series: int = DECIMATED_POINTS_PER_SERIES) -> list[Any]:
    """Thin ``[[rank, t, step, name, value, source], ...]`` to ~``keep_per_series`` per series,
    always keeping each series' last row."""
    by_series: dict[tuple[Any, ...], list[int]] = {}
    for index, row in enumerate(rows):
        by_series.setdefault((row[0], row[3], row[5]), []).append(index)
    keep: set[int] = set()
    for indices in by_series.values():
        stride = max(1, len(indices) // keep_per_series)
        keep.update(indices[::stride])
        keep.add(indices[-1])
    return [rows[index] for index in sorted(keep)]


class DropReason(str, Enum):
    """Why the hub disconnected a subscriber (``stats["subscribers_dropped_<value>"]``)."""

    BEHIND = "behind"
    """More than ``DISCONNECT_ABOVE_BYTES`` waited for it (live, or queued while it loaded the history)."""
    STALLED_REPLAY = "stalled_replay"
    """It took no byte of its history replay for ``REPLAY_STALL_SECONDS``."""
    OVER_TOTAL = "over_total"
    """It held the most when all subscribers together held more than ``TOTAL_BACKLOG_BYTES``."""
    SLOWER_THAN_RUN = "slower_than_run"
    """It kept reading its history, but more slowly than the run wrote: still behind after
    ``CATCH_UP_ROUNDS`` catch-ups from the store."""


@dataclass(frozen=True)
class DroppedSubscriber:
    """A subscriber the hub disconnected, as the run's ``warning`` event tells it."""

    reason: DropReason
    held_bytes: int
    """What the hub held for it when it was dropped (all of it freed then)."""
    loading_history: bool
    pid: int | None
    """The subscriber's process (``SO_PEERCRED``); None when not known."""

    def message(self) -> str:
        """What happened, why, and what to do: the text of the run's ``warning`` event."""
        who = f"a subscriber (pid {self.pid})" if self.pid is not None else "a subscriber"
        held = f"{self.held_bytes / (1 << 20):.1f} MiB"
        if self.reason is DropReason.STALLED_REPLAY:
            why = f"read nothing of the run's history for {REPLAY_STALL_SECONDS:.0f} s ({held} waited for it)"
        elif self.reason is DropReason.SLOWER_THAN_RUN:
            why = (f"read the run's history more slowly than the run wrote it: still behind after "
                   f"{CATCH_UP_ROUNDS} catch-ups from the store ({held} waited for it)")
        elif self.reason is DropReason.OVER_TOTAL:
            why = (f"was the furthest behind ({held} unread) when all subscribers together held more than "
                   f"{TOTAL_BACKLOG_BYTES >> 20} MiB")
        else:
            what = ("stopped reading while it loaded the run's history" if self.loading_history
                    else "read too slowly to keep up with the run")
            why = f"{what}: {held} waited for it, more than the {DISCONNECT_ABOVE_BYTES >> 20} MiB held for one"
        return (f"disconnected {who}, which {why}. The run goes on and its store has every record: "
                f"attach again to watch it")

    def fields(self) -> dict[str, Any]:
        return {"reason": self.reason.value, "held_bytes": self.held_bytes,
                "loading_history": self.loading_history, "pid": self.pid}


@dataclass(frozen=True)
class QueuedUpdate:
    """A live update held while the subscriber's history replay goes on."""

    seq: int
    message: Message | None
    """None for a subscriber that keeps only the encoded ``lines`` (a socket)."""
    lines: list[bytes] | None
    size: int
    """Bytes counted against the subscriber's budget."""


class Subscriber(abc.ABC):
    """Base: something that receives hub->subscriber messages as dicts."""

    name = "subscriber"
    watches_live = True
    """Shows records as they come (the GUI, attach): while one does, the run is kept fresh
    (``runner.hub.freshness``)."""
    keeps_messages_queued: ClassVar[bool] = True
    """False: while queued, an update with its encoded lines keeps only those (a socket sends
    nothing else, and lines are a fifth of the records' size as Python objects)."""

    def __init__(self) -> None:
        self.live = False
        """False while a history replay is being sent; live updates queue until then."""
        self.history_through = 0
        """The last committed batch its history held (``go_live``): a live update of that batch or
        an earlier one is not sent again. The hub notes a commit on the writer's thread before the
        event loop publishes it, so a subscriber can go live between the two and still be handed
        that batch: a chart would draw its points twice."""
        self.queued: list[QueuedUpdate] = []
        self.queued_bytes = 0
        self.replay_bytes = 0
        """The replay chunk in flight: read from the store, not yet handed to ``send_lines``."""
        self.read_progress_at: float | None = None
        """When it last took a replay line (``time.monotonic``); None: not yet."""
        self.replay_waits_on_it = False
        """Its replay waits for it to take what was sent (``wait_until_read``); False while the
        hub plans or reads the store: then it holds nothing up."""
        self.missed_live = False
        """Live updates queued during its replay were let go (``Publisher._catch_up``): the store has them."""
        self.closed = False
        self.dropped: DroppedSubscriber | None = None
        """Why the hub disconnected it (``abandon``); None while connected or when it left by itself."""

    def backlog_bytes(self) -> int:
        """What was sent and not yet taken by the subscriber (a socket's transport buffer)."""
        return 0

    def held_bytes(self) -> int:
        """Everything the hub holds for this subscriber: its budget is counted on this."""
        return self.queued_bytes + self.backlog_bytes() + self.replay_bytes

    @abc.abstractmethod
    def send(self, message: Message) -> None:
        """Deliver one message now (it has passed queueing and decimation)."""

    def send_lines(self, message: Message | None, lines: list[bytes]) -> None:
        """Deliver ``message``, already encoded as ``lines`` (for a socket: written as they are).

        Raises:
            TypeError: ``message`` is None for a subscriber that needs it (``keeps_messages_queued``).
        """
        if message is None:
            raise TypeError(f"{type(self).__name__} delivers messages, not lines: queue its updates whole")
        self.send(message)

    async def wait_until_read(self, stall_seconds: float) -> bool:
        """Wait until what was sent has left this process (back-pressure for replays); False when
        the subscriber took nothing of it for ``stall_seconds`` (it is stalled)."""
        return True

    def close(self) -> None:
        self.closed = True

    def abandon(self, reason: DropReason) -> None:
        """Disconnect at once, dropping what it has not read (it is hopelessly behind), and say why."""
        if self.dropped is None and not self.closed:
            self.dropped = DroppedSubscriber(reason, self.held_bytes(), not self.live, self.peer_pid())
        self.queued, self.queued_bytes, self.replay_bytes = [], 0, 0
        self._disconnect_now()

    def peer_pid(self) -> int | None:
        return None

    def _disconnect_now(self) -> None:
        self.close()

    def deliver_update(self, seq: int, message: Message, lines: list[bytes] | None = None) -> None:
        """Send a live update (``lines``: the same, encoded once for every subscriber), or queue it
        while a replay is going on; thinned or refused when this subscriber is far behind."""
        if self.closed:
            return
        if self.live and seq <= self.history_through:
            return
        if not self.live:
            size = sum(map(len, lines)) if lines is not None else len(json.dumps(message, separators=(",", ":")))
            kept = message if self.keeps_messages_queued or lines is None else None
            self.queued.append(QueuedUpdate(seq, kept, lines, size))
            self.queued_bytes += size
            if self.held_bytes() > DISCONNECT_ABOVE_BYTES:
                if self.is_reading():
                    self.let_queue_go()
                else:
                    self.abandon(DropReason.BEHIND)
            return
        self._send_live(message, lines)

    def _send_live(self, message: Message | None, lines: list[bytes] | None) -> None:
        held = self.held_bytes()
        if held > DISCONNECT_ABOVE_BYTES:
            self.abandon(DropReason.BEHIND)
        elif message is not None and held > DECIMATE_ABOVE_BYTES and message.get("metrics"):
            self.send(dict(message, metrics=decimate_metrics(message["metrics"]), decimated=True))
        elif lines is not None:
            self.send_lines(message, lines)
        elif message is not None:
            self.send(message)

    def is_reading(self) -> bool:
        """Whether it keeps up with its replay: it took everything sent and the hub is reading the
        store, or it took a replay line in the last ``CATCH_UP_READ_SECONDS`` (it is not stalled).

        A subscriber waiting for the hub is no slow reader: at 1,024 ranks on a busy machine,
        the hub took seconds to plan and read a replay, the live updates queued meanwhile passed
        the budget, and the GUI was dropped for having "stopped reading" when it had nothing to
        read (its link subscribed again, and the history started over)."""
        if not self.replay_waits_on_it:
            return True
        return (self.read_progress_at is not None
                and time.monotonic() - self.read_progress_at < CATCH_UP_READ_SECONDS)

    def let_queue_go(self) -> None:
        """Free the live updates queued behind the replay (a reader whose replay outlasts the budget:
        at 1,024 ranks 16 MiB of them queue in ~5 s); the publisher catches up from the store."""
        self.queued, self.queued_bytes = [], 0
        self.missed_live = True

    def go_live(self, replayed_through: int) -> None:
        """Send what queued during the replay, skipping batches the replay already held."""
        self.live = True
        self.history_through = replayed_through
        queued, self.queued = self.queued, []
        for update in queued:
            self.queued_bytes -= update.size
            if update.seq > replayed_through and not self.closed:
                self._send_live(update.message, update.lines)
        self.queued_bytes = 0


class LocalSubscriber(Subscriber):
    """An in-process subscriber (the terminal view of ``rankwatch run``)."""

    name = "local"

    def __init__(self, callback: Callable[[Message], None], watches_live: bool = True):
        super().__init__()
        self.callback = callback
        self.live = True
        self.watches_live = watches_live

    def send(self, message: Message) -> None:
        self.callback(message)


class SocketSubscriber(Subscriber):
    """A subscriber on the hub's socket (the GUI, ``rankwatch attach``)."""

    name = "socket"
    keeps_messages_queued = False

    def __init__(self, writer: asyncio.StreamWriter):
        super().__init__()
        self.writer = writer
        self._pid = peer_pid(writer)

    def backlog_bytes(self) -> int:
        transport = self.writer.transport
        return transport.get_write_buffer_size() if transport is not None else 0

    def peer_pid(self) -> int | None:
        return self._pid

    def send(self, message: Message) -> None:
        if self.closed or self.writer.is_closing():
            self.closed = True
            return
        body = dict(message)
        message_type = body.pop("type")
        body.pop("v", None)
        self.writer.write(protocol.encode(message_type, **body))

    def send_lines(self, message: Message | None, lines: list[bytes]) -> None:
        if self.closed or self.writer.is_closing():
            self.closed = True
            return
        self.writer.writelines(lines)

    async def wait_until_read(self, stall_seconds: float) -> bool:
        """``drain``, watching what the subscriber has not read: anything it takes is progress, so
        a slow reader waits as long as it needs; one that takes nothing is stalled."""
        drained = asyncio.ensure_future(self._drain())
        unread = self._unread_bytes()
        last_progress = time.monotonic()
        try:
            while True:
                done, _ = await asyncio.wait({drained}, timeout=READ_PROGRESS_POLL_SECONDS)
                if done:
                    return True
                now, still_unread = time.monotonic(), self._unread_bytes()
                if still_unread < unread:
                    last_progress = now
                unread = still_unread
                if now - last_progress >= stall_seconds:
                    return False
        finally:
            drained.cancel()

    def _unread_bytes(self) -> int:
        """The transport's buffer and the kernel's send queue (``TIOCOUTQ``). The queue falls as
        the subscriber reads; the transport's buffer moves only when the kernel has room for a
        good part of its queue again (a slow reader would look stalled for seconds at a time)."""
        in_kernel = 0
        sock = self.writer.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError, ValueError):
                in_kernel = struct.unpack("i", fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, b"\0\0\0\0"))[0]
        return self.backlog_bytes() + in_kernel

    async def _drain(self) -> None:
        with contextlib.suppress(ConnectionError, RuntimeError):
            await self.writer.drain()

    def close(self) -> None:
        super().close()
        if not self.writer.is_closing():
            self.writer.close()

    def _disconnect_now(self) -> None:
        Subscriber.close(self)
        transport = self.writer.transport
        if transport is not None:
            transport.abort()  # close() would keep the unread backlog until it was read: never


# ---- cutting updates into lines of bounded size --------------------------------------------------


def _size_of_log(line: Sequence[Any]) -> int:
    text = line[3]
    # JSON doubles a quote or backslash, and writes a control or non-ASCII character as \uXXXX
    factor = 2 if text.isascii() and text.isprintable() else 6
    return 48 + factor * len(text) + len(line[4] or "")


def _size_of_event(event: Event) -> int:
    return 64 + len(event.message) + len(event.data_json())


def cut_by_size(rows: Sequence[Any], size_of: Callable[[Any], int], limit: int = LINE_BYTES) -> Iterator[list[Any]]:
    """``rows`` in consecutive groups of about ``limit`` bytes each (at least one row per group)."""
    group: list[Any] = []
    size = 0
    for row in rows:
        row_size = size_of(row)
        if group and size + row_size > limit:
            yield group
            group, size = [], 0
        group.append(row)
        size += row_size
    if group:
        yield group


def _in_runs(rows: list[Any], count: int) -> Iterator[list[Any]]:
    for start in range(0, len(rows), count):
        yield rows[start:start + count]


def update_lines(t: float, batch: RecordBatch) -> Iterator[Update]:
    """A batch of records as updates of about ``LINE_BYTES`` each (``encode_update`` makes sure)."""
    for metrics in _in_runs(batch.metrics, RECORDS_PER_LINE):
        yield Update(t, metrics=metrics)
    for logs in cut_by_size(batch.logs, _size_of_log):
        yield Update(t, logs=logs)
    for events in cut_by_size(batch.events, _size_of_event):
        yield Update(t, events=events)
    for gpus in _in_runs(batch.gpu_samples, RECORDS_PER_LINE):
        yield Update(t, gpus=gpus)
    for procs in _in_runs(batch.process_samples, RECORDS_PER_LINE):
        yield Update(t, procs=procs)


def update_message(update: Update) -> Message:
    return {"type": Update.TYPE, **update.to_wire()}


SPLIT_TABLES = ("metrics", "logs", "events", "gpus", "procs", "ranks", "nodes")
"""An update's lists, any of which a line too long is cut along."""


def encode_update(update: Update, stats: Counter[str] | None = None) -> list[bytes]:
    """``update`` as lines under ``MAX_LINE_BYTES``: cut in halves until each fits, along its
    longest list; the first half keeps everything else (the run row, the other lists). A single
    record that cannot fit (a gigantic event) is left out and counted (``lines_too_long``).

    The halves once kept only the list they were cut along: at 1,024 ranks a flush's 1,024 rank
    rows and 3,000 records passed 1 MiB, and the rank rows were lost on every such flush (an
    attached terminal's table stood still while its log lines went on)."""
    line = update.encode()
    if len(line) < protocol.MAX_LINE_BYTES:
        return [line]
    name = max(SPLIT_TABLES, key=lambda table: len(getattr(update, table)))
    rows = getattr(update, name)
    if len(rows) <= 1:
        if stats is not None:
            stats["lines_too_long"] += 1
        return []
    middle = len(rows) // 2
    first = Update(**{field: getattr(update, field) for field in Update.field_names()})
    setattr(first, name, rows[:middle])
    second = Update(update.t, decimated=update.decimated, **{name: rows[middle:]})
    return encode_update(first, stats) + encode_update(second, stats)


@dataclass(frozen=True)
class ReplaySummary:
    """What a history replay sent: through which committed batch, and what it left out."""

    through: int
    """The last batch sequence number the replay includes (later ones come live)."""
    decimated: bool
    """Older metrics were thinned to their envelope and last points (the updates said so)."""
    left_out: dict[str, int]
    """Stored rows not sent, per table (``metrics``: older records the thinned points stand for)."""
    last_keys: dict[str, int]
    """The newest row of each table it covers (a catch-up goes on after them)."""

    def followed_by(self, later: ReplaySummary) -> ReplaySummary:
        """This replay and a catch-up after it, as one."""
        left_out = Counter(self.left_out)
        left_out.update(later.left_out)
        return ReplaySummary(later.through, self.decimated or later.decimated, dict(left_out), later.last_keys)

    def history_end(self) -> Message:
        """The ``history_end`` message (an older reader ignores its fields)."""
        end = protocol.HistoryEnd(self.decimated, dict(self.left_out))
        return {"type": end.TYPE, **end.to_wire()}


class Publisher:
    """Subscribers of one run: snapshot, history replay, live updates, bye."""

    def __init__(self, writer: StoreWriter, model: LiveModel, stats: Counter[str],
                 run_id: Callable[[], int | None], run_row: Callable[[], dict[str, Any] | None],
                 commit_seq: Callable[[], int],
                 committed: Callable[[], tuple[int, dict[str, int]] | None] = lambda: None) -> None:
        self.writer = writer
        self.reader = StoreReader(writer.store_path)
        """Reads the rows a replay's plan names, beside the writer thread (``runner.hub.store_reader``)."""
        self.model = model
        self.stats = stats
        self._run_id = run_id
        self._run_row = run_row
        self._commit_seq = commit_seq
        """The sequence number of the last committed batch (read on the writer thread)."""
        self._committed = committed
        """The last committed batch and the store's last rows after it, as the writer left them
        (None: not known yet, then read on the writer's thread)."""
        self.subscribers: list[Subscriber] = []
        self.replay_budget = ReplayBudget()
        """How much of the history a replay sends at most (``runner.store.replay_window``)."""
        self.spec_table: dict[str, Any] = {}
        self.on_subscribers_changed: Callable[[], None] = _nothing
        """Called after a subscriber came or went (the hub sets the run's freshness)."""
        self.on_subscriber_dropped: Callable[[DroppedSubscriber], None] = _ignore_drop
        """Called when the hub disconnected a subscriber (the hub records a warning event)."""

    def snapshot(self, nodes: list[dict[str, Any]] | None = None) -> Message:
        return {"type": protocol.Snapshot.TYPE, "run": self._run_row(), "ranks": self.model.all_rows(),
                "nodes": nodes or [], "spec": self.spec_table}

    async def add(self, subscriber: Subscriber, history: bool = True, records: bool = True,
                  from_store: bool = False) -> None:
        """Snapshot, the stored history (``history``; without its metric records and samples
        unless ``records``; ``from_store``: where the store's history ends, which the subscriber
        reads itself), then live updates."""
        subscriber.live = False
        self.subscribers.append(subscriber)
        self.on_subscribers_changed()
        run_id = self._run_id()
        if run_id is None:
            nodes = []
        elif from_store:  # a node's row is committed as it is set; not behind the writer's commits
            nodes = await self.reader.call(RunStore.nodes, run_id)
        else:
            nodes = await self.writer.call(RunStore.nodes, run_id)
        subscriber.send(self.snapshot(nodes))
        replayed_through = 0  # without a replay, every queued live batch is new to it
        if history and from_store and run_id is not None:
            replayed_through = await self._stored_through(subscriber, run_id)
        elif history and run_id is not None:
            summary = await self._replay(subscriber, run_id, records=records)
            for _ in range(CATCH_UP_ROUNDS):
                if subscriber.queued_bytes > DISCONNECT_ABOVE_BYTES // 4 and subscriber.is_reading():
                    subscriber.let_queue_go()  # sent at once it would leave the subscriber at the budget's edge
                if not subscriber.missed_live or subscriber.closed:
                    break
                summary = await self._catch_up(subscriber, run_id, summary, records)
            if subscriber.missed_live and not subscriber.closed:
                subscriber.abandon(DropReason.SLOWER_THAN_RUN)
            replayed_through = summary.through
            if not subscriber.closed:
                subscriber.send(summary.history_end())
        subscriber.go_live(replayed_through)
        if subscriber.dropped is not None:
            self.remove(subscriber)

    async def _stored_through(self, subscriber: Subscriber, run_id: int) -> int:
        """Tell a subscriber that reads the history itself where it ends (``_last_committed``);
        the batches after it are what goes live. Returns it."""
        through, last = await self._last_committed(run_id)
        if not subscriber.closed:
            end = protocol.HistoryEnd(stored_through=last)
            subscriber.send({"type": end.TYPE, **end.to_wire()})
        self.stats["histories_from_store"] += 1
        return through

    async def _last_committed(self, run_id: int) -> tuple[int, dict[str, int]]:
        """The last committed batch and the store's last row of each table after it: where a
        history (a replay, or the subscriber's own read) ends, and after which batch the live
        updates begin. As the writer's thread left them after that commit, so no wait behind the
        next one (seconds at 1,024 ranks); read there (constant time) before the first commit."""
        known = self._committed()
        if known is not None:
            return known

        def committed(store: RunStore) -> tuple[int, dict[str, int]]:
            return self._commit_seq(), store.last_rowids(run_id)

        return await self.writer.call(committed)

    def add_local(self, callback: Callable[[Message], None], watches_live: bool = True) -> LocalSubscriber:
        subscriber = LocalSubscriber(callback, watches_live)
        callback(self.snapshot())
        self.subscribers.append(subscriber)
        self.on_subscribers_changed()
        return subscriber

    def remove(self, subscriber: Subscriber) -> None:
        """Forget ``subscriber`` (it left, or the hub dropped it: then counted and told, once)."""
        subscriber.close()
        if subscriber in self.subscribers:
            self.subscribers.remove(subscriber)
            if subscriber.dropped is not None:
                self.stats["subscribers_dropped"] += 1
                self.stats[f"subscribers_dropped_{subscriber.dropped.reason.value}"] += 1
                self.on_subscriber_dropped(subscriber.dropped)
            self.on_subscribers_changed()

    async def _catch_up(self, subscriber: Subscriber, run_id: int, before: ReplaySummary,
                        records: bool = True) -> ReplaySummary:
        """The live updates it missed while its replay went on (``let_queue_go``), from the store: the
        rows committed since ``before`` (of the metrics, each series' newest), then every rank, node
        and the run as they are now."""
        subscriber.missed_live = False
        self.stats["replay_catch_ups"] += 1
        summary = before.followed_by(await self._replay(subscriber, run_id, before.last_keys, records))
        nodes = await self.writer.call(RunStore.nodes, run_id)
        if not subscriber.closed:
            subscriber.send(update_message(Update(time.time(), ranks=self.model.all_rows(), run=self._run_row(),
                                                  nodes=nodes)))
        return summary

    async def _replay(self, subscriber: Subscriber, run_id: int, after: dict[str, int] | None = None,
                      records: bool = True) -> ReplaySummary:
        """Stream the stored history (rows after ``after``, per table), bounded
        (``runner.store.replay_window``): the most recent rows of each table, metrics older than
        their recent tail thinned per series. A catch-up (``after`` given) sends of metrics and
        samples only each series' newest record since ``after`` (``replay_window.latest_rows``): it
        costs what those seconds hold, so catch-ups end, however big the run. Returns what it
        included (through which batch, up to which row of each table) and what it left out.
        Without ``records``: the log lines and events only (a view of rank rows)."""
        budget = self.replay_budget
        since = after or {}
        catching_up = after is not None

        def plan(store: RunStore, last: dict[str, int]) -> tuple[MetricWindow | None, dict[str, tuple[int, int]]]:
            starts = {table: replay_window.recent_start(store.connection, table, run_id, last[table], keep,
                                                        since.get(table, 0))
                      for table, keep in budget.keep.items()
                      if (not catching_up and records) or table in ("logs", "events")}
            window = None if catching_up or not records else replay_window.plan_metrics(
                store.connection, run_id, last["metrics"], budget, since.get("metrics", 0))
            return window, starts

        # which rows: as the writer's thread left them after a commit; the window over them on the
        # reader's (at 1,024 ranks seconds of seeks, which held the commits back)
        through, last = await self._last_committed(run_id)
        window, starts = await self.reader.call(plan, last)
        left_out = {table: skipped for table, (_after, skipped) in starts.items() if skipped}
        for table in ("logs", "events"):
            await self._replay_table(subscriber, run_id, table, starts[table][0], last[table])
        if not records:
            return ReplaySummary(through, False, left_out, last)
        if window is None:  # a catch-up: the newest of each series, GPU and process
            decimated = False
            for table in ("metrics", "gpu_samples", "process_samples"):
                decimated |= await self._replay_latest(subscriber, run_id, table, since.get(table, 0), last[table],
                                                       left_out)
            return ReplaySummary(through, decimated, left_out, last)
        if window.decimated:
            sent = await self._replay_older_metrics(subscriber, run_id, window)
            if window.older_records is not None:  # a sampled window is not counted: that reads every row
                left_out["metrics"] = window.older_records - sent
        await self._replay_table(subscriber, run_id, "metrics", window.tail_after, last["metrics"])
        for table in ("gpu_samples", "process_samples"):
            await self._replay_table(subscriber, run_id, table, starts[table][0], last[table])
        return ReplaySummary(through, window.decimated, left_out, last)

    async def _replay_latest(self, subscriber: Subscriber, run_id: int, table: str, after: int, through: int,
                             left_out: dict[str, int]) -> bool:
        """A catch-up's rows of ``table``: the newest of each series (a metric series, a GPU, a
        rank's process) in (``after``, ``through``]; counts the rest in ``left_out``. True when some
        were left out (its updates say ``decimated``)."""
        if through <= after or subscriber.closed:
            return False
        columns = RunStore.RECORD_TABLES[table][1]

        def read(store: RunStore) -> replay_window.LatestRows:
            return replay_window.latest_rows(store.connection, table, columns, RECORD_CLASSES[table], run_id,
                                             after, through)

        latest = await self.reader.call(read)
        skipped = latest.records - len(latest.rows)
        if skipped:
            left_out[table] = left_out.get(table, 0) + skipped
        for start in range(0, len(latest.rows), HISTORY_ROWS_PER_READ):
            if subscriber.closed:
                break
            batch = RecordBatch()
            getattr(batch, table).extend(latest.rows[start:start + HISTORY_ROWS_PER_READ])
            await self._send_chunk(subscriber, batch, decimated=table == "metrics" and bool(skipped))
        return table == "metrics" and bool(skipped)

    async def _replay_table(self, subscriber: Subscriber, run_id: int, table: str, after: int, upto: int) -> None:
        """Rows of ``table`` with key in (``after``, ``upto``], as they came, a chunk at a time."""
        limit = 1000 if table == "events" else HISTORY_ROWS_PER_READ

        def read(store: RunStore, after: int) -> tuple[list[Any], int]:
            return store.read_chunk(table, run_id, after, upto, limit)

        while after < upto and not subscriber.closed:
            rows, after = await self.reader.call(read, after)
            if not rows:
                break
            batch = RecordBatch()
            getattr(batch, table).extend(rows)
            await self._send_chunk(subscriber, batch)

    async def _replay_older_metrics(self, subscriber: Subscriber, run_id: int, window: MetricWindow) -> int:
        """The thinned older part of the metrics, a few series per store read; returns the points sent."""
        def read(store: RunStore, group: tuple[SeriesSpan, ...]) -> list[Any]:
            return [point for series in group
                    for point in replay_window.older_points(store.connection, run_id, window, series)]

        sent = 0
        per_read = max(1, HISTORY_ROWS_PER_READ // (2 * window.buckets + 2))  # ~a chunk of points a read
        for start in range(0, len(window.older), per_read):
            if subscriber.closed:
                break
            points = await self.reader.call(read, window.older[start:start + per_read])
            sent += len(points)
            await self._send_chunk(subscriber, RecordBatch(metrics=points), decimated=True)
        return sent

    async def _send_chunk(self, subscriber: Subscriber, batch: RecordBatch, decimated: bool = False) -> None:
        """One chunk of the history, line by line as the subscriber takes them; a subscriber that
        takes nothing for ``REPLAY_STALL_SECONDS`` is dropped (it would hold the chunk forever).
        ``decimated``: the chunk stands for more records than it holds (its updates say so)."""
        updates = list(update_lines(time.time(), batch))
        for update in updates:
            update.decimated = decimated
        chunk = [(update_message(update), encode_update(update, self.stats)) for update in updates]
        subscriber.replay_bytes = sum(len(line) for _, lines in chunk for line in lines)
        try:
            for message, lines in chunk:
                subscriber.send_lines(message, lines)
                subscriber.replay_bytes -= sum(map(len, lines))
                subscriber.replay_waits_on_it = True
                try:
                    read = await subscriber.wait_until_read(REPLAY_STALL_SECONDS)
                finally:
                    subscriber.replay_waits_on_it = False
                if read:
                    subscriber.read_progress_at = time.monotonic()
                else:
                    subscriber.abandon(DropReason.STALLED_REPLAY)
                if subscriber.closed:
                    self.remove(subscriber)
                    return
        finally:
            subscriber.replay_bytes = 0

    def publish(self, seq: int, batch: RecordBatch, rank_rows: list[dict[str, Any]],
                run: dict[str, Any] | None, nodes: list[dict[str, Any]]) -> None:
        """Hand every subscriber the update(s) for committed batch ``seq``."""
        if not self.subscribers:
            return
        now = time.time()
        updates = list(update_lines(now, batch)) or [Update(now)]
        first = updates[0]
        first.ranks, first.run, first.nodes = rank_rows, run, nodes
        encoded: list[tuple[Message, list[bytes] | None]] = []
        sockets = any(isinstance(subscriber, SocketSubscriber) for subscriber in self.subscribers)
        for update in updates:
            encoded.append((update_message(update), encode_update(update, self.stats) if sockets else None))
        for subscriber in list(self.subscribers):
            for message, lines in encoded:
                subscriber.deliver_update(seq, message, lines)
            if subscriber.closed:
                self.remove(subscriber)
        self._enforce_budget()

    def send_now(self, message: Message) -> None:
        """A message for every live subscriber at once, outside the batches (the store may be full)."""
        for subscriber in list(self.subscribers):
            if subscriber.live and not subscriber.closed:
                subscriber.send(message)

    def _enforce_budget(self) -> None:
        """All subscribers together hold at most ``TOTAL_BACKLOG_BYTES``: drop those holding the most."""
        held = sorted(((subscriber.held_bytes(), index, subscriber)
                       for index, subscriber in enumerate(self.subscribers)), reverse=True)
        total = sum(size for size, _, _ in held)
        for size, _, subscriber in held:
            if total <= TOTAL_BACKLOG_BYTES or size == 0:
                break
            subscriber.abandon(DropReason.OVER_TOTAL)
            self.remove(subscriber)
            total -= size

    def say_bye(self, reason: str) -> None:
        for subscriber in list(self.subscribers):
            subscriber.send({"type": protocol.Bye.TYPE, "reason": reason})

    def close_all(self) -> None:
        for subscriber in list(self.subscribers):
            subscriber.close()
        self.reader.close()


def _nothing() -> None:
    pass


def _ignore_drop(dropped: DroppedSubscriber) -> None:
    pass


def event_message(event: Event) -> Message:
    """A single event as an update, for ``Publisher.send_now``."""
    return {"type": Update.TYPE, "t": time.time(), "events": [event.to_wire()]}

