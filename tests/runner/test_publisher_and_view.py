"""Per-subscriber delivery (queueing during replay, decimation when behind) and the terminal view."""

from __future__ import annotations

import io

from runner.hub.publisher import DECIMATE_ABOVE_BYTES, Subscriber, decimate_metrics
from runner.runstate.messages import LogLine, MetricRecord, RankInfo, RunInfo, SnapshotMessage
from runner.view.terminal import TerminalView, render_summary
from tests.hub_messages import update


class RecordingSubscriber(Subscriber):
    def __init__(self, backlog: int = 0):
        super().__init__()
        self.backlog = backlog
        self.sent: list[dict] = []

    def backlog_bytes(self) -> int:
        return self.backlog

    def send(self, message: dict) -> None:
        self.sent.append(message)


def metrics(count: int, ranks: int = 2) -> list[MetricRecord]:
    return [MetricRecord(i % ranks, float(i), i // ranks, "loss", float(i), "auto") for i in range(count)]


def test_decimation_keeps_every_series_last_point():
    rows = metrics(1000)
    thinned = decimate_metrics(rows, keep_per_series=8)
    assert 16 <= len(thinned) <= 20
    for rank in (0, 1):
        assert [r for r in rows if r[0] == rank][-1] in thinned


def test_a_subscriber_that_falls_behind_gets_thinned_updates_marked_decimated():
    slow = RecordingSubscriber(backlog=DECIMATE_ABOVE_BYTES + 1)
    slow.live = True
    slow.deliver_update(1, update(metrics=metrics(1000)).to_wire())
    [message] = slow.sent
    assert message["decimated"] is True and len(message["metrics"]) < 100


def test_updates_during_a_replay_are_queued_and_deduplicated():
    subscriber = RecordingSubscriber()
    subscriber.deliver_update(1, update(metrics=[MetricRecord(0, 1.0, 1, "loss", 1.0, "auto")]).to_wire())
    subscriber.deliver_update(2, update(metrics=[MetricRecord(0, 2.0, 2, "loss", 2.0, "auto")]).to_wire())
    assert subscriber.sent == []
    subscriber.go_live(replayed_through=1)  # the replay already held batch 1
    assert [m["metrics"][0][2] for m in subscriber.sent] == [2]


def test_a_batch_the_history_held_is_not_sent_live_when_published_after_the_subscriber_went_live():
    # The hub notes a commit on its writer's thread, then publishes it on the event loop: a
    # subscriber that reads its history from the store can go live in between, through that batch.
    subscriber = RecordingSubscriber()
    subscriber.go_live(replayed_through=3)
    for seq in (3, 4):
        subscriber.deliver_update(seq, update(metrics=[MetricRecord(0, float(seq), seq, "loss", 1.0, "auto")]).to_wire())
    assert [m["metrics"][0][2] for m in subscriber.sent] == [4]


def rank_row(rank: int, **fields) -> RankInfo:
    row = {"state": "running", "step": 10, "loss": 0.5 + rank, "step_time": 0.02, "data_wait_share": 0.4,
           "samples_per_s": 1600.0, "cpu_percent": 95.0, "rss_bytes": 700 << 20, "host": "h", **fields}
    return RankInfo(rank=rank, **row)


def test_live_table_shows_a_row_per_rank():
    out = io.StringIO()
    view = TerminalView(live=False, out=out)
    view.handle(SnapshotMessage(RunInfo(id=4, profile="p", status="running"),
                                (rank_row(0), rank_row(1, state="stalled"))).to_wire())
    from rich.console import Console

    console = Console(file=io.StringIO(), width=160)
    console.print(view._table())
    table = console.file.getvalue()
    assert "run 4 · p · hung" in table  # running, rank 1 stalled: hung, as the GUI and History say
    assert "0.5000" in table and "1.5000" in table and "40%" in table and "stalled" in table and "20.0" in table


def test_plain_mode_prefixes_lines_with_rank_and_stream():
    out, err = io.StringIO(), io.StringIO()
    view = TerminalView(live=False, out=out, err=err, status_every=0)
    view.handle(update(logs=[LogLine(1, 0.0, "stdout", "hello", "h"), LogLine(None, 0.0, "stderr", "W torchrun", "h"),
                             LogLine(0, 0.0, "stderr", "[rank0]: Traceback", "h")]).to_wire())
    assert out.getvalue() == "[rank 1] hello\n"
    assert err.getvalue() == "[torchrun] W torchrun\n[rank 0] Traceback\n"


def test_summary_names_the_first_failure_and_hints():
    out = io.StringIO()
    render_summary({"id": 7, "status": "failed", "exit_code": 1, "summary": {
        "headline": "rank 1 on h failed first (exit code 1): ValueError: x",
        "first_failure": {"rank": 1, "host": "h", "exit_code": 1, "signal": None, "evidence": "exception",
                          "exception_line": "ValueError: x", "traceback": "Traceback...\nValueError: x"},
        "other_failures": [{"rank": 0, "signal": "SIGTERM", "exit_code": -15}],
        "hints": [{"key": "k", "cause": "a cause", "advice": "do this"}]}}, out)
    text = out.getvalue()
    assert "run 7 failed (exit code 1)" in text and "first to fail: rank 1 on h (exit code 1" in text
    assert "then:          rank 0 (SIGTERM)" in text and "hint: a cause" in text and "-> do this" in text
