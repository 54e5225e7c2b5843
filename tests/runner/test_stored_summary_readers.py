"""A run summary stored by an earlier version reads through ``RunSummary.from_wire`` into typed parts
(``FinishedRank``, ``RankLosses``, ``LostRunner``, ``StoredDiagnostics``) and prints the lines it
always printed: keys this version does not know are kept, keys an earlier version did not write are
left out, and a summary the store kept as JSON text reads too."""

from __future__ import annotations

import io
import json
import time

from runner.diagnosis.findings import StacksFinding, StoredDiagnostics
from runner.diagnosis.summary import FinishedRank, LostRunner, RunSummary
from runner.rank_failure import RankLosses
from runner.view.terminal import render_summary

OLD_FAILED = {  # no outcome, no exit_code, no hints' keys, a stacks block without a verdict, unknown keys
    "headline": "rank 0 was killed",
    "first_failure": {"rank": 0, "exit_code": -9, "signal": "SIGKILL", "evidence": "exit code",
                      "kernel_log": "Out of memory: Killed process 4", "traceback": "a\nb\nc\nd\ne\nf\ng\nh",
                      "traceback_source": "bootstrap", "from_the_future": 3},
    "other_failures": [{"rank": 1, "exit_code": 1}],
    "finished": [{"rank": 2, "before": 3}] + [{"rank": rank, "before": 0.1} for rank in range(3, 12)],
    "diagnostics": {
        "stalls": [{"rank": 0, "step": 5, "since": 10.0, "seconds": 31.2, "threshold": 30.0, "resumed_after": None},
                   {"rank": 1, "step": 5, "since": 10.0, "seconds": 30.4, "threshold": 30.0, "resumed_after": None}],
        "stacks": {"reason": "requested", "path": "/tmp/c.txt",
                   "outlier": {"ranks": [1, 2], "frame": {"file": "/a/b/train.py", "line": 36, "function": "step"}}},
        "bottleneck": {"verdict": "straggler", "evidence": "e", "rank": 2, "phase": "forward", "action": None},
        "consistency_checks": 7, "unknown_block": 1},
    "losses": [{"rank": 3, "dropped": 2}],
    "unknown": {"x": 1},
    "hints": [{"key": "k", "cause": "c", "advice": "a"}],
}

OLD_FAILED_LINES = [
    "",
    "── Rankwatch · run 3 failed (exit code 137) ────────────────────────────",
    "rank 0 was killed",
    "  first to fail: rank 0 (SIGKILL; known from: exit code)",
    "  traceback (last lines):",
    "    c", "    d", "    e", "    f", "    g", "    h",
    "  kernel log:    Out of memory: Killed process 4",
    "  then:          rank 1 (exit code 1)",
    "  finished:      rank 2 (exit code 0, 3.00 s before rank 0 failed), "
    + ", ".join(f"rank {rank} (exit code 0, 0.10 s before rank 0 failed)" for rank in range(3, 10)) + " ...",
    "  stalled:       ranks 0, 1 at step 5 (no progress for 30 s, threshold 30 s; never resumed)",
    "  stacks:        ranks 1, 2 differs at /a/b/train.py:36 in step",
    "                 (every thread: /tmp/c.txt; again: rankwatch stacks 3)",
    "  bottleneck:    a straggler: rank 2 (forward)",
    "  parameters:    identical on every rank at all 7 checks",
    "  not stored:    rank 3: 2 records dropped by the worker (its queue was full or the runner unreachable)",
    "  hint: c",
    "        -> a",
    "  details: rankwatch runs show 3   logs: rankwatch runs logs 3",
]


def _printed(run: dict) -> list[str]:
    out = io.StringIO()
    render_summary(run, out)
    return out.getvalue().split("\n")[:-1]


def test_a_failed_runs_summary_of_an_earlier_version_prints_the_lines_it_always_did():
    assert _printed({"id": 3, "status": "failed", "exit_code": 137, "summary": OLD_FAILED}) == OLD_FAILED_LINES


def test_an_earlier_versions_summary_reads_into_typed_parts_and_keeps_unknown_keys():
    summary = RunSummary.from_wire(OLD_FAILED)
    assert summary.finished[0] == FinishedRank(rank=2, before=3.0)
    assert summary.losses == (RankLosses(rank=3, dropped=2),)
    assert isinstance(summary.diagnostics, StoredDiagnostics)
    assert isinstance(summary.diagnostics.stacks, StacksFinding)
    assert summary.diagnostics.stacks.outlier is not None and summary.diagnostics.stacks.outlier.ranks == [1, 2]
    assert summary.extra == {"unknown": {"x": 1}}
    assert summary.to_wire()["unknown"] == {"x": 1}
    assert summary.first_failure is not None and summary.first_failure.signal == "SIGKILL"


def test_a_lost_runs_summary_reads_its_runner_lost_block_typed_and_prints_what_was_stored():
    stored = {"outcome": "lost", "headline": "the runner died",
              "runner_lost": {"runner_pid": 4, "died": 20.0, "processes_killed": 1, "stored": {"metrics": 4, "logs": 1},
                              "newest_record_t": 12.5, "not_stored": "what the workers had not sent cannot be counted"},
              "losses": [{"rank": 1, "dropped": 0, "rejected": 0, "not_received": 2}]}
    summary = RunSummary.from_wire(stored)
    assert summary.runner_lost == LostRunner(runner_pid=4, died=20.0, processes_killed=1, stored_metrics=4,
                                             stored_logs=1, newest_record_t=12.5,
                                             not_stored="what the workers had not sent cannot be counted")
    assert summary.extra == {}
    assert summary.to_wire()["runner_lost"] == stored["runner_lost"]  # the stored shape, unchanged
    newest = time.strftime("%H:%M:%S", time.localtime(12.5))
    assert _printed({"id": 13, "status": "lost", "exit_code": None, "summary": stored}) == [
        "",
        "── Rankwatch · run 13 lost (exit code –) ───────────────────────────────",
        "the runner died",
        "  not stored:    rank 1: 2 records sent but never received (a connection broke)",
        f"  stored:        4 metric records, 1 log lines, the newest from {newest}",
        "  not stored:    what the workers had not sent cannot be counted",
        "  details: rankwatch runs show 13   logs: rankwatch runs logs 13",
    ]
    partial = {"id": 15, "status": "lost", "summary": {"runner_lost": {"stored": {"metrics": 3}}}}
    assert "  stored:        3 metric records, – log lines" in _printed(partial)


def test_a_summary_the_store_kept_as_json_text_prints_like_an_object():
    summary = {"headline": "stored as text", "first_failure": {"rank": 0, "exit_code": 1, "evidence": "exit code"},
               "other_failures": [{"exit_code": -15}]}  # a failure without its rank is left out, not a KeyError
    as_object = _printed({"id": 17, "status": "failed", "exit_code": 1, "summary": summary})
    assert _printed({"id": 17, "status": "failed", "exit_code": 1, "summary": json.dumps(summary)}) == as_object
    assert as_object[2:4] == ["stored as text", "  first to fail: rank 0 (exit code 1; known from: exit code)"]


def test_a_fresh_summarys_typed_parts_write_the_shape_they_read():
    wire = {"outcome": "failed", "headline": "h", "exit_code": 1, "first_failure": None, "other_failures": [],
            "hints": [], "finished": [{"rank": 2, "before": 0.5}],
            "diagnostics": {"stalls": [{"rank": 0, "step": 3, "since": 1.0, "seconds": 31.0, "threshold": 30.0,
                                        "resumed_after": None}], "consistency_checks": 2},
            "losses": [{"rank": 1, "dropped": 3, "rejected": 0, "not_received": 0}], "store_incomplete": "disk full",
            "slurm": {"state": "FAILED"}}
    assert RunSummary.from_wire(wire).to_wire() == wire
    assert list(RunSummary.from_wire(wire).to_wire()) == list(wire)  # and in the same key order
