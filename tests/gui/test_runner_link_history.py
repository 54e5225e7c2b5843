"""The GUI's link (``gui/gateway/link.py``) reads a big run's whole history from the real hub.

Before history was streamed, a run past ~20,000 metric records was replayed as one line
over the readers' limit and the GUI silently showed an empty history. Here the real hub
(on its own event loop thread, as the runner is its own process) serves a run of
120,000 metric records and 30,000 log lines; the link must deliver every one (the hub's
replay budget is raised to hold them all: by default a replay this big is thinned).
"""

from __future__ import annotations

import asyncio
import os
import random
import threading
from pathlib import Path

import pytest

from gui.gateway.link import RunnerLink
from gui.gateway.run_state import HistoryEnd, HubMessage, UpdateMessage
from rankwatch.protocol import LogLine, MetricRecord
from runner import paths
from runner.hub.hub import Hub
from runner.store.replay_window import DEFAULT_KEEP, ReplayBudget
from runner.store.store import RecordBatch, RunStore

pytestmark = pytest.mark.gui

METRICS = 120_000
LOGS = 30_000


class HubThread:
    """The real hub serving one stored run, on an event loop in a thread of its own."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.socket_path = paths.socket_dir() / f"link-{os.getpid()}-{random.randrange(10**6)}.sock"
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._run, name="test-hub", daemon=True)
        self.hub: Hub | None = None

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_until_complete(self._open())
        self.ready.set()
        self.loop.run_forever()

    async def _open(self) -> None:
        hub = self.hub = Hub(self.folder / "runs.db", "token")
        hub.publisher.replay_budget = ReplayBudget(metric_tail=METRICS, keep=dict(DEFAULT_KEEP, logs=LOGS))
        await hub.create_run({}, run_key="link", profile="t", spec_toml="", command=None, host="h", workdir=None,
                             runner_pid=os.getpid(), socket=None, world_size=4, status="running")

        def fill(store: RunStore, run_id: int) -> None:
            store.write_batch(run_id, RecordBatch(
                metrics=[MetricRecord(i % 4, 1_700_000_000.0 + i / 100, i // 4, "loss", 1.0 / (1 + i), "auto")
                         for i in range(METRICS)],
                logs=[LogLine(i % 4, 1_700_000_000.0 + i / 10, "stdout", f"line {i}", "h") for i in range(LOGS)]))

        await hub.writer.call(fill, hub.run_id)
        await hub.serve_unix(self.socket_path)
        hub.start()

    def start(self) -> HubThread:
        self.thread.start()
        assert self.ready.wait(60)
        return self

    def close(self) -> None:
        assert self.hub is not None
        asyncio.run_coroutine_threadsafe(self.hub.close(reason="succeeded"), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


def test_the_link_reads_a_history_of_a_hundred_thousand_records_whole(qtbot, tmp_path):
    hub = HubThread(tmp_path).start()
    link = RunnerLink()
    counts = {"metrics": 0, "logs": 0, "history_end": 0}

    def on_message(message: HubMessage) -> None:
        if isinstance(message, UpdateMessage):
            counts["metrics"] += len(message.metrics)
            counts["logs"] += len(message.logs)
        elif isinstance(message, HistoryEnd):
            counts["history_end"] += 1

    link.message_received.connect(on_message)
    try:
        link.open(str(hub.socket_path))
        qtbot.waitUntil(lambda: counts["history_end"] == 1, timeout=120_000)
        assert (counts["metrics"], counts["logs"], link.lines_dropped) == (METRICS, LOGS, 0)
    finally:
        link.close()
        hub.close()
