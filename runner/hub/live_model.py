"""The hub's live picture of a run: one row per rank, kept current as records arrive.

It is what the terminal view and the GUI's rank table show (the RANK shape,
``rankwatch.protocol.RankRow``), derived from the records; the store keeps the
records themselves. Plain Python, no I/O, so it is cheap to test.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from rankwatch import protocol
from rankwatch.protocol import MetricRow, PhaseWindow, RankRow, StepPairs
from runner.rows import JsonObject
from runner.state import RankState

RECENT_STEPS = 50
_GPU_MEMORY_FIELDS = {protocol.GPU_MEMORY_ALLOCATED: "gpu_mem_allocated", protocol.GPU_MEMORY_RESERVED: "gpu_mem_reserved",
                      protocol.GPU_MEMORY_PEAK: "gpu_mem_peak"}
_ROW_NAMES = frozenset({protocol.LOSS, protocol.STEP_TIME, protocol.SAMPLES_PER_SECOND, protocol.PHASE_CLOCK,
                        protocol.SKIPPED_STEP, protocol.DATA_WAIT, *_GPU_MEMORY_FIELDS})
"""The metrics a rank row shows something of; any other record only moves the rank's step."""


class LiveRank(RankRow):
    """A RANK row plus what only the hub needs to keep it current."""

    __slots__ = ("last_progress", "last_working", "recent_step_times", "pairs", "phases", "received",
                 "gpu_mem_used_peak")

    def __init__(self, rank: int) -> None:
        super().__init__(rank)
        self.received = 0
        """Metric items of this rank the hub decoded (stored or rejected): compared with ``sent``."""
        self.last_progress: float | None = None
        """When ``step`` last changed (wall clock), for stall detection."""
        self.last_working: float | None = None
        """When a heartbeat last said the rank works without steps (evaluating...): not stalled."""
        self.recent_step_times: list[float] = []
        self.pairs = StepPairs()
        """This rank's step_time and data_wait records, paired into the data-wait share."""
        self.phases = PhaseWindow()
        """The phases of its recent measured steps: ``phase_shares`` and ``comm_wait_share``."""
        self.gpu_mem_used_peak: int | None = None
        """The most GPU memory NVML saw the rank's process hold at a sample (bytes; the store's
        ``ranks.gpu_mem_used_peak``): ``gpu_mem_used`` is only the newest sample's."""


class LiveModel:
    def __init__(self) -> None:
        self.ranks: dict[int, LiveRank] = {}
        self.changed: set[int] = set()
        self.gpu_read_at: dict[int, float] = {}
        """rank -> when NVML last read its GPU (``on_gpu_use``): a reading is evidence only for the
        time it covers (``bottleneck``: not a reading from before the rank's first step)."""

    def row(self, rank: int) -> LiveRank:
        row = self.ranks.get(rank)
        if row is None:
            row = self.ranks[rank] = LiveRank(rank)
            row.first_seen = time.time()
            self.changed.add(rank)
        return row

    def take_changed(self) -> list[LiveRank]:
        rows = [self.ranks[rank] for rank in sorted(self.changed) if rank in self.ranks]
        self.changed.clear()
        return rows

    def mark_all_changed(self) -> None:
        """Every rank's row goes out at the next flush (one a full store refused may fit now)."""
        self.changed.update(self.ranks)

    def all_rows(self) -> list[JsonObject]:
        """Every rank's RANK row as sent (a snapshot), by rank."""
        return [self.ranks[rank].to_wire() for rank in sorted(self.ranks)]

    def _touch(self, row: LiveRank, t: float | None = None) -> None:
        row.last_seen = t if t is not None else time.time()
        self.changed.add(row.rank)

    def on_hello(self, hello: protocol.Hello) -> LiveRank:
        row = self.row(hello.rank)
        for key in ("local_rank", "node_rank", "host", "pid", "world_size", "python", "torch", "restart"):
            value = getattr(hello, key)
            if value is not None:
                setattr(row, key, value)
        if row.state in (RankState.WAITING.value, RankState.STOPPED.value, RankState.FAILED.value):
            row.state = RankState.RUNNING.value
            row.exit_code = None
        row.last_progress = time.time()
        row.working_since = None
        self._touch(row)
        return row

    def on_metric(self, rank: int, t: float, step: int | None, name: str, value: float | None, source: str) -> None:
        row = self.row(rank)
        self._take_record(row, t, step, name, value, source)
        self._touch(row, t)

    def _take_record(self, row: LiveRank, t: float, step: int | None, name: str, value: float | None,
                     source: str) -> None:
        """What one record changes in ``row``, its ``last_seen`` aside."""
        if step is not None and (row.step is None or step > row.step):
            row.step = step
            row.last_progress = time.time()
            row.working_since = None
            if row.state == RankState.STALLED.value:
                row.state = RankState.RUNNING.value
        if name not in _ROW_NAMES:
            return
        if name == protocol.LOSS and value is not None:
            current = protocol.SOURCE_PRIORITY.get(row.loss_source or "", 9)
            if protocol.SOURCE_PRIORITY.get(source, 9) <= current or row.loss_source is None:
                row.loss, row.loss_source = value, source
        elif name == protocol.STEP_TIME and value is not None:
            row.step_time = value
            row.steps_per_s = 1.0 / value if value > 0 else None  # not sent: derived here
            row.recent_step_times.append(value)
            del row.recent_step_times[:-RECENT_STEPS]
        elif name == protocol.SAMPLES_PER_SECOND:
            row.samples_per_s = value
        elif name == protocol.PHASE_CLOCK and source == protocol.SOURCE_AUTO:
            row.phase_clock = protocol.clock_name(value)
        elif name == protocol.SKIPPED_STEP and source == protocol.SOURCE_AUTO:
            row.skipped_steps += 1
        elif name in _GPU_MEMORY_FIELDS and source == protocol.SOURCE_AUTO and value is not None:
            setattr(row, _GPU_MEMORY_FIELDS[name], int(value))
        if name == protocol.STEP_TIME or name == protocol.DATA_WAIT:
            paired = row.pairs.add(step, t, name, value)
            if paired is not None:
                row.data_wait_share = paired[2]

    def on_metric_batch(self, rank: int, records: list[MetricRow], rejected: int = 0) -> None:
        """One worker batch: each series' newest record updates the row; every step time goes
        into the recent history (stall and straggler detection use it).

        The hot path (a step row is 13 records, thousands of batches a second at 1,024 ranks):
        the row is looked up and touched once a batch, and a record whose name the row does not
        show (the phases, compute time...) only moves the step."""
        if rejected:
            self.row(rank).received += rejected
        if not records:
            return
        newest = {record[3]: record for record in records}
        skipped = protocol.SKIPPED_STEP
        row = self.row(rank)
        if skipped in newest:
            newest_skipped = newest[skipped]
            for record in records:  # every skipped step counts, not only the newest
                if record[3] == skipped and record[5] == protocol.SOURCE_AUTO and record is not newest_skipped:
                    row.skipped_steps += 1
        measured = protocol.phases_by_step(records)
        if measured:
            for number in sorted(measured):
                row.phases.add(measured[number])
            row.phase_shares = row.phases.shares()
            row.comm_wait_share = None if row.phase_shares is None else row.phase_shares.get("comm")
        step_time = protocol.STEP_TIME
        row.received += len(records)
        if step_time in newest:
            step_times = [record[4] for record in records if record[3] == step_time and record[4] is not None]
            if step_times:
                row.recent_step_times.extend(step_times[:-1])  # the last one is added by _take_record below
                del row.recent_step_times[:-RECENT_STEPS]
            # step_time before data_wait: the share pairs them by step, in either order, but the
            # row's step time should be the one of the step the share belongs to
            names: Iterable[str] = [step_time, *(name for name in newest if name != step_time)]
        else:
            names = newest
        take, row_names = self._take_record, _ROW_NAMES
        for name in names:
            record = newest[name]
            step = record[2]
            if name in row_names or (step is not None and (row.step is None or step > row.step)):
                take(row, record[1], step, name, record[4], record[5])
        row.last_seen = record[1]
        self.changed.add(rank)

    def on_heartbeat(self, heartbeat: protocol.Heartbeat) -> None:
        row = self.row(heartbeat.rank)
        step = heartbeat.step
        if step is not None and (row.step is None or step > row.step):
            row.step = step
            row.last_progress = time.time()
            row.working_since = None
        if heartbeat.working:
            row.last_working = time.time()
            if row.working_since is None:
                row.working_since = row.last_progress if row.last_progress is not None else row.last_working
        elif heartbeat.working is False:
            row.working_since = None
        if heartbeat.dropped is not None:
            row.dropped = heartbeat.dropped
        if heartbeat.sent is not None:
            row.sent = heartbeat.sent
        self._touch(row, heartbeat.t)

    def on_rejected(self, rank: int, count: int) -> None:
        row = self.row(rank)
        row.rejected += count
        self.changed.add(rank)

    def on_exit(self, rank: int, code: int | None, state: RankState) -> None:
        row = self.row(rank)
        row.exit_code = code
        row.state = state.value
        self._touch(row)

    def set_state(self, rank: int, state: RankState) -> None:
        row = self.row(rank)
        if row.state != state.value:
            row.state = state.value
            self.changed.add(rank)

    def on_process_sample(self, rank: int, cpu_percent: float | None, rss: int | None) -> None:
        row = self.row(rank)
        row.cpu_percent, row.rss_bytes = cpu_percent, rss
        self.changed.add(rank)

    def on_gpu_use(self, rank: int, gpu_index: int | None, util: float | None, mem_used: int | None,
                   t: float | None = None) -> None:
        """NVML's reading of the rank's GPU, taken at ``t`` (now when None)."""
        row = self.row(rank)
        row.gpu_index, row.gpu_util, row.gpu_mem_used = gpu_index, util, mem_used
        self.gpu_read_at[rank] = time.time() if t is None else t
        if mem_used is not None and (row.gpu_mem_used_peak is None or mem_used > row.gpu_mem_used_peak):
            row.gpu_mem_used_peak = mem_used
        self.changed.add(rank)

    def pids(self) -> dict[int, int]:
        """rank -> pid for ranks that said hello and have not finished."""
        return {row.rank: row.pid for row in self.ranks.values()
                if row.pid and not RankState(row.state).finished}
