"""Ingest: typed messages and the runner's own records in, pending records and the live model out.

Everything arrives here on the event loop: worker and agent messages (already
decoded and validated into ``rankwatch.protocol`` values by the connection
server), and what the runner produces itself (captured output lines, GPU and
process samples, events). Each record goes into the pending batch the writer
commits next, the live model is updated, and the observers are told.

Validation happens before a record can reach a batch: a value the store cannot
hold (a time that is not a timestamp, an integer outside SQLite's range, a name
that is not text) is left out by ``Metrics.from_wire`` and counted here per rank
and reason. The rank's row carries the count (``rejected``), and the first time a
rank sends such a record, and at the end of the run, a ``records_rejected`` event
says which rank, how many and why.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from rankwatch import protocol
from rankwatch.protocol import Event, EventKind, GpuSample, LogLine, MetricRecord, ProcessSample
from runner.exit_status import only_says_peer_gone, rank_exit_message
from runner.hub.live_model import LiveModel
from runner.hub.observer import Observers
from runner.state import RankState
from runner.store.statistics_tally import RunTally
from runner.store.store import RecordBatch

FLUSH_NOW_RECORDS = 50_000
"""A pending batch this big is committed at once rather than at the next flush tick."""


ROUTINE_MESSAGES = (protocol.Metrics, protocol.Heartbeat, protocol.ProcessSamples)
"""Messages whose records may wait for the run's routine pace; every other one is urgent."""


class Ingest:
    def __init__(self, model: LiveModel, observers: Observers, stats: Counter[str],
                 on_pending: Callable[[bool], None], on_full_batch: Callable[[], None]) -> None:
        self.model = model
        self.observers = observers
        self.stats = stats
        self.pending = RecordBatch()
        self.tally = RunTally()
        """Every metric record taken, added up: the run's statistics when it ends (``statistics_tally``)."""
        self.rejected: dict[int, Counter[str]] = {}
        """rank -> reason -> records left out at ingest (what the store could not hold)."""
        self._rejected_examples: dict[int, dict[str, str]] = {}
        """rank -> reason -> the name of the first record left out for it."""
        self._rejected_reported: dict[int, int] = {}
        self._exited_ranks: set[int] = set()
        self._peer_gone: set[int] = set()
        """Ranks whose fatal exception only says a peer went away (an echo of another's failure)."""
        self._first_failed: int | None = None
        """The first rank that failed by itself (its exit or fatal exception), as seen live."""
        self._on_pending = on_pending
        """Something is pending: the hub flushes soon; at once (within ``FLUSH_SECONDS``) when
        the argument is True (urgent: a log line, an event, a hello), else at the run's
        routine pace (metrics, heartbeats, samples: ``runner.hub.freshness``)."""
        self._on_full_batch = on_full_batch
        """The pending batch reached ``FLUSH_NOW_RECORDS``: the hub flushes now."""

    def take_batch(self) -> RecordBatch:
        batch, self.pending = self.pending, RecordBatch()
        return batch

    # ---- the runner's own records ------------------------------------------------------------

    def add_log(self, line: LogLine) -> None:
        self.pending.logs.append(line)
        self._on_pending(True)
        if line.rank is not None and line.rank not in self.model.ranks:
            self.model.row(line.rank)
        self.observers.on_log(line)

    def add_metric(self, record: MetricRecord) -> None:
        self.pending.metrics.append(record)
        self.tally.add(record[0], [record])
        self.model.on_metric(*record)
        self._on_pending(False)

    def add_event(self, kind: EventKind | str, rank: int | None, message: str, t: float | None = None,
                  **fields: Any) -> None:
        """Record an event. Raises ValueError for a kind ``EventKind`` does not define."""
        self.pending.events.append(Event(t if t is not None else time.time(), kind, rank, message, fields))
        self._on_pending(True)

    def add_gpu_samples(self, rows: list[GpuSample]) -> None:
        self.pending.gpu_samples.extend(rows)
        self._on_pending(False)

    def add_process_samples(self, rows: list[ProcessSample]) -> None:
        self.pending.process_samples.extend(rows)
        for row in rows:
            self.model.on_process_sample(row.rank, row.cpu_percent, row.rss_bytes)
        self._on_pending(False)

    # ---- worker and agent messages -----------------------------------------------------------

    def hello(self, hello: protocol.Hello) -> None:
        self._on_pending(True)
        row = self.model.on_hello(hello)
        self._exited_ranks.discard(row.rank)  # a restarted rank starts afresh
        self._peer_gone.discard(row.rank)
        if self._first_failed == row.rank:
            self._first_failed = None
        self.add_event(EventKind.RANK_STARTED, row.rank, f"rank {row.rank} started on {row.host} (pid {row.pid})",
                       host=row.host, pid=row.pid, local_rank=row.local_rank, node_rank=row.node_rank,
                       restart=row.restart)
        self.observers.on_hello(hello)

    def message(self, message: protocol.Message) -> None:
        """A worker's or agent's message after its hello (the connection server decoded it)."""
        self._on_pending(not isinstance(message, ROUTINE_MESSAGES))
        if isinstance(message, protocol.Metrics):
            self.metrics(message)
        elif isinstance(message, protocol.Heartbeat):
            self.model.on_heartbeat(message)
        elif isinstance(message, protocol.ExceptionReport):
            fatal = message.fatal  # a dying thread is worth an event, not a failure
            if fatal and only_says_peer_gone(f"{message.exc_type}: {message.message}"):
                self._peer_gone.add(message.rank)
            elif fatal and self._first_failed is None:
                self._first_failed = message.rank
            self.add_event(EventKind.EXCEPTION if fatal else EventKind.THREAD_EXCEPTION, message.rank,
                           f"{message.exc_type}: {message.message}", t=message.t, exc_type=message.exc_type,
                           exc_message=message.message, traceback=message.traceback, thread=message.thread)
        elif isinstance(message, protocol.Exit):
            self.exit(message)
        elif isinstance(message, protocol.ParamHash):
            self.add_event(EventKind.PARAM_HASH, message.rank, "parameter fingerprint", t=message.t,
                           step=message.step, digest=message.digest)
        elif isinstance(message, protocol.StacksWritten):
            self.add_event(EventKind.STACKS_WRITTEN, message.rank, "stack dump written", path=message.path)
        elif isinstance(message, protocol.Log):
            self.add_log(message.line)
        elif isinstance(message, protocol.WorkerLost):
            self.worker_lost(message.rank, message.t)
        elif isinstance(message, protocol.ProcessSamples):
            if message.rejected:
                self.stats["bad_process_samples"] += message.rejected
            self.add_process_samples(message.rows)
        self.observers.on_message(message)

    def metrics(self, message: protocol.Metrics) -> None:
        """The hot path (100k+ records/s): the records were validated while decoding."""
        rejected = 0
        if message.rejected:
            rejected = self.reject(message.rank, message.rejected, message.examples)
        records = message.records
        self.pending.metrics += records
        self.tally.add(message.rank, records)
        self.model.on_metric_batch(message.rank, records, rejected)
        if len(self.pending) >= FLUSH_NOW_RECORDS:
            self._on_full_batch()

    def reject(self, rank: int, reasons: dict[str, int], examples: dict[str, str] | None = None) -> int:
        """Count records of ``rank`` that could not be stored (the first ones are told at once,
        quoting ``examples``: reason -> a rejected record's name); returns how many."""
        counts = self.rejected.setdefault(rank, Counter())
        counts.update(reasons)
        if examples:
            known = self._rejected_examples.setdefault(rank, {})
            for reason, name in examples.items():
                known.setdefault(reason, name)
        total = sum(reasons.values())
        self.stats["records_rejected"] += total
        self.model.on_rejected(rank, total)
        if rank not in self._rejected_reported:
            self._report_rejected(rank)
        return total

    def report_rejected(self) -> None:
        """One ``records_rejected`` event per rank that had any since it was last reported (the end of a run)."""
        for rank in sorted(self.rejected):
            if sum(self.rejected[rank].values()) > self._rejected_reported.get(rank, 0):
                self._report_rejected(rank)

    def _report_rejected(self, rank: int) -> None:
        counts = self.rejected[rank]
        total = sum(counts.values())
        self._rejected_reported[rank] = total
        examples = self._rejected_examples.get(rank, {})
        why = ", ".join(f"{reason}: {count}" + (f", e.g. {examples[reason]!r}" if reason in examples else "")
                        for reason, count in counts.most_common())
        self.add_event(EventKind.RECORDS_REJECTED, rank,
                       f"rank {rank}: {total} record{'s' if total != 1 else ''} dropped, the store cannot hold "
                       f"them ({why})", count=total, reasons=dict(counts), examples=dict(examples))

    def exit(self, message: protocol.Exit) -> None:
        """A rank's own last word. One that failed only because a peer went away after another rank
        failed is stopped after that failure, without a code: torchrun's report gives it
        (``runner.exit_status``). Its peer may also have finished its script instead (a collective
        the other never entered): then no rank failed before, and it is the failure."""
        rank, code = message.rank, message.code
        self._exited_ranks.add(rank)
        if code != 0 and rank in self._peer_gone and self._first_failed not in (None, rank):
            after = self._first_failed
            self.model.on_exit(rank, None, RankState.STOPPED)
            self.add_event(EventKind.RANK_STOPPED, rank, rank_exit_message(rank, code, after), t=message.t,
                           after=after, stopped_by_failure=True)
            return
        if code != 0 and self._first_failed is None:
            self._first_failed = rank
        self.model.on_exit(rank, code, RankState.EXITED if code == 0 else RankState.FAILED)
        self.add_event(EventKind.RANK_EXITED if code == 0 else EventKind.RANK_FAILED, rank,
                       rank_exit_message(rank, code), t=message.t, exit_code=code)

    def worker_lost(self, rank: int, t: float) -> None:
        """A worker's connection (to this hub, or to its node's agent) ended without ``exit``.

        After another rank's fatal exception or failed exit, the line says so: torchrun SIGTERMs the
        other ranks then, and one whose connection ends before its exit message reached the hub
        would otherwise read as an unexplained disconnection. Only the two facts are said (it
        disconnected, rank N had failed): how it ended is torchrun's report's, in the summary."""
        if rank in self._exited_ranks:
            return
        after = self._first_failed if self._first_failed not in (None, rank) else None
        if after is None:
            self.add_event(EventKind.CONNECTION_LOST, rank, f"rank {rank} disconnected without an exit message", t=t)
        else:
            self.add_event(EventKind.CONNECTION_LOST, rank, f"rank {rank} disconnected after rank {after} failed",
                           t=t, after=after)
        self.observers.on_worker_lost(rank, t)

    def exited(self, rank: int) -> bool:
        return rank in self._exited_ranks

