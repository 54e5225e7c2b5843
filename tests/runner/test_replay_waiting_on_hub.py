"""A subscriber whose history replay waits on the hub (planning the window, reading the store)
is not "behind": when the live updates queued meanwhile pass its budget, they are let go and it
is caught up from the store; only one the replay waits on, and that took nothing for
``CATCH_UP_READ_SECONDS``, is dropped.

At 1,024 ranks on a busy machine the hub took seconds before it sent the GUI a replay line;
the GUI, idle, was dropped as one that "stopped reading while it loaded the run's history",
subscribed again, and never got its history (``tests/bench/PERFORMANCE.md``).
"""

from __future__ import annotations

import time

from runner.hub import publisher
from runner.hub.publisher import CATCH_UP_READ_SECONDS, DropReason, Subscriber
from runner.runstate.messages import MetricRecord
from tests.hub_messages import update


class RecordingSubscriber(Subscriber):
    def __init__(self) -> None:
        super().__init__()
        self.sent: list[dict] = []

    def send(self, message: dict) -> None:
        self.sent.append(message)


def live_update(step: int) -> dict:
    return update(metrics=[MetricRecord(rank, float(step), step, "loss", 1.0, "auto") for rank in range(64)]).to_wire()


def test_past_the_budget_live_updates_are_let_go_while_the_hub_reads_and_a_stalled_reader_is_dropped(monkeypatch):
    monkeypatch.setattr(publisher, "DISCONNECT_ABOVE_BYTES", 2_000)
    waiting_for_hub = RecordingSubscriber()  # its replay has not sent a line yet
    for step in range(10):
        waiting_for_hub.deliver_update(step, live_update(step))
    assert waiting_for_hub.dropped is None and not waiting_for_hub.closed
    assert waiting_for_hub.missed_live and waiting_for_hub.queued_bytes < 2_000  # caught up after the replay

    stalled = RecordingSubscriber()  # the replay waits on it, and it took nothing lately
    stalled.replay_waits_on_it = True
    stalled.read_progress_at = time.monotonic() - CATCH_UP_READ_SECONDS - 1
    for step in range(10):
        stalled.deliver_update(step, live_update(step))
    assert stalled.dropped is not None and stalled.dropped.reason is DropReason.BEHIND
