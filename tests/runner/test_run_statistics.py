"""Per-rank statistics of a stored run (`runs show`), from a real store, and the exit-code rule."""

from __future__ import annotations

import json
import signal
import statistics

import pytest

from rankwatch.protocol import Event, MetricRecord
from runner.cli.main import main
from runner.exit_status import (
    EXIT_KILLED,
    EXIT_STOPPED,
    describe_exit_code,
    describe_stop_reason,
    process_exit_code,
    stopped_run_exit_code,
)
from runner.runstate.messages import Bye, RankInfo, RunInfo, SnapshotMessage
from runner.store.rank_stats import run_statistics
from runner.store.store import RecordBatch, RunStore
from tests.hub_messages import run_changes, update

STEP_TIMES = [0.10, 0.12, 0.50, 0.11]  # steps 1..4 (step 0 has no step time: nothing before it)
DATA_WAITS = [0.02, 0.01, 0.01, 0.30, 0.01]  # steps 0..4
SAMPLES = [None, 32 / 0.10, 32 / 0.12, 16 / 0.50, 32 / 0.11]
COMM_WAITS = [0.05, 0.06, 0.01, 0.055]  # steps 1..4: the slow step 3 is the one that waited least


@pytest.fixture
def stored_run():
    """Rank 0: five measured steps, a parsed loss that must not beat the measured one, rankwatch.log
    keys. Rank 1: only rankwatch.log (no instrumentation). Rank 2: planned, never reported."""
    metrics = []
    for step in range(5):
        t = 100.0 + step
        metrics.append(MetricRecord(0, t, step, "loss", 1.0 / (step + 1), "auto"))
        metrics.append(MetricRecord(0, t, step, "data_wait", DATA_WAITS[step], "auto"))
        if step:
            metrics.append(MetricRecord(0, t, step, "step_time", STEP_TIMES[step - 1], "auto"))
            metrics.append(MetricRecord(0, t, step, "samples_per_s", SAMPLES[step], "auto"))
            metrics.append(MetricRecord(0, t, step, "comm_wait", COMM_WAITS[step - 1], "auto"))
        metrics.append(MetricRecord(0, t + 0.5, step, "loss", 99.0, "parsed"))
        metrics.append(MetricRecord(0, t, step, "lr", 1e-3 / (step + 1), "log"))
    metrics.append(MetricRecord(1, 105.0, 7, "lr", 5e-4, "log"))
    metrics.append(MetricRecord(1, 105.0, 7, "loss", 2e-9, "log"))
    metrics.append(MetricRecord(1, 104.0, 6, "loss", 3.0, "log"))
    with RunStore() as store:
        run_id = store.create_run(run_key="s" * 24, profile="stats", spec_toml="", command="", host="h",
                                  workdir="/", runner_pid=1, socket=None, world_size=3, status="succeeded")
        store.update_run(run_id, started=99.0, ended=110.0, exit_code=0)
        store.upsert_rank(run_id, 0, state="exited", exit_code=0, host="h", pid=11, last_seen=105.0)
        store.upsert_rank(run_id, 1, state="failed", exit_code=-15, host="h", pid=12, last_seen=105.5)
        store.upsert_rank(run_id, 2, state="waiting")
        store.write_batch(run_id, RecordBatch(metrics=metrics, events=[
            Event(99.5, "rank_started", 0, "rank 0 started"), Event(99.7, "rank_started", 1, "rank 1 started")]))
    return run_id


def test_rank_statistics_come_from_the_records_and_say_none_when_not_measured(stored_run):
    with RunStore(readonly=True) as store:
        ranks, logged = run_statistics(store, stored_run)
    first, second, third = ranks
    assert (first.steps, first.last_step) == (5, 4)
    assert (first.last_loss, first.loss_source) == (pytest.approx(0.2), "auto")  # measured beats parsed
    assert first.median_step_time == pytest.approx(statistics.median(STEP_TIMES))
    assert first.data_wait_share == pytest.approx(sum(DATA_WAITS[1:]) / sum(STEP_TIMES))  # steps with a step time
    assert first.samples_per_s == pytest.approx((32 * 3 + 16) / sum(STEP_TIMES))  # total samples / total time
    assert first.comm_wait_share == pytest.approx(sum(COMM_WAITS) / sum(STEP_TIMES))
    assert (first.first_seen, first.last_seen) == (99.5, 105.0)  # first seen: its hello
    assert (second.steps, second.last_step, second.last_loss, second.loss_source) == (None, 7, 2e-9, "log")
    assert second.median_step_time is second.data_wait_share is second.samples_per_s is None
    assert second.comm_wait_share is None
    assert (third.rank, third.steps, third.last_loss, third.state) == (2, None, None, "waiting")
    [lr] = logged
    assert (lr.name, lr.sources, lr.last_by_rank) == ("lr", ("log",), {0: pytest.approx(2e-4), 1: 5e-4})


def test_runs_show_prints_every_rank_and_every_logged_key(stored_run, capsys):
    assert main(["runs", "show", str(stored_run)]) == 0
    out = capsys.readouterr().out
    assert "metrics:  comm_wait, data_wait, loss, samples_per_s, step_time; logged: lr" in out
    lines = out.splitlines()
    header = next(line for line in lines if line.strip().startswith("rank  state"))
    assert header.split() == ["rank", "state", "host", "pid", "exit", "steps", "last", "loss", "median", "step",
                              "data", "wait", "comm", "wait", "samples/s", "last", "seen"]
    row1 = next(line for line in lines if line.strip().startswith("1  failed"))
    assert "SIGTERM (-15)" in row1 and "2.000e-09" in row1
    row2 = next(line for line in lines if line.strip().startswith("2  waiting"))
    assert row2.split()[2:] == ["–"] * 10  # host, pid, exit, steps, loss, step time, 2 waits, samples/s, seen
    assert any(line.strip().startswith("lr  (rankwatch.log)  r0 2.000e-04 · r1 5.000e-04") for line in lines)


def test_runs_show_json_gives_the_same_per_rank_statistics(stored_run, capsys):
    assert main(["runs", "show", str(stored_run), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    by_rank = {row["rank"]: row for row in shown["ranks"]}
    assert by_rank[0]["steps"] == 5 and by_rank[0]["pid"] == 11  # statistics beside the stored fields
    assert by_rank[0]["median_step_time"] == pytest.approx(statistics.median(STEP_TIMES))
    assert by_rank[1]["data_wait_share"] is None and by_rank[1]["exit_code"] == -15
    assert shown["logged"] == [{"name": "lr", "sources": ["log"], "last_by_rank": {"0": pytest.approx(2e-4),
                                                                                    "1": 5e-4}}]


def test_one_exit_code_for_a_stopped_run_whoever_asked():
    assert stopped_run_exit_code(killed=False) == EXIT_STOPPED == 128 + signal.SIGTERM
    assert stopped_run_exit_code(killed=True) == EXIT_KILLED == 128 + signal.SIGKILL
    # the rankwatch run process itself exits as a shell job killed by the signal it received
    assert process_exit_code(EXIT_STOPPED, signal.SIGINT, stopped=True) == 130
    assert process_exit_code(EXIT_STOPPED, signal.SIGTERM, stopped=True) == 143
    assert process_exit_code(EXIT_STOPPED, signal.SIGHUP, stopped=True) == 129
    assert process_exit_code(EXIT_STOPPED, None, stopped=True) == 143  # stopped by the GUI or `rankwatch stop`
    assert process_exit_code(1, signal.SIGINT, stopped=False) == 1  # it had failed before the signal counted
    assert describe_stop_reason("SIGINT") == "Ctrl-C"
    assert "rankwatch stop" in describe_stop_reason("stop requested by a subscriber")


@pytest.mark.parametrize(("code", "text"), [(0, "0"), (1, "1"), (-15, "SIGTERM (-15)"), (-9, "SIGKILL (-9)"),
                                            (None, "–"), (-99, "signal 99 (-99)")])
def test_a_ranks_exit_code_reads_with_its_signal(code, text):
    assert describe_exit_code(code) == text


def running_snapshot(run_id: int) -> dict:
    """The run as a subscriber first sees it: rank 0 at its last step, with that step's own figures."""
    return SnapshotMessage(RunInfo(id=run_id, profile="stats", status="running", started=99.0),
                           (RankInfo(rank=0, state="running", step=4, loss=0.2, step_time=0.0215, comm_wait_share=0.46,
                                     data_wait_share=0.02, samples_per_s=1491.0),), spec={"args": []}).to_wire()


def test_the_end_of_a_plain_run_prints_each_ranks_result_over_the_run_not_its_last_step(stored_run):
    """The live row holds the newest step (here a last step that waited 46 % in collectives);
    the lines printed when the run ends come from the store, over every step."""
    import io

    from runner.view.terminal import TerminalView

    out = io.StringIO()
    view = TerminalView(live=False, out=out, err=io.StringIO(), status_every=30)
    view.handle(running_snapshot(stored_run))
    view.handle(update(run=run_changes(id=stored_run, profile="stats", status="succeeded", started=99.0,
                                       ended=110.0)).to_wire())
    view.handle(Bye().to_wire())
    with RunStore(readonly=True) as store:
        view.show_results(run_statistics(store, stored_run)[0])
    lines = out.getvalue().splitlines()
    assert lines[0].startswith(f"[rankwatch] run {stored_run} · stats · succeeded")
    first = next(line for line in lines if line.startswith("[rankwatch] rank 0 "))
    share = round(100 * sum(COMM_WAITS) / sum(STEP_TIMES))
    assert first.startswith("[rankwatch] rank 0 exited: 5 steps, last loss 0.2000, median step 115 ms, ")
    assert f"comm wait {share}%" in first and "46%" not in first and "21.5" not in first
    second = next(line for line in lines if line.startswith("[rankwatch] rank 1 "))
    assert second.startswith("[rankwatch] rank 1 failed: last step 7, last loss 2.000e-09")
    assert "median step" not in second  # nothing measured: nothing claimed
    assert not any(line.startswith("[rankwatch] rank 2 ") for line in lines)  # never reported


def test_the_live_tables_last_frame_shows_each_ranks_result_over_the_run_not_its_last_step(stored_run):
    """The live table (a terminal) ends on the same whole-run figures the plain lines print,
    under a caption that says so; before the run's results come, it shows the newest step."""
    import io

    from rich.console import Console

    from runner.view.terminal import WHOLE_RUN_CAPTION, TerminalView

    view = TerminalView(live=True, out=io.StringIO(), err=io.StringIO())
    view.handle(running_snapshot(stored_run))

    def frame() -> str:
        screen = Console(file=io.StringIO(), width=200, color_system=None)
        screen.print(view._render())
        return screen.file.getvalue()

    live = frame()
    assert "46%" in live and "21.5" in live and WHOLE_RUN_CAPTION not in live
    view.handle(update(run=run_changes(id=stored_run, profile="stats", status="succeeded", started=99.0,
                                       ended=110.0)).to_wire())
    view.handle(Bye().to_wire())
    assert view.shows_results
    with RunStore(readonly=True) as store:
        view.show_results(run_statistics(store, stored_run)[0])
    last = frame()
    row = next(line for line in last.splitlines() if line.strip().startswith("0 "))
    share = round(100 * sum(COMM_WAITS) / sum(STEP_TIMES))
    assert "median ms/step" in last and WHOLE_RUN_CAPTION in " ".join(last.split())
    assert " 115 " in f" {row} " or "115.0" in row, row
    assert f"{share}%" in row and "46%" not in row and "21.5" not in row


@pytest.fixture
def forty_ranks():
    """40 ranks of 20 steps of 100 ms; rank 7 steps in 300 ms, rank 30 failed after 5 steps."""
    metrics = []
    for rank in range(40):
        for step in range(1, 6 if rank == 30 else 21):
            seconds = 0.3 if rank == 7 else 0.1 + rank / 100_000
            metrics.append(MetricRecord(rank, 100.0 + step, step, "step_time", seconds, "auto"))
    with RunStore() as store:
        run_id = store.create_run(run_key="f" * 24, profile="forty", spec_toml="", command="", host="h",
                                  workdir="/", runner_pid=1, socket=None, world_size=40, status="failed")
        store.update_run(run_id, started=99.0, ended=130.0, exit_code=1)
        for rank in range(40):
            store.upsert_rank(run_id, rank, state="failed" if rank == 30 else "exited", host="h", pid=rank,
                              exit_code=1 if rank == 30 else 0)
        store.write_batch(run_id, RecordBatch(metrics=metrics))
    return run_id


def listed_ranks(out: str) -> list[int]:
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip().startswith("rank  state")) + 1
    rows = []
    for line in lines[start:]:
        words = line.split()
        if len(words) < 2 or not words[0].isdigit() or words[1] not in ("exited", "failed"):
            break
        rows.append(int(words[0]))
    return rows


def test_runs_show_of_many_ranks_lists_those_that_stand_out_and_counts_the_rest(forty_ranks, capsys):
    assert main(["runs", "show", str(forty_ranks)]) == 0
    out = capsys.readouterr().out
    assert listed_ranks(out) == [7, 30]  # the failed rank, the slow one (and the one behind: the same rank)
    assert "    40 ranks: 39 exited, 1 failed · step time median 100 ms, p90 100 ms" in out
    assert "ranks 7, 30 stand out (failed or stalled, slower, behind, waiting more or dropping records); " \
           "38 more not shown" in out
    assert f"every rank: rankwatch runs show {forty_ranks} --ranks all" in out
    assert main(["runs", "show", str(forty_ranks), "--ranks", "all"]) == 0
    assert listed_ranks(capsys.readouterr().out) == list(range(40))
    assert main(["runs", "show", str(forty_ranks), "--ranks", "3-5, 12"]) == 0
    out = capsys.readouterr().out
    assert listed_ranks(out) == [3, 4, 5, 12] and "more not shown" not in out


def test_runs_show_says_what_is_wrong_with_a_rank_choice(forty_ranks, capsys):
    assert main(["runs", "show", str(forty_ranks), "--ranks", "50-60"]) == 2
    assert "--ranks: the run has none of ranks 50-60 (it has ranks 0-39)" in capsys.readouterr().err
    assert main(["runs", "show", str(forty_ranks), "--ranks", "five"]) == 2
    assert "'five' is not a rank or a range of ranks (e.g. 3 or 512-519)" in capsys.readouterr().err


def test_the_end_of_a_plain_run_of_many_ranks_prints_those_that_stand_out_and_a_count(forty_ranks):
    import io

    from runner.view.terminal import TerminalView

    out = io.StringIO()
    view = TerminalView(live=False, out=out, err=io.StringIO(), status_every=30)
    view.handle(running_snapshot(forty_ranks))
    view.handle(Bye().to_wire())
    with RunStore(readonly=True) as store:
        view.show_results(run_statistics(store, forty_ranks)[0])
    ranks = [line.split()[2] for line in out.getvalue().splitlines() if line.startswith("[rankwatch] rank ")
             and line.split()[3] in ("exited:", "failed:")]
    assert ranks == ["7", "30"]
    assert out.getvalue().splitlines()[-3:] == [
        "[rankwatch] 40 ranks: 39 exited, 1 failed · step time median 100 ms, p90 100 ms",
        "[rankwatch] ranks 7, 30 stand out (failed or stalled, slower, behind, waiting more or dropping records); "
        "38 more not shown",
        f"[rankwatch] every rank: rankwatch runs show {forty_ranks} --ranks all"]


def test_many_ranks_that_never_stepped_still_list_the_first_ones():
    from runner.store.rank_stats import RankStats
    from runner.view.standing_out import stored_ranks_that_stand_out

    waiting = [RankStats(rank=rank, state="waiting") for rank in range(64)]
    listed, caption = stored_ranks_that_stand_out(waiting)
    assert [entry.rank for entry in listed] == [0, 1, 2]
    assert caption == ["64 ranks: 64 waiting", "no rank stands out; 61 more not shown"]
