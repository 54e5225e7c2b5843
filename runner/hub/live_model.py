"""The hub's live picture of a run: one row per rank, kept current as records arrive.

It is what the terminal view and the GUI's rank table show (the RANK shape in
``rankwatch._protocol``), derived from the records; the store keeps the records
themselves. Plain Python, no I/O, so it is cheap to test.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any

from rankwatch import _protocol as protocol
from runner.state import RankState

DATA_WAIT_SMOOTHING = 0.3
"""Weight of the newest step in the data-wait share (an EMA: one slow step is not a trend)."""


@dataclass
class RankRow:
    rank: int
    local_rank: int | None = None
    node_rank: int | None = None
    host: str | None = None
    pid: int | None = None
    gpu_index: int | None = None
    state: str = RankState.WAITING.value
    exit_code: int | None = None
    step: int | None = None
    loss: float | None = None
    loss_source: str | None = None
    step_time: float | None = None
    data_wait_share: float | None = None
    samples_per_s: float | None = None
    steps_per_s: float | None = None
    last_seen: float | None = None
    cpu_percent: float | None = None
    rss_bytes: int | None = None
    gpu_util: float | None = None
    gpu_mem_used: int | None = None
    dropped: int = 0
    world_size: int | None = None
    python: str | None = None
    torch: str | None = None
    restart: int | None = None
    last_progress: float | None = None
    """When ``step`` last changed (monotonic wall clock), for stall detection."""
    recent_step_times: list[float] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("recent_step_times")
        return data


LOSS_SOURCE_PRIORITY = {protocol.SOURCE_AUTO: 0, protocol.SOURCE_LOG: 1, protocol.SOURCE_PARSED: 2}
RECENT_STEPS = 50


class LiveModel:
    def __init__(self) -> None:
        self.ranks: dict[int, RankRow] = {}
        self.changed: set[int] = set()

    def row(self, rank: int) -> RankRow:
        row = self.ranks.get(rank)
        if row is None:
            row = self.ranks[rank] = RankRow(rank=rank)
            self.changed.add(rank)
        return row

    def take_changed(self) -> list[dict[str, Any]]:
        rows = [self.ranks[r].to_json() for r in sorted(self.changed) if r in self.ranks]
        self.changed.clear()
        return rows

    def all_rows(self) -> list[dict[str, Any]]:
        return [self.ranks[r].to_json() for r in sorted(self.ranks)]

    def _touch(self, row: RankRow, t: float | None = None) -> None:
        row.last_seen = t if t is not None else time.time()
        self.changed.add(row.rank)

    def on_hello(self, message: dict[str, Any]) -> RankRow:
        row = self.row(int(message["rank"]))
        for key in ("local_rank", "node_rank", "host", "pid", "world_size", "python", "torch", "restart"):
            if message.get(key) is not None:
                setattr(row, key, message[key])
        if row.state in (RankState.WAITING.value, RankState.STOPPED.value, RankState.FAILED.value):
            row.state = RankState.RUNNING.value
            row.exit_code = None
        row.last_progress = time.time()
        self._touch(row)
        return row

    def on_metric(self, rank: int, t: float, step: int | None, name: str, value: float | None, source: str) -> None:
        row = self.row(rank)
        if step is not None and (row.step is None or step > row.step):
            row.step = step
            row.last_progress = time.time()
            if row.state == RankState.STALLED.value:
                row.state = RankState.RUNNING.value
        if name == protocol.LOSS and value is not None:
            current = LOSS_SOURCE_PRIORITY.get(row.loss_source, 9)
            if LOSS_SOURCE_PRIORITY.get(source, 9) <= current or row.loss_source is None:
                row.loss, row.loss_source = value, source
        elif name == protocol.STEP_TIME and value is not None:
            row.step_time = value
            row.recent_step_times.append(value)
            del row.recent_step_times[:-RECENT_STEPS]
        elif name == protocol.DATA_WAIT and value is not None and row.step_time:
            share = min(1.0, max(0.0, value / row.step_time))
            previous = row.data_wait_share
            row.data_wait_share = share if previous is None else (
                DATA_WAIT_SMOOTHING * share + (1 - DATA_WAIT_SMOOTHING) * previous)
        elif name == protocol.SAMPLES_PER_SECOND:
            row.samples_per_s = value
        elif name == protocol.STEPS_PER_SECOND:
            row.steps_per_s = value
        self._touch(row, t)

    def on_metric_batch(self, rank: int, newest: dict[str, tuple], step_times: list[float]) -> None:
        """One worker batch: ``newest`` maps each metric name to its last (t, step, value, source);
        every step time goes into the recent history (stall and straggler detection use it)."""
        if not newest:
            return
        row = self.row(rank)
        if step_times:
            row.recent_step_times.extend(step_times[:-1])  # the last one is added by on_metric below
            del row.recent_step_times[:-RECENT_STEPS]
        # step_time before data_wait: the data-wait share divides by the step time of the same step
        for name in sorted(newest, key=lambda n: n != protocol.STEP_TIME):
            t, step, value, source = newest[name]
            self.on_metric(rank, t, step, name, value, source)

    def on_heartbeat(self, rank: int, t: float, step: int | None, dropped: int | None) -> None:
        row = self.row(rank)
        if step is not None and (row.step is None or step > row.step):
            row.step = step
            row.last_progress = time.time()
        if dropped is not None:
            row.dropped = int(dropped)
        self._touch(row, t)

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

    def on_gpu_use(self, rank: int, gpu_index: int | None, util: float | None, mem_used: int | None) -> None:
        row = self.row(rank)
        row.gpu_index, row.gpu_util, row.gpu_mem_used = gpu_index, util, mem_used
        self.changed.add(rank)

    def pids(self) -> dict[int, int]:
        """rank -> pid for ranks that said hello and have not finished."""
        return {r.rank: r.pid for r in self.ranks.values()
                if r.pid and not RankState(r.state).finished}
