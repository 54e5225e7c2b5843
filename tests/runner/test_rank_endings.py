"""How a rank ended reads the same on every surface (``runner.exit_status``).

The case that used to disagree: rank 1 raises, rank 0's collective then fails
with "Connection closed by peer" and its interpreter announces exit code 1, but torchrun
has already sent it SIGTERM and reports -15. The live line said "rank 0 exited with code 1",
the table "SIGTERM (-15)", and its state was "failed" as if it had failed by itself.
"""

from __future__ import annotations

import io
from collections import Counter

from rankwatch import protocol
from runner.diagnosis.torchrun_report import parse_torchrun_report
from runner.diagnosis.triage import TriageInput, triage
from runner.exit_status import (
    describe_exit_code,
    failure_end_words,
    rank_end_words,
    rank_exit_message,
)
from runner.hub.ingest import Ingest
from runner.hub.live_model import LiveModel
from runner.hub.observer import Observers
from runner.view.terminal import render_summary

PEER_GONE = "[../gloo/transport/tcp/pair.cc:561] Connection closed by peer [127.0.0.1]:40880"
REPORT = """Failures:
[1]:
  time      : 2026-11-22_01:40:41
  host      : localhost
  rank      : 0 (local_rank: 0)
  exitcode  : -15 (pid: 21928)  (SIGTERM)
  error_file: <N/A>
  traceback : Signal 15 (SIGTERM) received by PID 21928
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-11-22_01:40:40
  host      : localhost
  rank      : 1 (local_rank: 1)
  exitcode  : 1 (pid: 21929)
  error_file: <N/A>
  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html
============================================================"""


def echo_input() -> TriageInput:
    data = TriageInput(kernel_log_reader=lambda: [])
    data.hosts = {0: "localhost", 1: "localhost"}
    data.exceptions = {1: {"t": 100.0, "exc_type": "ValueError", "message": "batch 3 has 7 features",
                           "traceback": "Traceback ..."},
                       0: {"t": 100.1, "exc_type": "RuntimeError", "message": PEER_GONE, "traceback": "Traceback ..."}}
    data.exits = {1: (1, 100.0), 0: (1, 100.1)}  # each bootstrap's last word: exit code 1
    data.report = parse_torchrun_report(REPORT.splitlines())
    data.seen = {0, 1}
    return data


def test_a_rank_stopped_after_another_failed_is_worded_so_in_the_summary():
    summary = triage(echo_input(), 1, stopped=False)
    assert summary["first_failure"]["rank"] == 1 and summary["first_failure"].get("after") is None
    [other] = summary["other_failures"]
    assert (other["rank"], other["exit_code"], other["after"]) == (0, -15, 1)  # torchrun's status beats the last word
    assert failure_end_words(other) == "SIGTERM, stopped after rank 1 failed"
    out = io.StringIO()
    render_summary({"id": 7, "status": "failed", "exit_code": 1, "summary": summary}, out)
    assert "  then:          rank 0 (SIGTERM, stopped after rank 1 failed)\n" in out.getvalue()
    assert "first to fail: rank 1 on localhost (exit code 1; known from: exception)" in out.getvalue()


def test_two_ranks_that_failed_each_by_itself_are_both_failures():
    data = echo_input()
    data.exceptions[0]["message"] = "CUDA error: an illegal memory access"
    data.report = None
    summary = triage(data, 1, stopped=False)
    [other] = summary["other_failures"]
    assert other.get("after") is None and failure_end_words(other) == "exit code 1"


def ingest() -> tuple[Ingest, LiveModel]:
    model = LiveModel()
    return Ingest(model, Observers(), Counter(), lambda urgent: None, lambda: None), model


def test_the_live_line_of_a_rank_ended_by_a_peers_failure_says_it_was_stopped_and_claims_no_code():
    hub, model = ingest()
    hub.message(protocol.ExceptionReport(1, 100.0, "ValueError", "batch 3 has 7 features", "tb", "MainThread", True))
    hub.message(protocol.Exit(1, 100.0, 1))
    hub.message(protocol.ExceptionReport(0, 100.1, "RuntimeError", PEER_GONE, "tb", "MainThread", True))
    hub.message(protocol.Exit(0, 100.1, 1))
    events = [(event.kind, event.rank, event.message) for event in hub.take_batch().events]
    assert events == [("exception", 1, "ValueError: batch 3 has 7 features"), ("rank_failed", 1, "rank 1 exited with code 1"),
                      ("exception", 0, f"RuntimeError: {PEER_GONE}"),
                      ("rank_stopped", 0, "rank 0 stopped after rank 1 failed")]
    rows = {rank: row for rank, row in model.ranks.items()}
    assert (rows[1].state, rows[1].exit_code) == ("failed", 1)
    # Not "1": torchrun's report (its SIGTERM) gives the code at the end, so the table never contradicts it.
    assert (rows[0].state, rows[0].exit_code) == ("stopped", None)
    assert describe_exit_code(rows[0].exit_code) == "–"


def test_every_form_of_one_ending_comes_from_one_module():
    assert rank_end_words(-15, "SIGTERM", after=1) == "SIGTERM, stopped after rank 1 failed"
    assert rank_end_words(None, None, after=1) == "stopped after rank 1 failed"
    assert rank_end_words(-9, "SIGKILL") == "SIGKILL"
    assert rank_exit_message(0, 1, after=1) == "rank 0 stopped after rank 1 failed"
    assert rank_exit_message(0, None, stopped_by_failure=True) == "rank 0 stopped after another rank failed"
    assert rank_exit_message(1, 1) == "rank 1 exited with code 1"
    assert describe_exit_code(-15) == "SIGTERM (-15)"


def test_a_rank_whose_peer_finished_its_script_is_the_failure_not_stopped_after_one():
    """A collective the peer never entered (it ran to its end, exit 0): the same "Connection closed by
    peer", but no rank failed before it, so it failed itself (triage: a mismatched collective)."""
    hub, model = ingest()
    hub.message(protocol.Exit(1, 100.0, 0))
    hub.message(protocol.ExceptionReport(0, 100.1, "RuntimeError", PEER_GONE, "tb", "MainThread", True))
    hub.message(protocol.Exit(0, 100.1, 1))
    assert [event.message for event in hub.take_batch().events][-1] == "rank 0 exited with code 1"
    assert (model.ranks[0].state, model.ranks[0].exit_code) == ("failed", 1)


def test_a_rank_whose_connection_ends_after_another_rank_failed_says_so_not_an_unexplained_loss():
    """Seen in CI: torchrun's SIGTERM reached rank 0 before its exit message left, after rank 1's
    exception; the live line was "rank 0 disconnected without an exit message"."""
    hub, _model = ingest()
    hub.message(protocol.ExceptionReport(1, 100.0, "ValueError", "batch 3 has 7 features", "tb", "MainThread", True))
    hub.worker_lost(0, 100.1)
    lost = hub.take_batch().events[-1]
    assert (lost.kind, lost.rank, lost.message) == ("connection_lost", 0, "rank 0 disconnected after rank 1 failed")
    assert lost.fields.get("after") == 1


def test_a_connection_lost_with_no_failure_before_it_is_still_unexplained():
    hub, _model = ingest()
    hub.message(protocol.ExceptionReport(1, 100.0, "RuntimeError", "caught and logged", "tb", "Thread-2", False))
    hub.worker_lost(0, 100.1)
    assert hub.take_batch().events[-1].message == "rank 0 disconnected without an exit message"
    hub.worker_lost(1, 100.2)  # the failed rank's own connection: nobody failed before it
    assert hub.take_batch().events[-1].message == "rank 1 disconnected without an exit message"
