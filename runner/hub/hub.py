"""The hub: one per run. Receives telemetry, writes the store, publishes to subscribers.

It is four parts with one job each, wired together here:

* ``server.ConnectionServer``: the sockets, authentication, each connection's role,
  and the limits that keep a client without the token from costing memory or rows;
* ``ingest.Ingest``: typed messages and the runner's own records into the pending
  batch and the live model (``live_model.LiveModel``), with what could not be
  stored counted per rank;
* ``writer.StoreWriter``: the one thread and SQLite connection that write the store
  (a refused row never costs the good ones; a full disk never stops the run);
* ``publisher.Publisher``: snapshot, streamed history replay, live updates.

and one interface for the rest of the runner: ``observer.HubObserver``.

The batching, here: records collect in the pending batch; as soon as something is
pending (and at most every ``FLUSH_SECONDS``) the batch is committed on the writer
thread and only then published, so a subscriber never sees a record the store does
not have, and each subscriber gets at most one update per flush. While nobody
watches the run live, routine records (metrics, heartbeats, samples) wait up to the
run's slower pace first, and workers are asked to send less often
(``freshness``); log lines and events never wait.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections import Counter
from collections.abc import Callable, Mapping
from pathlib import Path

from rankwatch.protocol import Event, EventKind, GpuSample, LogLine, MetricRecord, ProcessSample
from runner.hub.compaction import Compactor
from runner.hub.freshness import FLUSH_SECONDS, UNWATCHED, freshness_for
from runner.hub.ingest import Ingest
from runner.hub.live_model import LiveModel, LiveRank
from runner.hub.observer import HubObserver, Observers
from runner.hub.publisher import LocalSubscriber, Message, Publisher, event_message
from runner.hub.server import ConnectionServer, Refusals
from runner.hub.writer import SWITCH_INTERVAL_SECONDS, StoreWriter
from runner.rows import JsonObject, NodeInfo, RunInfo, StoredRun
from runner.store.rank_stats import keep_live_statistics, keep_run_statistics
from runner.store.run_figures import LIVE_STATISTICS_SECONDS
from runner.store.store import ColumnValue, RecordBatch, RunColumnValue, RunStore

ACCEPT_SETTLE_SECONDS = 0.1
STORE_BEHIND_SECONDS = 5.0
"""A batch that takes this long to commit means the store does not keep up with what the ranks
send: every view of the run (live, ``attach``, ``runs show``) lags them by about as much. Said
once, as a warning: the views show old rows as current ones otherwise, with nothing to say why."""
RANK_STORE_COLUMNS = ("local_rank", "node_rank", "host", "pid", "world_size", "python", "torch", "gpu_index",
                      "state", "exit_code", "first_seen", "last_seen", "dropped", "rejected", "sent",
                      "gpu_mem_used_peak")


async def wait_until_set(event: asyncio.Event, seconds: float) -> None:
    """Return when ``event`` is set or after ``seconds``, whichever comes first.

    Not ``asyncio.wait_for(event.wait(), seconds)``: on Python 3.11 that swallows a
    cancellation arriving in the same tick as the event (CPython gh-86296), and the flush
    loop, cancelled by ``Hub.close()`` while urgent records keep arriving, would then run
    on and ``close()`` would wait for it forever (no bye, the run never ends)."""
    if event.is_set():
        return
    waiter = asyncio.ensure_future(event.wait())
    try:
        await asyncio.wait({waiter}, timeout=seconds)
    finally:
        waiter.cancel()


class Hub:
    def __init__(self, store_path: Path, token: str):
        self.store_path = Path(store_path)
        self.run_id: int | None = None
        self.model = LiveModel()
        self.stats: Counter[str] = Counter()
        self.observers = Observers(on_error=lambda text: self.add_event(EventKind.WARNING, None, text))
        self.writer = StoreWriter(self.store_path)
        self._has_pending = asyncio.Event()
        self._urgent = asyncio.Event()
        """Something pending must not wait for the routine pace (a log line, an event)."""
        self.freshness = UNWATCHED
        """How fresh records must be now (``freshness``): follows the subscribers."""
        self.ingest = Ingest(self.model, self.observers, self.stats, on_pending=self._note_pending,
                             on_full_batch=self._flush_now)
        self._seq = 0
        """Batches committed so far (written on the writer thread)."""
        self._committed: tuple[int, dict[str, int]] | None = None
        """The last committed batch and the store's last row of each table right after it: where a
        history read from the store ends (``Publisher._stored_through``), known without waiting
        behind the writer's next commit (at 1,024 ranks a commit takes seconds). Written on the
        writer thread, one tuple at a time."""
        self._run: StoredRun | None = None
        """The run's row: as stored, then as changed (kept when the store no longer takes it)."""
        self.publisher = Publisher(self.writer, self.model, self.stats, run_id=lambda: self.run_id,
                                   run_row=self._run_wire, commit_seq=lambda: self._seq,
                                   committed=lambda: self._committed)
        self.refusals = Refusals(self.stats, self._record_refusal)
        self.server = ConnectionServer(token, self.ingest, self.publisher, self.observers, self.stats,
                                       self.refusals)
        self.server.worker_latency = self.freshness.worker_latency
        self.publisher.on_subscribers_changed = self._subscribers_changed
        self.publisher.on_subscriber_dropped = lambda dropped: self.add_event(
            EventKind.WARNING, None, dropped.message(), **dropped.fields())
        self._flush_task: asyncio.Task[None] | None = None
        self.compactor = Compactor(self.writer, lambda: self.run_id,
                                   replaying=lambda: any(not s.live for s in self.publisher.subscribers),
                                   stats=self.stats)
        """Old detail into the metric pyramid as the run goes (``runner.hub.compaction``)."""
        self._compact_task: asyncio.Task[None] | None = None
        self._live_statistics_task: asyncio.Task[None] | None = None
        self._flush_lock = asyncio.Lock()
        self._run_changed = False
        self._node_rows_changed: list[NodeInfo] = []
        self._store_incomplete_told = False
        self._unstored_notice: Event | None = None
        """The store-incomplete event, while the full store has not taken it (it goes with the end)."""
        self.store_behind_seconds = STORE_BEHIND_SECONDS
        self._store_behind_told = False
        self._closed = False

    # ---- the run's own rows --------------------------------------------------------------------

    async def create_run(self, spec_table: Mapping[str, object], *, run_key: str, profile: str | None,
                         spec_toml: str, command: str | None, host: str, workdir: str | None, runner_pid: int,
                         socket: str | None, world_size: int | None, status: str) -> int:
        """Record the run (``RunStore.create_run``'s fields); ``spec_table`` is the launch spec as a
        TOML table, sent to subscribers with the snapshot.

        Raises:
            sqlite3.Error, OSError: the store cannot be written at all.
        """
        self.publisher.spec_table = dict(spec_table)

        def create(store: RunStore) -> tuple[int, StoredRun]:
            run_id = store.create_run(run_key=run_key, profile=profile, spec_toml=spec_toml, command=command,
                                      host=host, workdir=workdir, runner_pid=runner_pid, socket=socket,
                                      world_size=world_size, status=status)
            return run_id, store.stored_run(run_id)

        run_id, self._run = await self.writer.call(create)
        self.run_id = run_id
        return run_id

    async def update_run(self, **fields: RunColumnValue) -> None:
        """Change the run's row (its status, its end: ``RunStore.RUN_COLUMNS``); kept in memory and
        published even when the store can no longer take it."""
        def update(store: RunStore) -> None:
            if "ended" in fields:
                notice = self._unstored_notice
                if self.writer.write_the_end(store.update_run, self.run_id, **fields) and notice is not None:
                    self.writer.try_write(store.write_batch, self.run_id, RecordBatch(events=[notice]))
            else:
                self.writer.try_write(store.update_run, self.run_id, **fields)

        await self.writer.call(update)
        if self.writer.reserve_given_back:  # the rank rows the full store refused may fit now
            self.model.mark_all_changed()
        self._run = (self._run or StoredRun()).merged(fields)
        self._run_changed = True
        self._note_pending(True)

    async def update_node(self, node_rank: int, host: str, state: str, processes: int | None = None,
                          detail: str | None = None) -> None:
        def update(store: RunStore) -> None:
            self.writer.try_write(store.upsert_node, self.run_id, node_rank, host, state, processes, detail)

        await self.writer.call(update)
        self._node_rows_changed.append(NodeInfo(node_rank, host, state, processes, time.time(), detail))
        self._note_pending(True)

    @property
    def run_row(self) -> RunInfo | None:
        """The run's row as published (None before ``create_run``)."""
        return self._run

    def _run_wire(self) -> JsonObject | None:
        return None if self._run is None else self._run.to_wire()

    @property
    def store_incomplete(self) -> str | None:
        """Why the store stopped taking records ("disk full"), or None."""
        return self.writer.incomplete

    # ---- what the runner feeds in (event loop) -------------------------------------------------

    def proven_pid(self, rank: int) -> int | None:
        """The pid ``rank``'s worker proved is its own process (``ConnectionServer.proven_pids``)."""
        return self.server.proven_pid(rank)

    def add_observer(self, observer: HubObserver) -> None:
        self.observers.add(observer)

    def add_log(self, rank: int | None, stream: str, line: str, t: float, node: str | None = None) -> None:
        self.ingest.add_log(LogLine(rank, t, stream, line, node))

    def add_metric(self, record: MetricRecord) -> None:
        self.ingest.add_metric(record)

    def add_event(self, kind: EventKind | str, rank: int | None, message: str, t: float | None = None,
                  **fields: object) -> None:
        """Record an event. Raises ValueError for a kind ``EventKind`` does not define."""
        self.ingest.add_event(kind, rank, message, t, **fields)

    def add_gpu_samples(self, rows: list[GpuSample]) -> None:
        self.ingest.add_gpu_samples(rows)

    def add_process_samples(self, rows: list[ProcessSample]) -> None:
        self.ingest.add_process_samples(rows)

    def rank_lost(self, rank: int, t: float) -> None:
        """A rank ended with its node (``runner.remote``): tell the observers, as for a dropped connection."""
        self.observers.on_worker_lost(rank, t)

    def mark_changed(self) -> None:
        """Something outside the records changed (a rank's state, a run field): publish soon."""
        self._note_pending(True)

    def _note_pending(self, urgent: bool) -> None:
        self._has_pending.set()
        if urgent:
            self._urgent.set()

    def _subscribers_changed(self) -> None:
        """Someone started or stopped watching live: the run's freshness follows, workers are told."""
        freshness = freshness_for(self.publisher.subscribers)
        if freshness == self.freshness:
            return
        self.freshness = freshness
        self.server.set_worker_latency(freshness.worker_latency)
        if freshness.watched:
            self._urgent.set()  # what waits for the slow pace goes out now

    def add_local_subscriber(self, callback: Callable[[Message], None],
                             watches_live: bool = True) -> LocalSubscriber:
        """``watches_live``: the callback shows records as they come (False: a plain terminal
        that prints a status line every few seconds; the run may then go at the slow pace)."""
        return self.publisher.add_local(callback, watches_live)

    def losses(self) -> JsonObject:
        """What did not make it into the store, for the run's summary (``describe_losses``):
        ``{"losses": [{rank, dropped, rejected, not_received}], "store_incomplete": reason}``
        with only ranks that lost something, and only the keys that apply."""
        found: JsonObject = {}
        rows: list[dict[str, int]] = []
        for rank in sorted(self.model.ranks):
            row = self.model.ranks[rank]
            not_received = max(0, row.sent - row.received) if row.sent is not None else 0
            if row.dropped or row.rejected or not_received:
                rows.append({"rank": rank, "dropped": row.dropped, "rejected": row.rejected,
                             "not_received": not_received})
        if rows:
            found["losses"] = rows
        if self.writer.incomplete is not None:
            found["store_incomplete"] = self.writer.incomplete
        return found

    @property
    def worker_connections(self) -> int:
        return self.server.worker_connections

    # ---- lifecycle ------------------------------------------------------------------------------

    async def serve_unix(self, path: Path) -> None:
        await self.server.serve_unix(path)

    async def serve_tcp(self, host: str, port: int) -> int:
        return await self.server.serve_tcp(host, port)

    def start(self) -> None:
        """Start flushing, compacting and keeping statistics; the writer thread and the loop share
        the GIL from here on, so the process switches between threads at ``SWITCH_INTERVAL_SECONDS``."""
        sys.setswitchinterval(SWITCH_INTERVAL_SECONDS)
        loop = asyncio.get_running_loop()
        self._flush_task = loop.create_task(self._flush_forever(), name="hub-flush")
        self._compact_task = loop.create_task(self.compactor.run_forever(), name="hub-compact")
        self._live_statistics_task = loop.create_task(self._keep_live_statistics_forever(), name="hub-statistics")

    async def close(self, reason: str = "run ended", drain_seconds: float = 5.0) -> None:
        """Stop listening, read what producers already sent (up to ``drain_seconds``), flush
        everything, say bye to subscribers, close the store."""
        if self._closed:
            return
        self._closed = True
        deadline = time.monotonic() + drain_seconds
        await asyncio.sleep(ACCEPT_SETTLE_SECONDS)  # accept connections already queued by the kernel
        await self.server.wait_for_producers(deadline)
        self.server.stop_listening()
        if self._compact_task is not None:
            self._compact_task.cancel()
        if self._live_statistics_task is not None:
            self._live_statistics_task.cancel()
        if self._flush_task is not None:
            async with self._flush_lock:  # never cancel a flush halfway: its commit would go on unseen
                self._flush_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._flush_task
        self.ingest.report_rejected()
        self.refusals.summarise()
        await self.flush()
        self._count_writer_losses()
        if self.stats:
            self.add_event(EventKind.HUB_STATS, None, "hub counters", counters=dict(self.stats))
            await self.flush()
        self.publisher.say_bye(reason)
        await asyncio.sleep(0)
        await self.server.close_all()
        self.publisher.close_all()
        await self._keep_run_statistics()
        self.writer.close()

    async def _keep_live_statistics_forever(self) -> None:
        """Every ``LIVE_STATISTICS_SECONDS``, write what ingest has tallied so far: `runs show`,
        `runs list` and the History of the live run read it instead of every record."""
        while True:
            await asyncio.sleep(LIVE_STATISTICS_SECONDS)
            await self.keep_live_statistics()

    async def keep_live_statistics(self) -> None:
        run_id, tally = self.run_id, self.ingest.tally
        if run_id is None or tally.failed is not None or self.writer.refused_rows or self.writer.incomplete:
            return
        tallied, now = tally.statistics(), time.time()
        await self.writer.call(lambda store: self.writer.try_write(keep_live_statistics, store, run_id, tallied, now))

    async def _keep_run_statistics(self) -> None:
        """An ended run's per-rank statistics, kept in the store once its last record is stored
        (``runner.store.rank_stats``), after the subscribers had their bye: `runs show` and the
        History then read one row, whatever the size of the run. They are what ingest tallied
        as the records came (milliseconds; reading a 1,024-rank run of ten minutes back took two
        minutes), unless the store refused some of those records (or the tally failed): then
        they are computed from what it holds."""
        run_id = self.run_id
        if run_id is None or self._run is None or not self._run.ended or self.writer.incomplete is not None:
            return
        tally = self.ingest.tally
        tallied = tally.statistics() if self.writer.refused_rows == 0 and tally.failed is None else None
        try:
            await self.writer.call(lambda store: self.writer.try_write(keep_run_statistics, store, run_id, tallied))
        except Exception as error:  # never in the way of closing: readers compute them instead
            print(f"rankwatch: run {run_id}'s statistics were not kept ({type(error).__name__}: {error}); "
                  "`runs show` computes them from the records", file=sys.stderr, flush=True)

    # ---- batching ---------------------------------------------------------------------------

    async def _flush_forever(self) -> None:
        """Flush as soon as something arrives, then rest ``FLUSH_SECONDS``: fresh data is
        published at once, and no subscriber gets more than ~20 updates a second. While
        nobody watches live, routine records wait up to ``routine_flush_seconds`` first
        (an urgent record ends the wait): fewer, larger transactions."""
        while True:
            await self._has_pending.wait()
            if not self.freshness.watched:
                await wait_until_set(self._urgent, self.freshness.routine_flush_seconds)
            self._has_pending.clear()
            self._urgent.clear()
            try:
                await self.flush()
            except Exception as error:  # a bug must not stop ingestion; the store's own failures never get here
                self.stats["flush_errors"] += 1
                if self.stats["flush_errors"] == 1:
                    self.add_event(EventKind.WARNING, None, f"hub flush failed: {type(error).__name__}: {error}")
            await asyncio.sleep(FLUSH_SECONDS)

    def _flush_now(self) -> None:
        if not self._flush_lock.locked():
            asyncio.get_running_loop().create_task(self.flush())

    async def flush(self) -> None:
        async with self._flush_lock:
            batch = self.ingest.take_batch()
            rows = self.model.take_changed()
            nodes, self._node_rows_changed = self._node_rows_changed, []
            run_changed, self._run_changed = self._run_changed, False
            if not batch and not rows and not run_changed and not nodes:
                return
            rank_rows = [(row.rank, _store_columns(row)) for row in rows]
            started = time.monotonic()
            seq = await self.writer.call(self._commit, batch, rank_rows)
            self._tell_if_store_behind(len(batch), time.monotonic() - started)
            await self._tell_if_store_incomplete()
            wire_rows = [row.to_wire() for row in rows] if self.publisher.subscribers else []  # none to tell
            self.publisher.publish(seq, batch, wire_rows, self._run_wire() if run_changed else None,
                                   [node.to_wire() for node in nodes])

    def _commit(self, store: RunStore, batch: RecordBatch, rank_rows: list[tuple[int, dict[str, ColumnValue]]]) -> int:
        """Writer thread: one transaction for the batch and the changed rank rows."""
        if self.run_id is not None:
            self.writer.commit(store, self.run_id, batch, rank_rows)
        self.stats["records_stored"] += len(batch)
        self._seq += 1
        if self.run_id is not None:
            self._committed = (self._seq, store.last_rowids(self.run_id))
        return self._seq

    def _tell_if_store_behind(self, records: int, seconds: float) -> None:
        """The first commit that took ``store_behind_seconds`` or more: a warning that says how far
        behind the store is and that nothing is lost (``STORE_BEHIND_SECONDS``)."""
        if seconds < self.store_behind_seconds:
            return
        self.stats["slow_commits"] += 1
        if self._store_behind_told:
            return
        self._store_behind_told = True
        ranks = len(self.model.ranks)
        self.add_event(EventKind.WARNING, None,
                       f"the run store is falling behind: {records:,} records took {seconds:.1f} s to commit, so the "
                       f"live view, `rankwatch attach` and `runs show` lag the ranks by about that much. Nothing is "
                       f"lost: they catch up when the ranks send less. The runner's machine is short of CPU or disk "
                       f"for {ranks:,} ranks' telemetry", records=records, seconds=round(seconds, 2), ranks=ranks)

    async def _tell_if_store_incomplete(self) -> None:
        """The first time the store refuses for want of room: say so once, everywhere it can be seen
        (subscribers at once, the runner's terminal, and the store if it still takes a row)."""
        reason = self.writer.incomplete
        if reason is None or self._store_incomplete_told:
            return
        self._store_incomplete_told = True
        message = (f"the run store stopped taking records ({reason}: {self.store_path}); the run goes on and is "
                   "shown live, but what follows is not stored. Free space to keep the record of later runs whole")
        event = Event(time.time(), EventKind.STORE_INCOMPLETE, None, message, {"reason": reason})
        self.publisher.send_now(event_message(event))  # not through a batch: the store may not take it
        run_id = self.run_id
        if run_id is not None:
            stored = await self.writer.call(lambda store: self.writer.try_write(
                lambda: store.write_batch(run_id, RecordBatch(events=[event])) or True))
            self._unstored_notice = None if stored else event
        if not any(subscriber.name == "local" for subscriber in self.publisher.subscribers):
            with contextlib.suppress(OSError, ValueError):
                print(f"rankwatch: {message}", file=sys.stderr, flush=True)

    def _count_writer_losses(self) -> None:
        if self.writer.unstored:
            self.stats["records_not_stored_store_incomplete"] = self.writer.unstored
        if self.writer.refused_rows:
            self.stats["rows_refused_by_store"] = self.writer.refused_rows

    def _record_refusal(self, message: str, **fields: object) -> None:
        self.add_event(EventKind.REFUSED, None, message, None, **fields)


def _store_columns(row: LiveRank) -> dict[str, ColumnValue]:
    """The rank's ``ranks`` columns (``RANK_STORE_COLUMNS``): a plain dict, not a row object, as this
    runs for every changed rank at every flush (hundreds a flush at 1,024 ranks)."""
    return {name: getattr(row, name) for name in RANK_STORE_COLUMNS}
