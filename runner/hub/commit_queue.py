"""Batches published to the subscribers, on their way into the store: one transaction for all
that waited.

The hub used to publish a batch only once its transaction had committed, and to take the next
batch only after that. Committing costs what the store's index makes it cost: at 1,024 ranks a
50 ms batch holds records of ~1,300 series, each in its own page of ``metrics_by_series``, and
once a run has grown past the page cache (a few minutes at that scale) every such page is read
back and written to the log, so a commit takes longer than the 50 ms between flushes, and what a
subscriber sees fell behind by as much (freshness p95 2.1 s after ten minutes).

So a flush now publishes at once and hands its batch here, and the store writer's thread
writes it behind; the flush loop rests after that transaction, and the next flush waits for it
before it takes its batch (``Hub.flush``). The pace of publishing stays the store's: publishing at 20 flushes a second
whatever the store's pace was measured at 1,024 ranks for ten minutes (``PERFORMANCE.md``):
freshness p50 100 ms against 1,318, but every rank row went out twice as often, subscribers
attaching fell behind by 16 MiB and were dropped, and p95 at the subscriber rose to 4.4 s. So a
batch only skips the wait for its own transaction. Batches that do wait together (a flush that
came while another's transaction ran) are written in one.

What a history replay reads stays exact: a batch's sequence number is given when it is
published, and ``committed_seq`` (read on the writer thread, as a replay reads it) is that of
the last batch written. A drain is queued on the writer thread in the same turn of the loop as
the batch is published, before any replay that starts later can queue its read, and the writer
thread runs its calls in order: a replay that starts after a batch was published reads it from
the store, and one that started before gets it live.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from dataclasses import dataclass

from runner.hub.writer import StoreWriter
from runner.store.store import ColumnValue, RecordBatch, RunStore

RankRows = list[tuple[int, dict[str, ColumnValue]]]
Commit = Callable[[RunStore, RecordBatch, RankRows], None]


@dataclass
class Waiting:
    seq: int
    batch: RecordBatch
    rank_rows: RankRows


class CommitQueue:
    """Published batches waiting for their transaction; drained on the writer thread."""

    def __init__(self, writer: StoreWriter, commit: Commit, on_error: Callable[[BaseException], None]) -> None:
        self.writer = writer
        self.commit = commit
        """Writes one batch and rank rows in one transaction (writer thread)."""
        self.on_error = on_error
        """Told of a transaction that failed (the store's own refusals are the writer's: not these)."""
        self.committed_seq = 0
        """The sequence number of the last batch written (set on the writer thread)."""
        self.transactions = 0
        self._lock = threading.Lock()
        self._waiting: list[Waiting] = []
        self._waiting_records = 0
        self._drain: asyncio.Future[int] | None = None
        """The drain queued on the writer thread that has not taken its batches yet."""
        self._last: asyncio.Future[int] | None = None
        """The newest drain queued (the writer thread runs them in order: once it is done, so is
        every batch added before it)."""

    @property
    def waiting_records(self) -> int:
        return self._waiting_records

    def add(self, seq: int, batch: RecordBatch, rank_rows: RankRows) -> asyncio.Future[int]:
        """Loop thread: queue batch ``seq`` (published already); returns the drain that will
        write it (its result: the last sequence number it wrote)."""
        with self._lock:
            self._waiting.append(Waiting(seq, batch, rank_rows))
            self._waiting_records += len(batch)
            if self._drain is None:
                self._drain = self._last = asyncio.ensure_future(self.writer.call(self._write_waiting))
                self._drain.add_done_callback(self._told_if_failed)
            return self._drain

    def _told_if_failed(self, drain: asyncio.Future[int]) -> None:
        error = None if drain.cancelled() else drain.exception()
        if error is not None:
            self.on_error(error)

    def pending_drain(self) -> asyncio.Future[int] | None:
        """Loop thread: the drain that writes every batch added so far; None when all are written.
        Await it through ``asyncio.shield``: a waiter cancelled (the flush loop, at the end of a
        run) would cancel the future, and the next waiter would take its commit for done."""
        last = self._last
        return None if last is None or last.done() else last

    def _write_waiting(self, store: RunStore) -> int:
        """Writer thread: every batch that waited, in one transaction."""
        with self._lock:
            waiting, self._waiting = self._waiting, []
            self._waiting_records = 0
            self._drain = None  # what comes from now on needs a drain of its own
        if not waiting:
            return self.committed_seq
        batch = RecordBatch()
        rows: dict[int, dict[str, ColumnValue]] = {}
        for entry in waiting:
            batch.extend(entry.batch)
            for rank, values in entry.rank_rows:
                rows[rank] = values  # a rank's columns as of its newest batch
        self.commit(store, batch, list(rows.items()))
        self.transactions += 1
        self.committed_seq = waiting[-1].seq
        return self.committed_seq
