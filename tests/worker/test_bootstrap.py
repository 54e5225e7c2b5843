"""The bootstrap runs a script exactly as plain ``python`` would, and explains failures.

Every comparison here runs the same program twice, as ``python ...`` and as
``python -m rankwatch._bootstrap ...``, and compares what the program saw and
what it printed. None of these scripts imports torch, so each run is fast.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest
from worker_harness import (
    PYTHON,
    SCRIPTS,
    WORKER_PATH,
    FakeHub,
    bootstrap_command,
    run_plain,
    run_worker,
    worker_environment,
)


@pytest.fixture(scope="module")
def hub():
    with FakeHub() as server:
        yield server


def _probe_output(completed) -> dict:
    assert completed.returncode == 0, completed.stderr
    return json.loads(completed.stdout.splitlines()[0])


@pytest.mark.parametrize(
    ("cwd", "script"),
    [(SCRIPTS, "probe.py"), (SCRIPTS.parent, "scripts/probe.py"), ("/", str(SCRIPTS / "probe.py"))],
)
def test_script_sees_the_same_argv_path_and_main_module(cwd, script):
    plain = _probe_output(run_plain([script, "a", "--flag=1"], worker_environment(None), cwd=cwd))
    wrapped = _probe_output(
        run_worker([script, "a", "--flag=1"], worker_environment(None), cwd=cwd)
    )

    assert wrapped == plain
    assert wrapped["name"] == "__main__"
    assert wrapped["argv"] == [script, "a", "--flag=1"]
    assert wrapped["path"][0] == str(SCRIPTS)
    assert wrapped["main_module_is_this"] is True


def test_module_mode_sees_what_python_dash_m_gives_it(hub):
    plain = _probe_output(run_plain(["-m", "probe", "x"], worker_environment(None)))
    wrapped = _probe_output(run_worker(["-m", "probe", "x"], worker_environment(hub.address)))

    assert wrapped == plain
    assert wrapped["argv"] == [str(SCRIPTS / "probe.py"), "x"]
    assert wrapped["spec"] == "probe"


def test_legacy_local_rank_flag_is_inserted_first():
    environment = worker_environment(None, RANKWATCH_LEGACY_LOCAL_RANK="1", LOCAL_RANK="3")

    seen = _probe_output(run_worker(["probe.py", "a"], environment))

    assert seen["argv"] == ["probe.py", "--local_rank=3", "a"]


def test_exit_code_from_sys_exit_is_kept_and_reported(hub):
    completed = run_worker(["probe.py", "--exit", "3"], worker_environment(hub.address, RANK="5"))

    assert completed.returncode == 3
    assert hub.wait_message("exit", rank=5)["code"] == 3


def test_a_script_leaving_by_os_exit_keeps_its_code_and_loses_no_record(hub):
    completed = run_worker(["os_exit.py", "2000", "4"], worker_environment(hub.address, RANK="8"))

    assert completed.returncode == 4, completed.stderr
    assert hub.wait_message("exit", rank=8)["code"] == 4
    assert [item[1] for item in hub.metric_items(rank=8) if item[2] == "value"] == list(range(2000))


def test_classes_defined_in_the_script_pickle_into_spawned_processes(hub):
    plain = run_plain(["spawn_pickle.py"], worker_environment(None))
    wrapped = run_worker(["spawn_pickle.py"], worker_environment(hub.address, RANK="6"))

    assert wrapped.returncode == plain.returncode == 0, wrapped.stderr
    assert wrapped.stdout == plain.stdout == "spawn [2, 4]\n"


@pytest.fixture(scope="module")
def failure(hub, tmp_path_factory):
    """fail.py run plainly and under the bootstrap with a hub and torchrun's error file."""
    error_file = tmp_path_factory.mktemp("errors") / "error.json"
    environment = worker_environment(hub.address, RANK="1", TORCHELASTIC_ERROR_FILE=str(error_file))
    plain = run_plain(["fail.py"], worker_environment(None))
    wrapped = run_worker(["fail.py"], environment)
    hub.wait_message("exit", rank=1)
    return plain, wrapped, error_file


def test_failure_prints_the_same_traceback_and_exit_code(failure):
    plain, wrapped, _ = failure

    assert plain.returncode == wrapped.returncode == 1
    assert wrapped.stdout == plain.stdout == "before failure\n"
    assert wrapped.stderr == plain.stderr
    assert 'File "' + str(SCRIPTS / "fail.py") + '", line 29, in <module>' in wrapped.stderr
    # Rankwatch's own frames are trimmed (the worker package's and runpy's, which ran it), asserted
    # on their files, not on the word "rankwatch": the clone's own path may well contain it.
    assert str(WORKER_PATH) not in wrapped.stderr and "runpy.py" not in wrapped.stderr


def test_failure_is_reported_with_type_message_and_traceback(hub, failure):
    plain, _, _ = failure

    fatal = hub.wait_message("exception", rank=1, fatal=True)
    assert fatal["exc_type"] == "ValueError"
    assert fatal["message"] == "bad value 42"
    assert fatal["thread"] == "MainThread"
    assert fatal["traceback"].startswith("Traceback (most recent call last):")
    assert (
        "During handling of the above exception, another exception occurred" in fatal["traceback"]
    )
    assert plain.stderr.endswith(fatal["traceback"])
    assert hub.wait_message("exit", rank=1)["code"] == 1


def test_exception_in_another_thread_is_an_event_not_the_exit(hub, failure):
    side = hub.wait_message("exception", rank=1, fatal=False)

    assert side["thread"] == "side"
    assert side["exc_type"] == "KeyError"
    assert "side_work" in side["traceback"]
    kinds = [
        message["type"]
        for message in hub.messages(rank=1)
        if message["type"] in ("exception", "exit")
    ]
    assert kinds == ["exception", "exception", "exit"]


def test_failure_writes_torchrun_error_file(failure):
    plain, _, error_file = failure

    content = json.loads(error_file.read_text())

    assert set(content) == {"message"}
    assert content["message"]["message"] == "ValueError: bad value 42"
    extra = content["message"]["extraInfo"]
    assert plain.stderr.endswith(extra["py_callstack"])
    assert abs(int(extra["timestamp"]) - time.time()) < 120


def test_existing_error_file_is_left_alone(tmp_path):
    error_file = tmp_path / "error.json"
    error_file.write_text('{"message": "written by @record"}')

    completed = run_worker(
        ["fail.py"], worker_environment(None, TORCHELASTIC_ERROR_FILE=str(error_file))
    )

    assert completed.returncode == 1
    assert error_file.read_text() == '{"message": "written by @record"}'


def test_without_a_hub_listening_the_script_behaves_the_same(tmp_path):
    environment = worker_environment(str(tmp_path / "nobody-listens.sock"))
    plain = run_plain(["fail.py"], worker_environment(None))

    started = time.monotonic()
    wrapped = run_worker(["fail.py"], environment)
    elapsed = time.monotonic() - started

    assert (wrapped.returncode, wrapped.stdout, wrapped.stderr) == (
        plain.returncode,
        plain.stdout,
        plain.stderr,
    )
    assert elapsed < 5.0
    probe = run_worker(["probe.py"], environment)
    assert probe.returncode == 0
    assert probe.stdout == run_plain(["probe.py"], worker_environment(None)).stdout


def test_keyboard_interrupt_still_exits_by_sigint(hub):
    plain = run_plain(["interrupted.py"], worker_environment(None))
    wrapped = run_worker(["interrupted.py"], worker_environment(hub.address, RANK="2"))

    assert plain.returncode == wrapped.returncode == -signal.SIGINT
    assert wrapped.stderr == plain.stderr
    assert hub.wait_message("exit", rank=2)["code"] == -signal.SIGINT
    assert hub.wait_message("exception", rank=2)["exc_type"] == "KeyboardInterrupt"


def test_syntax_error_and_missing_script_look_like_python(tmp_path):
    broken = tmp_path / "broken.py"
    broken.write_text("print('fine')\ndef broken(:\n    pass\n")
    for script in (str(broken), str(tmp_path / "missing.py")):
        plain = run_plain([script], worker_environment(None))
        wrapped = run_worker([script], worker_environment(None))
        assert (wrapped.returncode, wrapped.stderr) == (plain.returncode, plain.stderr)
        assert wrapped.returncode in (1, 2)


def test_no_script_prints_usage():
    completed = run_worker([], worker_environment(None))

    assert completed.returncode == 2
    assert completed.stderr.startswith("usage: python -m rankwatch._bootstrap")


def _process_gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status") as status:
            return "\nState:\tZ" in status.read()  # a zombie nobody reaps is dead too
    except FileNotFoundError:
        return True


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux only")
def test_worker_dies_when_its_parent_is_killed(tmp_path):
    """Stands in for a SIGKILLed torchrun: its workers must not survive it."""
    environment = worker_environment(str(tmp_path / "nobody.sock"))
    worker = bootstrap_command("hang.py", str(tmp_path / "never-created"))
    parent_code = (
        "import subprocess, sys\n"
        f"child = subprocess.Popen({worker!r}, cwd={str(SCRIPTS)!r})\n"
        "print(child.pid, flush=True)\n"
        "child.wait()\n"
    )
    parent = subprocess.Popen(
        [PYTHON, "-c", parent_code], env=environment, stdout=subprocess.PIPE, text=True
    )
    worker_pid = int(parent.stdout.readline())
    time.sleep(0.5)  # let the worker reach the script
    assert not _process_gone(worker_pid)

    parent.kill()
    parent.wait()

    deadline = time.monotonic() + 5
    while not _process_gone(worker_pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _process_gone(worker_pid)


@pytest.mark.parametrize("where", ["collective", "backward", "thread", "spawn"])
def test_rankwatchs_wrappers_are_not_in_the_printed_or_reported_traceback(hub, tmp_path, where):
    """A collective, ``backward`` and a spawned rank's function go through Rankwatch's wrappers
    (``_phases``, ``_instrument``, ``_spawn``); a failure inside them reads as without Rankwatch,
    printed (by Python, by ``threading``, by torch.multiprocessing in the spawning parent),
    reported and in torchrun's error file."""
    rank = 20 + ["collective", "backward", "thread", "spawn"].index(where)
    error_file = tmp_path / "error.json"
    extra = {"RANKWATCH_LAUNCH_MODE": "self-spawn"} if where == "spawn" else {}
    environment = worker_environment(hub.address, rank=rank, TORCHELASTIC_ERROR_FILE=str(error_file), **extra)
    plain = run_plain(["fail_in_wrapped_calls.py", where], worker_environment(None, rank=rank))
    wrapped = run_worker(["fail_in_wrapped_calls.py", where], environment)

    assert plain.returncode == wrapped.returncode
    assert str(WORKER_PATH) not in wrapped.stderr, wrapped.stderr
    assert wrapped.stderr == plain.stderr
    reported_rank = 0 if where == "spawn" else rank  # the spawned process is rank 0 of 1
    reported = hub.wait_message("exception", rank=reported_rank, fatal=where != "thread")
    assert str(WORKER_PATH) not in reported["traceback"]
    assert reported["traceback"].strip().splitlines()[-3:] in (
        plain.stderr.strip().splitlines()[-3:], [line.removeprefix("[rank0]: ") for line in
                                                 plain.stderr.strip().splitlines()[-3:]])
    if where in ("collective", "backward"):
        assert str(WORKER_PATH) not in json.loads(error_file.read_text())["message"]["extraInfo"]["py_callstack"]
