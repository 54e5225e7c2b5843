"""Whether a recorded run is still going: its runner's pid must still be its runner, not a later
process the kernel gave the pid to (real processes; the pid reuse itself is simulated by pointing
the row at another live process, as the kernel would after the runner died)."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import time

import pytest

from runner.rows import StoredRun
from runner.state import RunStatus
from runner.store import schema
from runner.store.liveness import effective_status, process_identity, runner_alive
from runner.store.store import RunStore

SLEEPER = [sys.executable, "-c", "import time; time.sleep(60)"]


@pytest.fixture
def processes():
    started: list[subprocess.Popen] = []
    yield lambda: started.append(subprocess.Popen(SLEEPER)) or started[-1]
    for process in started:
        process.kill()
        process.wait()


def record_run(store: RunStore, runner_pid: int) -> StoredRun:
    run_id = store.create_run(run_key=f"key-{runner_pid}", profile=None, spec_toml="", command=None, host="h",
                              workdir=None, runner_pid=runner_pid, socket=None, world_size=1, status="running")
    return store.stored_run(run_id)


def test_the_recorded_runner_is_alive_and_a_process_given_its_pid_later_is_not(processes):
    runner = processes()
    with RunStore() as store:
        run = record_run(store, runner.pid)
        assert run.runner_identity == process_identity(runner.pid) is not None
        assert runner_alive(run) and effective_status(run) == "running"
        runner.kill()
        runner.wait()
        assert not runner_alive(store.stored_run(run.id))
        time.sleep(0.05)  # a pid is given again only after its process ended: a later start time (ticks of 10 ms)
        later = processes()
        store.connection.execute("UPDATE runs SET runner_pid = ? WHERE id = ?", (later.pid, run.id))
        store.connection.commit()
        reused = store.stored_run(run.id)
    assert later.poll() is None  # a live process has the pid...
    assert not runner_alive(reused)  # ...but it is not the runner: the run was lost
    assert effective_status(reused) == RunStatus.LOST.value


def test_an_identity_lasts_as_long_as_its_process(processes):
    process = processes()
    identity = process_identity(process.pid)
    assert identity is not None and process_identity(process.pid) == identity
    process.kill()
    process.wait()
    assert process_identity(process.pid) is None


def test_a_run_recorded_before_identities_were_kept_falls_back_to_the_start_time(tmp_path, processes):
    """A version 3 store (no runner_identity column) is migrated; its runs keep the pid check by
    start time: a runner started before the run was recorded is alive, a later process is not."""
    path = tmp_path / "runs.db"
    runner = processes()
    time.sleep(0.1)
    connection = sqlite3.connect(path)
    for migration in schema.MIGRATIONS[:3]:
        connection.executescript(migration)
    connection.execute("PRAGMA user_version = 3")
    connection.execute("INSERT INTO runs (run_key, spec_toml, created, status, runner_pid) VALUES (?, '', ?, ?, ?)",
                       ("old", time.time(), "running", runner.pid))
    connection.commit()
    connection.close()
    with RunStore(path) as store:
        run = store.stored_run(store.resolve_run_id("last"))
        assert run.runner_identity is None and runner_alive(run)
        time.sleep(1.6)  # psutil's start time can read up to 1 s early, plus the slack
        later = processes()
        store.connection.execute("UPDATE runs SET runner_pid = ? WHERE id = ?", (later.pid, run.id))
        store.connection.commit()
        assert not runner_alive(store.stored_run(run.id))
