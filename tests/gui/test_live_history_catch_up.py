"""The GUI gets the history of a big live run while the run streams on.

At 1,024 ranks a few minutes into a run, the monitor never loaded the history: its replay
took longer than the live updates queued behind it could wait, so the hub let them go and
caught the GUI up from the store, and each catch-up was planned as a replay of its own.
Past the replay's budget that read each series whole and sent the budget again, as long as
the first replay took: the live updates overflowed again, three rounds, the GUI was dropped,
its link subscribed again, and the history started over (``tests/bench/PERFORMANCE.md``,
"Scale, second pass").

Here the same, scaled down: the real hub (on its own event loop thread, as the runner is its
own process) holds a stored history past its replay budget (lowered, as the live budget is)
while fake ranks speaking the real protocol stream ~20,000 records a second; the GUI's real
link (``RunnerLink``, Qt offscreen) feeds the real ``MonitorModel``, and the GUI's drawing is
stood in for by 0.1 ms per record applied: slower than the run writes, as the GUI is at
1,024 ranks.
"""

from __future__ import annotations

import asyncio
import math
import time
from pathlib import Path

import pytest
from loop_thread import LoopThread

from gui.gateway.link import RunnerLink
from gui.models.monitor import MonitorModel
from rankwatch import protocol
from rankwatch.protocol import MetricRecord
from runner.hub import publisher
from runner.hub.hub import Hub
from runner.runstate.messages import HubMessage, UpdateMessage
from runner.store.replay_window import ReplayBudget
from runner.store.store import RecordBatch, RunStore
from tests.hubs import hello, open_hub

pytestmark = pytest.mark.gui

RANKS = 8
NAMES = ("loss", "grad_norm", "tokens", "lr")
STORED = 100_000
"""Metric records in the store when the GUI attaches: past the budget below."""
BUDGET = ReplayBudget(metric_tail=4_000, metric_older_points=4_000)
TICK_S = 0.05
STEPS_PER_TICK = 30
"""Each rank sends 30 steps of ``NAMES`` every 50 ms: ~19,000 records a second in all."""
GUI_SECONDS_PER_RECORD = 1e-4


def fill(store: RunStore, run_id: int) -> None:
    """The run's older history, a wave per series, ending 100 s ago."""
    start = time.time() - 100.0 - STORED / 1_000
    store.write_batch(run_id, RecordBatch(metrics=[
        MetricRecord(index % RANKS, start + index / 1_000, index // (RANKS * len(NAMES)),
                     NAMES[(index // RANKS) % len(NAMES)], math.sin(index / 997), "auto")
        for index in range(STORED)]))


async def stream(socket_path: Path, rank: int, stop: asyncio.Event) -> None:
    """One rank's steps, as a worker's reporter sends them, until ``stop``."""
    _reader, writer = await asyncio.open_unix_connection(str(socket_path))
    writer.write(hello(rank))
    step = STORED
    while not stop.is_set():
        now = time.time()
        writer.write(protocol.encode_metric_items(rank, [[now, step + offset, name, float(offset), "auto"]
                                                         for offset in range(STEPS_PER_TICK) for name in NAMES]))
        await writer.drain()
        step += STEPS_PER_TICK
        await asyncio.sleep(TICK_S)
    writer.close()


class StreamingRun:
    """A hub with a stored history past the replay budget, and ranks streaming into it."""

    def __init__(self, folder: Path) -> None:
        self.loop = LoopThread("test-hub")
        self.hub: Hub
        self.socket_path: Path
        self.hub, self.socket_path = self.loop.run(open_hub(folder))
        self.hub.publisher.replay_budget = BUDGET
        self.loop.run(self.hub.writer.call(fill, self.hub.run_id))
        self.stop = self.loop.call(asyncio.Event)
        self.streams = [self.loop.call(asyncio.ensure_future, stream(self.socket_path, rank, self.stop))
                        for rank in range(RANKS)]

    def stats(self) -> dict[str, int]:
        return self.loop.call(lambda: dict(self.hub.stats))

    def close(self) -> None:
        try:
            self.loop.call(self.stop.set)
            self.loop.run(asyncio.wait(self.streams, timeout=5))
            self.loop.run(self.hub.close(reason="succeeded"))
        finally:
            self.loop.stop()


def test_a_gui_slower_than_the_stream_gets_the_history_of_a_big_live_run_and_stays_live(
        qtbot, tmp_path, monkeypatch):
    monkeypatch.setattr(publisher, "DISCONNECT_ABOVE_BYTES", 512 << 10)  # as 16 MiB is at 1,024 ranks
    monkeypatch.setattr(publisher, "DECIMATE_ABOVE_BYTES", 128 << 10)
    run = StreamingRun(tmp_path)
    model = MonitorModel()
    link = RunnerLink(reconnect_attempts=3, retry_interval_ms=50)
    subscribed = []

    def draw(message: HubMessage) -> None:
        if isinstance(message, UpdateMessage):
            time.sleep(GUI_SECONDS_PER_RECORD * len(message.metrics))

    link.subscribed.connect(lambda: subscribed.append(time.monotonic()))
    link.message_received.connect(model.apply)
    link.message_received.connect(draw)
    try:
        qtbot.wait(1_000)  # the run streams before the GUI attaches
        link.open(str(run.socket_path))
        qtbot.waitUntil(lambda: model.history_done, timeout=30_000)
        at_end = model.points_total
        qtbot.waitUntil(lambda: model.points_total > at_end + 5_000, timeout=10_000)  # the stream goes on

        stats = run.stats()
        assert len(subscribed) == 1, f"the hub dropped the GUI, which subscribed {len(subscribed)} times: {stats}"
        assert stats.get("subscribers_dropped", 0) == 0, stats
        assert stats.get("replay_catch_ups", 0) >= 1, f"the replay did not outlast the live budget: {stats}"
        end = model.state.history_end
        assert end is not None and end.decimated and end.left_out.get("metrics", 0) > 0
        assert link.is_connected()
    finally:
        link.close()
        run.close()
