"""One detached real job (2 ranks, gloo, a script that logs lr, grad_norm and a 1e-9 value) serves:
`runs show --json` while it runs, `attach` and its detach message, then `rankwatch stop`: every
process gone in under 10 s, the run recorded stopped (exit code 143), nothing left behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest

from runner.store.store import RunStore
from tests.jobs import SCRIPTS, processes_with_marker, wait_for

pytestmark = pytest.mark.torchrun


def cli(env: dict, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "runner", *args], capture_output=True, text=True, env=env,
                          timeout=timeout)


@pytest.fixture(scope="module")
def detached(tmp_path_factory):
    home = tmp_path_factory.mktemp("stop-home")
    env = dict(os.environ, RANKWATCH_HOME=str(home), RANKWATCH_SOCKET_DIR=tempfile.mkdtemp(prefix="rw-", dir="/tmp"))
    started = cli(env, "run", "--detach", "--json", "--nproc-per-node", "2", str(SCRIPTS / "logged_metrics.py"),
                  "--steps", "100000", "--sleep", "0.05")
    assert started.returncode == 0, started.stderr
    info = json.loads(started.stdout)
    store_path = home / "data" / "runs.db"

    def logged_by_both() -> bool:
        with RunStore(store_path, readonly=True) as store:
            return {rank for rank, *_ in store.metrics(info["run_id"], name="tiny")} == {0, 1}

    wait_for(logged_by_both, 90, what="both ranks to log their keys")
    with RunStore(store_path, readonly=True) as store:
        run_key = store.stored_run(info["run_id"]).run_key
    yield {"env": env, "info": info, "store": store_path, "run_key": run_key}
    if psutil.pid_exists(info["pid"]):  # a failed test must not leave the job behind
        cli(env, "stop", str(info["run_id"]), "--force")


def test_runs_show_json_lists_the_logged_keys_and_per_rank_statistics_of_a_live_run(detached):
    shown = cli(detached["env"], "runs", "show", str(detached["info"]["run_id"]), "--json")
    assert shown.returncode == 0, shown.stderr
    data = json.loads(shown.stdout)
    logged = {key["name"]: key for key in data["logged"]}
    assert set(logged) == {"lr", "grad_norm", "tiny"}
    assert logged["tiny"]["last_by_rank"] == {"0": pytest.approx(1e-9), "1": pytest.approx(2e-9)}
    for rank in data["ranks"]:
        assert rank["steps"] >= 1 and rank["last_loss"] is not None and rank["median_step_time"] > 0
        assert rank["last_seen"] is not None


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def test_attach_shows_the_logged_keys_and_says_how_to_come_back_when_detached(detached):
    """Started as a non-interactive shell starts a background command (``attach 3 &`` in a
    script, a CI step): with SIGINT ignored. Python then raises no KeyboardInterrupt; Ctrl-C,
    or a SIGINT sent to it, must detach all the same."""
    run_id = detached["info"]["run_id"]
    attach = subprocess.Popen([sys.executable, "-m", "runner", "attach", str(run_id), "--plain",
                               "--status-every", "1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=detached["env"], preexec_fn=_ignore_sigint)
    time.sleep(6)  # history, then a few live status lines
    attach.send_signal(signal.SIGINT)
    out, err = attach.communicate(timeout=20)
    assert attach.returncode == 0, err
    assert err.rstrip().splitlines()[-1] == (
        f"run {run_id} still running — `rankwatch attach {run_id}` to watch, `rankwatch stop {run_id}` to stop")
    assert f"[rankwatch] run {run_id} · logged_metrics · running · epoch 1 · " in out
    status = [line for line in out.splitlines() if line.startswith("[rankwatch] rank ")]
    assert any(line.startswith("[rankwatch] rank 0 running") and "tiny 1.000e-09" in line for line in status)
    assert any(line.startswith("[rankwatch] rank 1 running") and "tiny 2.000e-09" in line for line in status)
    assert psutil.pid_exists(detached["info"]["pid"])  # detaching left the run going


def test_stop_ends_every_process_within_10_s_and_records_the_run_stopped(detached):
    run_id, runner_pid = detached["info"]["run_id"], detached["info"]["pid"]
    assert len(processes_with_marker(detached["run_key"])) >= 3  # torchrun and two ranks at least
    asked = time.monotonic()
    stopped = cli(detached["env"], "stop", str(run_id))
    assert stopped.returncode == 0, stopped.stderr
    assert processes_with_marker(detached["run_key"]) == []
    wait_for(lambda: not psutil.pid_exists(runner_pid) or psutil.Process(runner_pid).status() == "zombie",
             10 - (time.monotonic() - asked), what="the runner to exit")
    assert time.monotonic() - asked < 10
    assert f"run {run_id} stopped in " in stopped.stderr
    with RunStore(detached["store"], readonly=True) as store:
        run = store.stored_run(run_id)
        ranks = store.ranks(run_id)
    assert (run.status, run.exit_code) == ("stopped", 143)
    assert "rankwatch stop" in run.summary["stopped_by"]
    assert {rank.state for rank in ranks} == {"stopped"}
    again = cli(detached["env"], "stop", str(run_id))
    assert again.returncode == 3 and "is not running (stopped, exit code 143); nothing to stop" in again.stderr
    assert not Path(run.socket).exists()
