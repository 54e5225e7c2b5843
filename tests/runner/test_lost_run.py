"""What the watchdog records when the runner died without recording the end
(``runner.store.lost_run``): lost, when, how, and a count of what the store holds of the run.
A real store; the SIGKILL of a real runner is in tests/integration/test_failures_and_stops.py."""

from __future__ import annotations

import io

from rankwatch.protocol import LogLine, MetricRecord
from runner.diagnosis.summary import RunSummary
from runner.rank_failure import describe_losses
from runner.store.lost_run import record_lost_run
from runner.store.store import RecordBatch, RunStore
from runner.view.terminal import render_summary


def test_a_lost_run_says_when_and_how_and_counts_what_was_stored(tmp_path):
    path = tmp_path / "runs.db"
    with RunStore(path) as store:
        run_id = store.create_run(run_key="k" * 24, profile=None, spec_toml="", command=None, host="h",
                                  workdir=None, runner_pid=4242, socket=None, world_size=3, status="running")
        store.write_batch(run_id, RecordBatch(
            metrics=[MetricRecord(0, 10.0, 1, "loss", 1.0, "auto"), MetricRecord(0, 11.0, 2, "loss", 0.9, "auto"),
                     MetricRecord(1, 10.5, 1, "loss", 1.1, "log"), MetricRecord(1, 12.0, None, "loss", 1.0, "parsed")],
            logs=[LogLine(0, 12.5, "stdout", "hello", "h")]),
            # rank 0's worker sent 2 (both stored); rank 1's sent 3 (1 stored: the parsed one is the runner's);
            # rank 2 dropped 5 itself
            rank_rows=[(0, {"state": "running", "sent": 2}), (1, {"state": "stalled", "sent": 3}),
                       (2, {"state": "exited", "dropped": 5})])
    assert record_lost_run(str(path), run_id, died=20.0, processes_killed=2)
    with RunStore(path, readonly=True) as store:
        run, ranks = store.stored_run(run_id), {row.rank: row.state for row in store.ranks(run_id)}
    assert (run.status, run.ended) == ("lost", 20.0)
    assert ranks == {0: "lost", 1: "lost", 2: "exited"}  # the finished rank keeps its end
    summary = run.summary
    assert summary is not None
    assert "the runner (pid 4242) died at" in summary["headline"] and "2 process(es) needed SIGKILL" in summary["headline"]
    assert summary["runner_lost"]["stored"] == {"metrics": 4, "logs": 1}
    assert summary["runner_lost"]["newest_record_t"] == 12.5
    assert "cannot be counted" in summary["runner_lost"]["not_stored"]
    assert describe_losses(RunSummary.from_wire(summary).losses, None) == [
        "rank 1: 2 records sent but never received (a connection broke)",
        "rank 2: 5 records dropped by the worker (its queue was full or the runner unreachable)"]
    shown = io.StringIO()
    render_summary(run, shown)  # the end-of-run block (runs show, attach)
    assert "run 1 lost (exit code –)" in shown.getvalue()
    assert "stored:        4 metric records, 1 log lines, the newest from" in shown.getvalue()
    assert "cannot be counted" in shown.getvalue()
    # a run with an end is left as it is
    assert not record_lost_run(str(path), run_id, died=30.0, processes_killed=0)
    with RunStore(path, readonly=True) as store:
        assert store.stored_run(run_id).ended == 20.0
