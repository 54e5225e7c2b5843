"""Stack dumps: parsing real faulthandler output, grouping ranks, naming the one that differs.

The dumps in ``data/`` are real: ranks of ``tests/scripts/diag_hang.py`` (rank 0 in
``dist.barrier()``, the others waiting for its checkpoint) dumped by the bootstrap's
handler on ``STACK_SIGNAL``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from runner.diagnosis.stack_capture import StackCapture
from runner.diagnosis.stacks import (
    Frame,
    analyse,
    describe,
    format_stacks,
    last_dump,
    main_thread,
    parse_dump,
    user_frames,
)
from runner.paths import WORKER_PATH
from tests.diagnosis.fakes import FakeHub

DATA = Path(__file__).parent / "data"
BARRIER = DATA / "faulthandler_rank0_barrier.txt"
WAITING = DATA / "faulthandler_rank1_waiting.txt"


def main_frames(path: Path) -> list[Frame]:
    return user_frames(main_thread(parse_dump(path.read_text())).frames)


def test_a_real_dump_parses_into_threads_with_the_main_thread_found():
    threads = parse_dump(BARRIER.read_text())
    assert len(threads) == 2
    reporter, main = threads
    assert not reporter.current and reporter.frames[0].function == "_bootstrap"  # oldest call first
    assert main.current and main_thread(threads) is main
    assert main.frames[-1] == Frame(main.frames[-1].file, 6371, "barrier")
    assert main.frames[-1].file.endswith("torch/distributed/distributed_c10d.py")


def test_the_bootstrap_frames_are_dropped_so_the_stack_starts_at_the_script():
    frames = main_frames(BARRIER)
    assert [f.short() for f in frames] == ["diag_hang.py:28 in <module>", "c10d_logger.py:83 in wrapper",
                                           "distributed_c10d.py:6371 in barrier"]


def test_only_the_last_dump_of_an_appended_file_is_used():
    text = (DATA / "faulthandler_two_dumps.txt").read_text()
    last = last_dump(text)
    assert len(parse_dump(text)) == 4 and len(parse_dump(last)) == 2
    assert text.endswith(last) and len(last) < len(text)


def test_the_rank_in_the_barrier_is_the_outlier_with_its_file_and_line():
    stacks = {0: main_frames(BARRIER), 1: main_frames(WAITING), 2: main_frames(WAITING)}
    result = analyse(stacks, "stalled", 100.0)
    assert result["ranks"] == [0, 1, 2] and result["reference"] == [1, 2] and not result["identical"]
    assert [g["ranks"] for g in result["groups"]] == [[1, 2], [0]]
    assert result["groups"][0]["differs_at"] is None
    frame = result["outlier"]["frame"]
    assert result["outlier"]["rank"] == 0
    assert (Path(frame["file"]).name, frame["line"], frame["function"], frame["index"]) == \
        ("diag_hang.py", 28, "<module>", 0)
    assert describe(result).startswith("rank 0 differs at ") and "diag_hang.py:28 in <module>" in describe(result)


def test_identical_stacks_collapse_into_one_group_without_outlier():
    result = analyse({rank: main_frames(WAITING) for rank in range(4)}, "requested", 1.0)
    assert len(result["groups"]) == 1 and result["identical"] and result["outlier"] is None
    assert describe(result) == "all 4 ranks have the same stack"


def test_a_tie_has_no_majority_and_no_outlier_but_each_side_shows_where_it_differs():
    result = analyse({0: main_frames(BARRIER), 1: main_frames(WAITING)}, "stalled", 1.0)
    assert result["reference"] is None and result["outlier"] is None
    assert {g["differs_at"]["line"] for g in result["groups"]} == {28, 32}
    assert describe(result).startswith("ranks disagree with no majority")


def test_a_rank_that_returned_from_a_call_differs_at_its_innermost_frame():
    deep = [Frame("t.py", 10, "<module>"), Frame("t.py", 3, "loader"), Frame("t.py", 5, "fetch")]
    shallow = deep[:2]
    result = analyse({0: deep, 1: deep, 2: shallow}, "stalled", 1.0)
    assert result["outlier"]["rank"] == 2
    assert result["outlier"]["frame"] == {"file": "t.py", "line": 3, "function": "loader", "index": 1}


def test_the_side_by_side_view_marks_the_differing_frame():
    stacks = {0: main_frames(BARRIER), 1: main_frames(WAITING), 2: main_frames(WAITING)}
    text = format_stacks(analyse(stacks, "stalled", 1.0), width=120)
    header = text.splitlines()[1]
    assert "ranks 1, 2" in header and "rank 0  <- differs" in header and " | " in header
    assert "diag_hang.py:28 in <module> <<" in text
    assert "first different frame " in text and "diag_hang.py:28 in <module>" in text
    narrow = format_stacks(analyse(stacks, "stalled", 1.0), width=40)
    assert " | " not in narrow and "diag_hang.py:28 in <module> <<" in narrow


def test_missing_ranks_are_listed_with_the_reason():
    result = analyse({0: main_frames(WAITING)}, "requested", 1.0, [{"rank": 1, "why": "process 9 is gone"}])
    assert result["missing"] == [{"rank": 1, "why": "process 9 is gone"}]
    assert "rank 1: no stack (process 9 is gone)" in format_stacks(result)


# ---- capturing from real processes ------------------------------------------------------

SLEEPER = textwrap.dedent("""
    import sys, time
    sys.path.insert(0, sys.argv[1])
    from rankwatch._stacks import install_stack_dumps
    install_stack_dumps(sys.argv[2], int(sys.argv[3]))

    def wait_for_data():
        print("ready", flush=True)
        time.sleep(60)

    wait_for_data()
""")


def start_sleeper(stacks_dir: Path, rank: int) -> subprocess.Popen:
    process = subprocess.Popen([sys.executable, "-c", SLEEPER, str(WORKER_PATH), str(stacks_dir), str(rank)],
                               stdout=subprocess.PIPE, text=True)
    assert process.stdout.readline().strip() == "ready"
    return process


def test_capture_signals_each_rank_and_reads_its_new_dump(tmp_path):
    """Real processes with the worker's handler: each dumps on the signal, the capture reads it."""
    processes = [start_sleeper(tmp_path, rank) for rank in (0, 1)]
    unprotected = subprocess.Popen([sys.executable, "-c", "import time; print('ready', flush=True); time.sleep(60)"],
                                   stdout=subprocess.PIPE, text=True)
    assert unprotected.stdout.readline().strip() == "ready"
    try:
        hub = FakeHub()
        for rank, process in enumerate([*processes, unprotected]):
            hub.hello(rank, pid=process.pid)
        results = []
        capture = StackCapture(hub, tmp_path, on_result=results.append)
        assert capture.capture_stacks(reason="requested")
        assert not capture.capture_stacks(reason="requested")  # one at a time
        deadline = time.monotonic() + 5
        while not results and time.monotonic() < deadline:
            capture.tick(time.time())  # no event loop here: ticks drive the polling
            time.sleep(0.05)
        [result] = results
        assert result["ranks"] == [0, 1] and result["identical"]
        assert [f["function"] for f in result["groups"][0]["frames"]][-1] == "wait_for_data"
        # rank 2 never installed a handler: it must not be signalled (the signal would kill it)
        assert result["missing"] == [{"rank": 2, "why": "no stack handler (its stack file does not exist)"}]
        assert unprotected.poll() is None
        [event] = hub.of_kind("stacks")
        assert event["groups"] == result["groups"] and event["reason"] == "requested"
        assert Path(event["path"]).name == "capture-1.json" and Path(event["text_path"]).exists()
        assert "wait_for_data" in Path(event["text_path"]).read_text()
        # a second capture reads only the new dump
        assert capture.capture_stacks(reason="requested")
        deadline = time.monotonic() + 5
        while len(results) < 2 and time.monotonic() < deadline:
            capture.tick(time.time())
            time.sleep(0.05)
        assert results[1]["ranks"] == [0, 1] and Path(hub.of_kind("stacks")[1]["path"]).name == "capture-2.json"
    finally:
        for process in [*processes, unprotected]:
            process.kill()
            process.wait()


def test_ranks_on_another_host_are_not_signalled_but_reported(tmp_path):
    hub = FakeHub()
    hub.hello(0, pid=os.getpid(), host="node-b")  # our own pid: a signal sent here would end pytest
    capture = StackCapture(hub, tmp_path, is_local=lambda row: row.host == "localhost")
    assert capture.capture_stacks(reason="requested")
    [event] = hub.of_kind("stacks")
    assert event["ranks"] == [] and event["missing"] == [
        {"rank": 0, "why": "on another host (node-b): this build does not collect stacks from other hosts"}]


def test_the_remote_hook_feeds_dumps_from_other_hosts_into_the_same_capture(tmp_path):
    hub = FakeHub()
    hub.hello(0, pid=os.getpid(), host="node-b")
    asked = []
    capture = StackCapture(hub, tmp_path, is_local=lambda row: False,
                           remote_capture=lambda rows: asked.extend(row.rank for row in rows) or [0])
    assert capture.capture_stacks(reason="requested") and asked == [0]
    capture.add_remote_dump(0, BARRIER.read_text())  # as node-b's agent would forward it
    capture.tick(time.time())
    capture.tick(time.time())
    [event] = hub.of_kind("stacks")
    assert event["ranks"] == [0] and event["missing"] == []
    assert event["groups"][0]["frames"][-1]["function"] == "barrier"
