"""`rankwatch stop` when the runner's socket cannot be reached: it signals the runner, but only
the process that really is that run's runner (a pid reused by a later process is left alone).
The path through the socket, with a real job, is in tests/integration/test_stop_and_attach.py."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from runner.cli.main import main
from runner.cli.stop_command import EXIT_NOT_RUNNING
from runner.store.store import RunStore

SLEEPER = [sys.executable, "-c", "import time; time.sleep(60)"]


def record_live_run(runner_pid: int) -> int:
    with RunStore() as store:
        return store.create_run(run_key="r" * 24, profile="p", spec_toml="", command="", host="h", workdir="/",
                                runner_pid=runner_pid, socket=None, world_size=1, status="starting")


@pytest.fixture
def sleeper():
    process = subprocess.Popen(SLEEPER)
    yield process
    process.kill()
    process.wait()


def test_without_a_socket_stop_sends_sigterm_to_the_runner(sleeper, capsys):
    time.sleep(0.05)
    run_id = record_live_run(sleeper.pid)  # the "runner" existed before its run was recorded
    code = main(["stop", str(run_id), "--timeout", "5"])
    assert sleeper.wait(timeout=5) == -15  # it got SIGTERM
    err = capsys.readouterr().err
    # this stand-in could not record an end, so the run reads as lost: said, with exit 1
    assert code == 1 and "died before recording the end (lost)" in err


def test_a_pid_reused_by_a_later_process_is_not_signalled(capsys):
    runner = subprocess.Popen(SLEEPER)
    run_id = record_live_run(runner.pid)  # its identity (start time) is recorded with the pid
    runner.kill()
    runner.wait()
    time.sleep(0.05)  # a pid is given again only after its process ended: a later start time
    later = subprocess.Popen(SLEEPER)  # the kernel gives the runner's pid to this one (simulated)
    try:
        with RunStore() as store:
            store.connection.execute("UPDATE runs SET runner_pid = ? WHERE id = ?", (later.pid, run_id))
            store.connection.commit()
        code = main(["stop", str(run_id), "--timeout", "2"])
        assert later.poll() is None  # left alone
        assert code == EXIT_NOT_RUNNING and "is not running (lost: its runner died" in capsys.readouterr().err
    finally:
        later.kill()
        later.wait()


def test_stop_of_a_lost_run_ends_the_processes_it_left_behind(capsys):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    with RunStore() as store:
        run_id = store.create_run(run_key="o" * 24, profile="p", spec_toml="", command="", host="h", workdir="/",
                                  runner_pid=dead.pid, socket=None, world_size=1, status="running")
    orphan = subprocess.Popen(SLEEPER, env={**os.environ, "RANKWATCH_RUN_KEY": "o" * 24})
    try:
        time.sleep(0.2)
        code = main(["stop", str(run_id)])
        assert orphan.wait(timeout=10) == -15
        assert code == 0 and "was lost (its runner died); ended 1 process(es) it left behind" in \
            capsys.readouterr().err
    finally:
        orphan.kill()
        orphan.wait()
