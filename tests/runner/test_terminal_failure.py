"""A failure on the terminal: Rankwatch's summary, not torchrun's report of it nor the survivors'
echoes; every line still in the run's log, shown there with one prefix as on the terminal."""

from __future__ import annotations

import io
import time

from rankwatch.protocol import LogLine
from runner.cli.main import main
from runner.runstate.messages import Bye, Event, RankInfo, RunInfo, SnapshotMessage
from runner.store.store import RecordBatch, RunStore
from runner.view.terminal import TerminalView
from tests.hub_messages import rank_changes, run_changes, update

CHILD_FAILED_REPORT = [  # the end of torchrun's output once rank 1 failed (torch 2.x, abridged)
    "W1126 api.py:1028] Sending process 32082 closing signal SIGTERM",
    "E1126 api.py:1002] failed (exitcode: 1) local_rank: 1 (pid: 32083) of binary: /usr/bin/python",
    "Traceback (most recent call last):",
    '  File "/usr/lib/python3/torch/distributed/launcher/api.py", line 386, in launch_agent',
    "    raise ChildFailedError(",
    "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
    "============================================================",
    "Root Cause (first observed failure):",
    "[0]:",
    "  rank      : 1 (local_rank: 1)",
    "============================================================",
]
RANK1_TRACEBACK = ["[rank1]: Traceback (most recent call last):",
                   '[rank1]:   File "train.py", line 10, in check_batch',
                   "[rank1]: ValueError: bad batch shape on rank 1"]
RANK0_ECHO = ["[rank0]: Traceback (most recent call last):",
              '[rank0]:   File "train.py", line 21, in <module>',
              "[rank0]:     model(batch).pow(2).mean().backward()",
              "[rank0]: RuntimeError: [gloo/transport/tcp/pair.cc:561] Connection closed by peer [127.0.0.1]:40880"]


def snapshot() -> dict:
    return SnapshotMessage(RunInfo(id=7, profile="p", status="running", started=1000.0),
                           tuple(RankInfo(rank=r, state="running", step=10, loss=0.5) for r in (0, 1)),
                           spec={"args": []}).to_wire()


def logs(rank: int | None, lines: list[str], stream: str = "stderr") -> list[LogLine]:
    return [LogLine(rank, 2.0, stream, line, "h") for line in lines]


def failed_run(view: TerminalView, torchrun_first: bool = False) -> None:
    """Rank 1 raises; rank 0 then fails on its dead peer; torchrun reports; the run ends."""
    view.handle(snapshot())
    view.handle(update(logs=logs(None, ["I1126 torchrun starting 2 workers"])).to_wire())
    if torchrun_first:  # torchrun's notice before the rank's own end reached the hub (a SIGKILL)
        view.handle(update(logs=logs(None, CHILD_FAILED_REPORT[1:2])).to_wire())
    view.handle(update(ranks=[rank_changes(1, state="failed", exit_code=1)],
                       events=[Event(2.0, "rank_failed", 1, "rank 1 exited with code 1")],
                       logs=logs(1, RANK1_TRACEBACK)).to_wire())
    view.handle(update(logs=logs(0, RANK0_ECHO) + logs(None, CHILD_FAILED_REPORT), events=[
        Event(2.1, "connection_lost", 0, "rank 0 disconnected without an exit message")]).to_wire())
    view.handle(update(ranks=[rank_changes(0, state="stopped", exit_code=None)],
                       run=run_changes(id=7, profile="p", status="failed", started=1000.0, ended=1003.0)).to_wire())
    view.handle(Bye("failed").to_wire())


def test_torchruns_report_of_a_failure_stays_off_the_terminal_and_the_last_line_says_where_it_is():
    err = io.StringIO()
    view = TerminalView(live=False, out=io.StringIO(), err=err, status_every=0)
    failed_run(view)
    shown = err.getvalue()
    assert "[torchrun] I1126 torchrun starting 2 workers" in shown  # before the failure: shown as always
    for line in CHILD_FAILED_REPORT:
        assert line.strip() not in shown.replace("[rank 1] Traceback (most recent call last):", ""), line
    assert "ChildFailedError" not in shown and "Root Cause" not in shown and "=====" not in shown
    assert "[rank 1] ValueError: bad batch shape on rank 1" in shown  # the failing rank's own traceback stays
    assert "disconnected" not in shown  # torchrun ending the others is no news: the summary says how each ended
    assert shown.splitlines()[-1] == (f"[rankwatch] torchrun's {len(CHILD_FAILED_REPORT)} line(s) about it, in the "
                                      "run's log: rankwatch runs logs 7 --launcher")


def test_torchruns_failure_notice_hides_its_report_even_before_the_hub_knows_the_rank_failed():
    err = io.StringIO()
    view = TerminalView(live=False, out=io.StringIO(), err=err, status_every=0)
    failed_run(view, torchrun_first=True)
    assert "failed (exitcode: 1)" not in err.getvalue() and "ChildFailedError" not in err.getvalue()
    assert f"torchrun's {len(CHILD_FAILED_REPORT) + 1} line(s)" in err.getvalue()


def test_a_survivors_traceback_that_only_says_its_peer_went_away_is_its_last_line():
    err = io.StringIO()
    view = TerminalView(live=False, out=io.StringIO(), err=err, status_every=0)
    failed_run(view)
    rank0 = [line for line in err.getvalue().splitlines() if line.startswith("[rank 0]")]
    assert rank0 == ["[rank 0] RuntimeError: [gloo/transport/tcp/pair.cc:561] Connection closed by peer "
                     "[127.0.0.1]:40880"]
    assert err.getvalue().splitlines()[-2] == ("[rankwatch] rank 0's traceback only said a peer went away, in the "
                                               "run's log: rankwatch runs logs 7 --rank 0")
    before = io.StringIO()  # no rank has failed yet: nothing to echo, the traceback is shown whole
    view = TerminalView(live=False, out=io.StringIO(), err=before, status_every=0)
    view.handle(snapshot())
    view.handle(update(logs=logs(0, RANK0_ECHO)).to_wire())
    assert before.getvalue().splitlines() == [f"[rank 0] {line.removeprefix('[rank0]: ')}" for line in RANK0_ECHO]


def test_runs_logs_shows_one_prefix_per_line_as_the_terminal_does(capsys):
    with RunStore() as store:
        run_id = store.create_run(run_key="k" * 24, profile="p", spec_toml="", command="torchrun ...", host="h",
                                  workdir="/", runner_pid=1, socket=None, world_size=2, status="failed")
        store.update_run(run_id, started=time.time() - 5, ended=time.time(), exit_code=1)
        for rank in (0, 1):
            store.upsert_rank(run_id, rank, state="failed", exit_code=1, host="h")
        store.write_batch(run_id, RecordBatch(logs=[LogLine(1, 2.0, "stderr", line, "h") for line in RANK1_TRACEBACK]
                                              + [LogLine(None, 3.0, "stderr", line, "h") for line in CHILD_FAILED_REPORT]))
    assert main(["runs", "logs", str(run_id), "--rank", "1"]) == 0
    stored = capsys.readouterr().out.splitlines()
    terminal = io.StringIO()
    view = TerminalView(live=False, out=io.StringIO(), err=terminal, status_every=0)
    view.handle(snapshot())
    view.handle(update(logs=logs(1, RANK1_TRACEBACK)).to_wire())
    assert stored == terminal.getvalue().splitlines() == [
        "[rank 1] Traceback (most recent call last):", '[rank 1]   File "train.py", line 10, in check_batch',
        "[rank 1] ValueError: bad batch shape on rank 1"]
    assert main(["runs", "logs", str(run_id), "--launcher"]) == 0
    assert capsys.readouterr().out.splitlines() == [f"[torchrun] {line}" for line in CHILD_FAILED_REPORT]


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_summary_on_a_terminal_breaks_long_lines_at_words_under_their_label(monkeypatch):
    from runner.view.terminal import render_summary

    monkeypatch.setenv("COLUMNS", "80")
    advice = ("hide or shrink the communication: accumulate gradients (DDP no_sync) to all-reduce less often, "
              "tune DDP's bucket_cap_mb, or compute more per step (a larger batch)")
    run = {"id": 3, "status": "failed", "exit_code": 1, "summary": {
        "headline": "rank 1 on localhost failed first (exit code 1): ValueError: batch 3 on rank 1 has 7 features",
        "hints": [{"key": "k", "cause": "a cause", "advice": advice}]}}
    screen = Terminal()
    render_summary(run, screen)
    lines = screen.getvalue().splitlines()
    assert all(len(line) <= 80 for line in lines), lines
    advice_lines = lines[lines.index("  hint: a cause") + 1:-1]
    assert advice_lines[0].startswith("        -> hide or shrink")
    assert all(line.startswith(" " * 11) for line in advice_lines[1:]), advice_lines
    assert " ".join(line.strip() for line in advice_lines) == f"-> {advice}"  # no word cut in two
    plain = io.StringIO()
    render_summary(run, plain)  # not a terminal (a pipe, a file): one line each, as before
    assert f"        -> {advice}" in plain.getvalue().splitlines()


def test_the_summary_names_ranks_that_ended_alike_once():
    from runner.view.terminal import render_summary

    stopped = [{"rank": rank, "exit_code": -15, "signal": None, "after": 1} for rank in (4, 0, 2, 3, 5, 6, 7)]
    run = {"id": 2, "status": "failed", "exit_code": 1, "summary": {
        "first_failure": {"rank": 1, "exit_code": 1, "evidence": "exception"}, "other_failures": stopped}}
    out = io.StringIO()
    render_summary(run, out)
    assert "  then:          ranks 0, 2-7 (SIGTERM, stopped after rank 1 failed)\n" in out.getvalue()


def test_a_failure_among_1024_ranks_shows_three_echoes_of_each_kind_and_counts_the_rest():
    """Rank 1 raises; the other 1,023 each print a traceback that only says a peer went away and
    stop after it, over several updates. Shown: rank 1's traceback, three echo lines and three
    "stopped" lines, then one count line per kind, not two thousand lines."""
    err = io.StringIO()
    view = TerminalView(live=False, out=io.StringIO(), err=err, status_every=0)
    view.handle(SnapshotMessage(RunInfo(id=7, profile="p", status="running", started=1000.0),
                                tuple(RankInfo(rank=r, state="running", step=10) for r in range(1024)),
                                spec={"args": []}).to_wire())
    view.handle(update(ranks=[rank_changes(1, state="failed", exit_code=1)],
                       events=[Event(2.0, "rank_failed", 1, "rank 1 exited with code 1")],
                       logs=logs(1, RANK1_TRACEBACK)).to_wire())
    others = [rank for rank in range(1024) if rank != 1]
    for start in range(0, len(others), 100):
        batch = others[start:start + 100]
        view.handle(update(
            logs=[line for rank in batch for line in logs(rank, [text.replace("[rank0]", f"[rank{rank}]")
                                                                  for text in RANK0_ECHO])],
            events=[Event(2.1, "rank_stopped", rank, f"rank {rank} stopped after rank 1 failed", {"after": 1})
                    for rank in batch]).to_wire())
    view.handle(Bye("failed").to_wire())
    lines = err.getvalue().splitlines()
    assert len(lines) <= 20, "\n".join(lines[:40])
    assert "[rank 1] ValueError: bad batch shape on rank 1" in lines
    echoes = [line for line in lines if "Connection closed by peer" in line]
    assert [line.split("]")[0] for line in echoes] == ["[rank 0", "[rank 2", "[rank 3"]
    stopped = [line for line in lines if line.endswith("stopped after rank 1 failed")]
    assert stopped == ["[rankwatch] rank 0 stopped after rank 1 failed", "[rankwatch] rank 2 stopped after rank 1 failed",
                       "[rankwatch] rank 3 stopped after rank 1 failed",
                       "[rankwatch] 1,020 more: ranks 4-1023 stopped after rank 1 failed"]
    assert ("[rankwatch] the tracebacks of ranks 0, 2-1023 only said a peer went away, in the run's log: "
            "rankwatch runs logs 7 --rank 0") in lines  # every echo named, as ranges


def test_a_hang_of_every_rank_shows_three_stalls_then_a_count_once_the_burst_is_over():
    from runner.view.bursts import QUIET_SECONDS, Bursts

    now = [100.0]
    err = io.StringIO()
    view = TerminalView(live=False, out=io.StringIO(), err=err, status_every=0)
    view.bursts = Bursts(clock=lambda: now[0])
    view.handle(SnapshotMessage(RunInfo(id=7, profile="p", status="running", started=1000.0),
                                tuple(RankInfo(rank=r, state="running", step=10) for r in range(64)),
                                spec={"args": []}).to_wire())
    view.handle(update(events=[Event(5.0, "stalled", rank, f"rank {rank} stalled at step 10: no progress for "
                                     f"{30 + rank % 3} s (threshold 30 s, the stall timeout)") for rank in range(64)],
                       ranks=[rank_changes(rank, state="stalled") for rank in range(64)]).to_wire())
    assert len(err.getvalue().splitlines()) == 3  # the rest held while the burst goes on
    now[0] += QUIET_SECONDS
    view.handle(update(t=6.0).to_wire())
    lines = err.getvalue().splitlines()
    assert lines[3:] == ["[rankwatch] 61 more: ranks 3-63 stalled"]
    now[0] += 60  # a later stall is a new burst: shown again
    view.handle(update(events=[Event(9.0, "resumed", 5, "rank 5 resumed at step 11 after 40 s")]).to_wire())
    assert err.getvalue().splitlines()[-1] == "[rankwatch] rank 5 resumed at step 11 after 40 s"
