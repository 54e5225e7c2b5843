"""torchrun's keeper passes a stop on exactly once, ends what is left after its grace period,
and ends as torchrun ended. Real processes; a small script stands in for torchrun."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from tests.jobs import REPO, processes_with_marker, wait_for

CHILD = """
import os, signal, sys, time
log = sys.argv[1]
def on_term(number, frame):
    with open(log, "a") as out:
        out.write("SIGTERM\\n")
signal.signal(signal.SIGTERM, on_term)
with open(log, "a") as out:
    out.write(f"PYTHONPATH={os.environ.get('PYTHONPATH')}\\n")
if sys.argv[2] == "exit":
    sys.exit(3)
if sys.argv[2] == "signal":
    os.kill(os.getpid(), signal.SIGUSR1)
while True:
    time.sleep(0.1)
"""


def start_keeper(tmp_path, behaviour: str, grace: float = 1.0) -> tuple[subprocess.Popen, object]:
    child = tmp_path / "child.py"
    child.write_text(CHILD)
    log = tmp_path / "log.txt"
    env = {**os.environ, "PYTHONPATH": str(REPO), "RANKWATCH_RUN_KEY": f"keeper-test-{os.getpid()}"}
    keeper = subprocess.Popen([sys.executable, "-m", "runner.launch.keeper", str(grace), "/for/the/child", "--",
                               sys.executable, str(child), str(log), behaviour], env=env)
    wait_for(lambda: log.exists() and log.read_text(), 30, what="the child to start")
    return keeper, log


def test_torchrun_gets_one_sigterm_however_many_arrive_and_a_sigkill_after_the_grace_period(tmp_path):
    keeper, log = start_keeper(tmp_path, "stay", grace=1.0)
    sent = time.monotonic()
    for _ in range(5):  # a dying multi-threaded runner sends its parent-death signal once per thread
        keeper.send_signal(signal.SIGTERM)
        time.sleep(0.05)
    keeper.wait(timeout=10)
    assert 0.9 < time.monotonic() - sent < 5
    assert log.read_text().splitlines() == ["PYTHONPATH=/for/the/child", "SIGTERM"]
    assert keeper.returncode == -signal.SIGKILL  # it ends as the child ended: SIGKILLed after the grace period


def test_a_stop_sent_to_every_process_at_once_is_not_passed_on_and_what_is_left_is_killed(tmp_path):
    """As Slurm ends a job step (time limit, scancel): the same SIGTERM to the keeper and torchrun, by
    someone other than the keeper's parent, twice. torchrun must not get a third from the keeper."""
    keeper, log = start_keeper(tmp_path, "stay", grace=1.0)
    [child] = psutil.Process(keeper.pid).children()
    sent = time.monotonic()
    for round_ in (1, 2):  # each after the last one arrived: two signals pending at once would be one
        subprocess.run(["kill", "-TERM", str(keeper.pid), str(child.pid)], check=True)
        wait_for(lambda round_=round_: log.read_text().count("SIGTERM") >= round_, 5, what=f"SIGTERM {round_}")
    keeper.wait(timeout=10)
    assert 0.9 < time.monotonic() - sent < 5
    assert log.read_text().splitlines() == ["PYTHONPATH=/for/the/child", "SIGTERM", "SIGTERM"]  # the stranger's two
    assert keeper.returncode == -signal.SIGKILL


def test_the_keeper_never_kills_its_parent_even_when_it_carries_the_run_marker(tmp_path):
    """A node's agent carries the marker too, and waits for the keeper to report the node's end."""
    child = tmp_path / "child.py"
    child.write_text(CHILD)
    log = str(tmp_path / "log.txt")
    parent = f"""
import os, signal, subprocess, sys, time
keeper = subprocess.Popen([sys.executable, "-m", "runner.launch.keeper", "1", "", "--",
                           sys.executable, {str(child)!r}, {log!r}, "stay"])
while not (os.path.exists({log!r}) and os.path.getsize({log!r})):
    time.sleep(0.05)
keeper.send_signal(signal.SIGTERM)
print("keeper", keeper.wait(), flush=True)
"""
    env = {**os.environ, "PYTHONPATH": str(REPO), "RANKWATCH_RUN_KEY": f"keeper-test-parent-{os.getpid()}"}
    completed = subprocess.run([sys.executable, "-c", parent], env=env, capture_output=True, text=True, timeout=30)
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.strip() == f"keeper {-signal.SIGKILL}"  # the child was SIGKILLed, the parent lived on


def test_the_keeper_ends_with_torchruns_exit_code(tmp_path):
    keeper, _ = start_keeper(tmp_path, "exit")
    assert keeper.wait(timeout=10) == 3


def test_the_keeper_dies_of_the_signal_torchrun_died_of(tmp_path):
    keeper, _ = start_keeper(tmp_path, "signal")
    assert keeper.wait(timeout=10) == -signal.SIGUSR1


def test_an_interpreter_that_cannot_run_is_one_line_and_status_127(tmp_path):
    completed = subprocess.run([sys.executable, "-m", "runner.launch.keeper", "1", "", "--", str(tmp_path / "nope")],
                               capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=30)
    assert completed.returncode == 127
    assert completed.stderr.strip().startswith(f"rankwatch: cannot start {tmp_path / 'nope'}")


# ---- parent-death signals that cannot be lost to a race ---------------------------------------------

WORKER_PATH = REPO / "runner" / "worker_path"
ASK_PARENT = f"import sys; sys.path.insert(0, {str(WORKER_PATH)!r}); from rankwatch._process import parent_is_gone; print(parent_is_gone())"


def test_a_child_whose_parent_died_before_its_prctl_ends_itself():
    """``parent`` is the pid the parent had before the fork; any other parent means it is gone."""
    script = ("import signal, time; from runner.launch.process_tree import set_parent_death_signal; "
              "set_parent_death_signal(signal.SIGTERM, parent=1); time.sleep(30)")
    completed = subprocess.run([sys.executable, "-c", script], cwd=REPO, timeout=20)
    assert completed.returncode == -signal.SIGTERM


def test_a_worker_tells_its_torchrun_from_a_stranger_by_the_run_marker():
    torchrun_like = {**os.environ, "RANKWATCH_RUN_KEY": "k1", "TORCHELASTIC_RUN_ID": "r"}
    under_its_own = subprocess.run(["sh", "-c", f'{sys.executable} -c "$0"; true', ASK_PARENT], env=torchrun_like,
                                   capture_output=True, text=True, timeout=20)
    assert under_its_own.stdout.strip() == "False"  # sh carries the run's marker: our torchrun is alive
    adopted = subprocess.run([sys.executable, "-c", ASK_PARENT], env=torchrun_like, capture_output=True, text=True,
                             timeout=20)
    assert adopted.stdout.strip() == "True"  # a parent without the marker: torchrun is gone
    not_ours = {k: v for k, v in torchrun_like.items() if k != "TORCHELASTIC_RUN_ID"}
    plain = subprocess.run([sys.executable, "-c", ASK_PARENT], env=not_ours, capture_output=True, text=True,
                           timeout=20)
    assert plain.stdout.strip() == "False"  # not started by torchrun: nothing can be told


# ---- what torchrun leaves behind -----------------------------------------------------------------------

LEAVES_A_CHILD = """
import os, subprocess, sys, time
ready_read, ready_write = os.pipe()
subprocess.Popen([sys.executable, "-c", "import os, signal, sys, time\\n"
                  "signal.signal(signal.SIGTERM, signal.SIG_IGN if sys.argv[2] == 'ignore' else signal.SIG_DFL)\\n"
                  "os.write(int(sys.argv[1]), b'up')\\n"
                  "while True: time.sleep(0.1)", str(ready_write), sys.argv[1]],
                 pass_fds=[ready_write], start_new_session=sys.argv[1] == 'ignore')
os.read(ready_read, 2)
open(sys.argv[3], "w").close()
if sys.argv[2] == "exit":
    sys.exit(0)
while True:
    time.sleep(0.1)
"""


@pytest.fixture(autouse=True)
def _no_leftovers_of_ours():
    """Whatever a failing test below left behind (by its marker: ours only) is killed after it."""
    yield
    for process in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if process.environ().get("RANKWATCH_RUN_KEY", "").startswith(f"keeper-leftover-{os.getpid()}-"):
                process.kill()


def start_torchrun_with_a_child(tmp_path, child_on_sigterm: str, torchrun_does: str, grace: float
                                ) -> tuple[subprocess.Popen, str]:
    """A keeper whose "torchrun" starts a child (one that ``ignore``s SIGTERM, in a session of its own, or
    one that ``die``s of it) and then ``exit``s or ``stay``s."""
    script = tmp_path / "torchrun_with_a_child.py"
    script.write_text(LEAVES_A_CHILD)
    run_key = f"keeper-leftover-{os.getpid()}-{child_on_sigterm}-{torchrun_does}"
    env = {**os.environ, "PYTHONPATH": str(REPO), "RANKWATCH_RUN_KEY": run_key}
    keeper = subprocess.Popen([sys.executable, "-m", "runner.launch.keeper", str(grace), "", "--",
                               sys.executable, str(script), child_on_sigterm, torchrun_does, str(tmp_path / "up")],
                              env=env)
    wait_for(lambda: (tmp_path / "up").exists(), 30, what="torchrun's child")
    return keeper, run_key


def test_a_child_that_ignores_sigterm_and_outlives_torchrun_is_killed_before_the_keeper_exits(tmp_path):
    """torchrun returns once its ranks have; a rank's helper in a session of its own that ignores SIGTERM
    would live on with ppid 1. The keeper SIGTERMs it, SIGKILLs it after the grace period, then exits as
    torchrun did."""
    keeper, run_key = start_torchrun_with_a_child(tmp_path, "ignore", "exit", grace=1.0)
    assert keeper.wait(timeout=20) == 0
    assert processes_with_marker(run_key) == []


def test_a_child_that_obeys_sigterm_ends_at_once_after_torchrun(tmp_path):
    keeper, run_key = start_torchrun_with_a_child(tmp_path, "die", "exit", grace=20.0)
    started = time.monotonic()
    assert keeper.wait(timeout=20) == 0
    assert time.monotonic() - started < 5  # its SIGTERM ended it: no grace period to sit out
    assert processes_with_marker(run_key) == []


def test_the_ranks_of_a_sigkilled_torchrun_are_ended_by_the_keeper(tmp_path):
    keeper, run_key = start_torchrun_with_a_child(tmp_path, "ignore", "stay", grace=1.0)
    [torchrun] = psutil.Process(keeper.pid).children()
    torchrun.kill()
    assert keeper.wait(timeout=20) == -signal.SIGKILL  # as torchrun ended
    assert processes_with_marker(run_key) == []


def test_the_keeper_ends_only_its_own_nodes_leftovers(tmp_path):
    """Two nodes of a run on one machine (``--hosts localhost:2,127.0.0.1:2``): the first node's
    torchrun ending must not end the second node's processes, which carry the same run marker."""
    script = tmp_path / "torchrun_with_a_child.py"
    script.write_text(LEAVES_A_CHILD)
    run_key = f"keeper-leftover-{os.getpid()}-two-nodes"
    env = {**os.environ, "PYTHONPATH": str(REPO), "RANKWATCH_RUN_KEY": run_key}
    other_node = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                                  env={**env, "RANKWATCH_NODE_RANK": "1"})
    try:
        keeper = subprocess.Popen([sys.executable, "-m", "runner.launch.keeper", "1", "", "--", sys.executable,
                                   str(script), "ignore", "exit", str(tmp_path / "up")],
                                  env={**env, "RANKWATCH_NODE_RANK": "0"})
        assert keeper.wait(timeout=20) == 0
        assert [process.pid for process in processes_with_marker(run_key)] == [other_node.pid]
    finally:
        other_node.kill()
        other_node.wait()
