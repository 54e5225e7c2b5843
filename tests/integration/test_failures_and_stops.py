"""Real jobs that fail or get stopped: the first failing rank is named, and nothing survives."""

from __future__ import annotations

import os
import signal
import time

import psutil
import pytest

from runner.state import RankState
from runner.store.store import RunStore
from tests.jobs import (
    SCRIPTS,
    latest_run,
    processes_with_marker,
    ranks_running,
    rankwatch,
    start_rankwatch,
    wait_for,
)

pytestmark = pytest.mark.torchrun


def test_rank_one_raising_is_named_first_with_its_exit_code_and_exception():
    result = rankwatch("run", "--plain", "--nproc-per-node", "2", str(SCRIPTS / "fail_rank1.py"))
    assert result.returncode != 0
    summary = result.stderr[result.stderr.rindex("── Rankwatch"):]
    assert "rank 1 on" in summary and "failed first (exit code 1)" in summary
    assert "first to fail: rank 1" in summary
    assert "exception:     ValueError: bad batch shape on rank 1" in summary
    with RunStore(readonly=True) as store:
        run = store.stored_run(store.resolve_run_id("last"))
        ranks = {r.rank: r for r in store.ranks(run.id)}
    assert run.status == "failed" and run.summary["first_failure"]["rank"] == 1
    assert ranks[1].state == "failed" and ranks[1].exit_code == 1
    assert ranks[0].state in ("stopped", "failed")
    # one exit code per rank: the rank table says what the diagnosis says (runner.exit_status)
    summary = run.summary
    for failure in [summary["first_failure"], *summary.get("other_failures", [])]:
        assert ranks[failure["rank"]].exit_code == failure["exit_code"], failure
    # torchrun's own report (ChildFailedError, its Root Cause box) is in the log, not before the summary
    before_summary = result.stderr[:result.stderr.rindex("── Rankwatch")]
    assert "ChildFailedError" not in before_summary and "Root Cause" not in before_summary, before_summary
    assert f"rankwatch runs logs {run.id} --launcher" in before_summary.strip().splitlines()[-1], before_summary
    launcher = rankwatch("runs", "logs", str(run.id), "--launcher")
    assert "ChildFailedError" in launcher.stdout and "Root Cause" in launcher.stdout, launcher.stdout
    # one prefix per line in the stored log, as on the terminal (torch's "[rank1]: " dropped)
    rank_one = rankwatch("runs", "logs", str(run.id), "--rank", "1").stdout
    assert "[rank 1] Traceback (most recent call last):" in rank_one and "[rank1]:" not in rank_one, rank_one


def start_forever_job() -> tuple:
    runner = start_rankwatch("run", "--plain", "--nproc-per-node", "2", str(SCRIPTS / "forever.py"))
    run = wait_for(lambda: latest_run(), 30, what="the run to be recorded")
    wait_for(lambda: ranks_running(run.id, 2), 60, what="both ranks to say hello")
    run_key = run.run_key
    assert len(processes_with_marker(run_key)) >= 3  # torchrun and two workers at least
    return runner, run, run_key


def test_sigint_stops_the_job_within_15_seconds_quietly_and_leaves_no_process():
    runner, run, run_key = start_forever_job()
    stopped_at = time.monotonic()
    runner.send_signal(signal.SIGINT)
    _out, err = runner.communicate(timeout=15)
    assert time.monotonic() - stopped_at < 15
    assert runner.returncode == 130  # the process got SIGINT
    assert processes_with_marker(run_key) == []
    with RunStore(readonly=True) as store:
        recorded = store.stored_run(run.id)
        launcher_lines = [row.line for row in store.log_lines(run.id) if row.rank is None]
    # the run records what any stop records (runner.exit_status): stopped, 143, and who asked
    assert (recorded.status, recorded.exit_code) == ("stopped", 143)
    assert recorded.summary["stopped_by"] == "Ctrl-C"
    # "stopping… stopped" on the terminal; torchrun's reaction to SIGTERM only in the store
    assert "[rankwatch] stopping… (Ctrl-C; Ctrl-C again kills at once)\n" in err
    assert "[rankwatch] stopped (" in err
    assert "SignalException" not in err and "disconnected without an exit message" not in err
    assert any("SIGTERM" in line or "death signal" in line for line in launcher_lines)


@pytest.mark.parametrize(("sent", "process_exit"), [(signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_sigterm_and_sighup_stop_the_run_like_any_stop_and_exit_128_plus_the_signal(sent, process_exit):
    runner, run, run_key = start_forever_job()
    runner.send_signal(sent)
    runner.communicate(timeout=15)
    assert runner.returncode == process_exit
    assert processes_with_marker(run_key) == []
    with RunStore(readonly=True) as store:
        recorded = store.stored_run(run.id)
    assert (recorded.status, recorded.exit_code) == ("stopped", 143)
    assert recorded.summary["stopped_by"].startswith(sent.name)


def test_sigkill_of_the_runner_takes_the_job_down_too():
    runner, run, run_key = start_forever_job()
    with RunStore(readonly=True) as store:  # some records stored before the kill, to be counted
        wait_for(lambda: store.count("logs", run.id) > 0 and store.count("metrics", run.id) > 0, 30,
                 what="records in the store")
    killed_at = time.time()
    os.kill(runner.pid, signal.SIGKILL)
    runner.wait(timeout=5)
    wait_for(lambda: processes_with_marker(run_key) == [], 15, what="the job's processes to end")
    gone_at = time.time()
    with RunStore(readonly=True) as store:
        finished = wait_for(lambda: store.stored_run(run.id).ended is not None and store.stored_run(run.id), 10,
                            what="the sentinel to record the run")
        ranks = store.ranks(run.id)
        stored = {"metrics": store.count("metrics", run.id), "logs": store.count("logs", run.id)}
    # lost, ended when the runner died (not when the watchdog got round to it), and how
    assert finished.status == "lost" and killed_at <= finished.ended <= gone_at
    assert f"the runner (pid {runner.pid}) died at" in finished.summary["headline"]
    assert [row.state for row in ranks] == ["lost", "lost"]  # not "running" for ever
    # the count of what the store holds agrees with the store
    assert finished.summary["runner_lost"]["stored"] == stored


def test_unflushed_prints_arrive_promptly_attributed_to_their_rank():
    """A print that is never flushed reaches the store while its rank is still running (the
    script sleeps 120 s after it and never flushes: a block-buffered stdout would hold the line
    until the process exits). No time bound on top: the seconds between a rank's hello and its
    print are the script importing torch and joining the gloo group (measured 5-5.5 s on a loaded
    2-core machine), while the line reaches the runner within milliseconds of the print."""
    runner = start_rankwatch("run", "--plain", "--nproc-per-node", "2", str(SCRIPTS / "print_then_wait.py"))
    try:
        run = wait_for(lambda: latest_run(), 30, what="the run to be recorded")

        def greetings():
            with RunStore(readonly=True) as store:
                return {row.rank: row.line for row in store.log_lines(run.id) if "unflushed hello" in row.line}
        seen = wait_for(lambda: len(greetings()) == 2 and greetings(), 45, what="both unflushed lines")
        with RunStore(readonly=True) as store:
            ranks = {row.rank: row for row in store.ranks(run.id)}
        # the ranks have not exited (which would flush): the lines came while they slept
        assert all(not RankState(ranks[rank].state).finished and psutil.pid_exists(ranks[rank].pid or 0)
                   for rank in (0, 1))
        assert seen == {0: "unflushed hello from rank 0", 1: "unflushed hello from rank 1"}
    finally:
        runner.send_signal(signal.SIGINT)
        runner.wait(timeout=20)
