"""Stack dumps: parsing real faulthandler output, where each rank is, who holds up the others.

The dumps in ``data/`` are real: the two ranks of ``tests/scripts/diag_hang.py``
(rank 0 in ``dist.barrier()``, rank 1 sleeping in ``wait_for_checkpoint`` until
rank 0's checkpoint appears) dumped by the bootstrap's handler on ``STACK_SIGNAL``.
They were recorded in a checkout at ``RECORDED_ROOT``; the tests point them at this
checkout, so the source lines are read from this repository's script.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from runner.diagnosis.progress import RankProgress
from runner.diagnosis.stack_capture import StackCapture
from runner.diagnosis.stack_dumps import Frame, last_dump, main_thread, parse_dump, user_frames
from runner.diagnosis.stacks import MissingStack, analyse, describe, ensure_verdict, format_stacks
from runner.paths import WORKER_PATH
from tests.diagnosis.fakes import FakeHub
from tests.jobs import REPO, SCRIPTS

DATA = Path(__file__).parent / "data"
BARRIER = DATA / "faulthandler_rank0_barrier.txt"
HELPER = DATA / "faulthandler_rank1_helper.txt"
RECORDED_ROOT = "/work/wt/diag/"
SCRIPT = SCRIPTS / "diag_hang.py"


def dump(path: Path) -> str:
    return path.read_text().replace(RECORDED_ROOT, f"{REPO}/")


def main_frames(path: Path) -> list[Frame]:
    return user_frames(main_thread(parse_dump(dump(path))).frames)


def marked(marker: str) -> tuple[int, str]:
    """(line number, stripped text) of the line of ``diag_hang.py`` tagged ``# MARKER``."""
    for number, line in enumerate(SCRIPT.read_text().splitlines(), start=1):
        if f"# {marker}" in line:
            return number, line.strip()
    raise AssertionError(marker)


STALLED = RankProgress(step=7, idle_seconds=6.0, stalled=True, progressing=False)
MOVING = RankProgress(step=40, idle_seconds=0.1, stalled=False, progressing=True)


def analysed(*args, **kwargs) -> dict:
    """The analysis as its event carries it."""
    return analyse(*args, **kwargs).to_json()


def test_a_real_dump_parses_into_threads_with_the_main_thread_found():
    threads = parse_dump(dump(BARRIER))
    assert len(threads) == 2
    reporter, main = threads
    assert not reporter.current and reporter.frames[0].function == "_bootstrap"  # oldest call first
    assert main.current and main_thread(threads) is main
    assert main.frames[-1] == Frame(main.frames[-1].file, 6371, "barrier")
    assert main.frames[-1].file.endswith("torch/distributed/distributed_c10d.py")


def test_the_bootstrap_frames_are_dropped_so_the_stack_starts_at_the_script():
    line, _text = marked("HANG")
    assert [f.short() for f in main_frames(BARRIER)] == [
        f"diag_hang.py:{line} in <module>", "c10d_logger.py:83 in wrapper", "distributed_c10d.py:6371 in barrier"]


def test_only_the_last_dump_of_an_appended_file_is_used():
    text = (DATA / "faulthandler_two_dumps.txt").read_text()
    last = last_dump(text)
    assert len(parse_dump(text)) == 4 and len(parse_dump(last)) == 2
    assert text.endswith(last) and len(last) < len(text)


def test_two_ranks_the_one_in_no_collective_is_the_culprit_with_its_line_and_the_other_waits_in_barrier():
    result = analysed({0: main_frames(BARRIER), 1: main_frames(HELPER)}, "stalled", 100.0,
                     progress={0: STALLED, 1: STALLED})
    verdict = result["verdict"]
    assert verdict["kind"] == "culprit" and verdict["level"] == "error"
    assert verdict["culprits"] == [1] and verdict["waiting"] == [0] and verdict["collective"] == "barrier"
    helper_line, helper_text = marked("WAIT")
    barrier_line, barrier_text = marked("HANG")
    assert verdict["message"] == ("rank 1 is the culprit: rank 0 waits in barrier, rank 1 is in no collective "
                                  f"(at diag_hang.py:{helper_line} in wait_for_checkpoint)")
    assert verdict["details"][0] == (f"rank 1 is at {SCRIPT}:{helper_line} in wait_for_checkpoint "
                                     f"(<module> → wait_for_checkpoint): {helper_text}")
    assert verdict["details"][1] == f"rank 0 waits in barrier, called at {SCRIPT}:{barrier_line} in <module>: " \
                                    f"{barrier_text}"
    places = {place["rank"]: place for place in result["places"]}
    assert places[0]["kind"] == "collective" and places[0]["op"] == "barrier"
    assert places[1]["kind"] == "user" and places[1]["frame"]["code"] == helper_text
    assert places[1]["chain"] == ["<module>", "wait_for_checkpoint"]
    culprit, waiting = result["groups"]
    assert (culprit["ranks"], culprit["role"], waiting["ranks"], waiting["role"]) == ([1], "culprit", [0], "waiting")
    assert culprit["frames"][culprit["mark"]]["line"] == helper_line
    assert "disagree" not in describe(result)


def test_any_number_of_ranks_every_rank_outside_the_collective_is_named():
    result = analysed({0: main_frames(BARRIER), 1: main_frames(HELPER), 2: main_frames(HELPER),
                      3: main_frames(BARRIER)}, "stalled", 1.0, progress={r: STALLED for r in range(4)})
    verdict = result["verdict"]
    assert verdict["culprits"] == [1, 2] and verdict["waiting"] == [0, 3]
    assert verdict["message"].startswith("ranks 1, 2 are the culprits: ranks 0, 3 wait in barrier, ranks 1, 2 are "
                                         "in no collective")
    assert [g["ranks"] for g in result["groups"]] == [[1, 2], [0, 3]]


def test_progressing_ranks_are_a_snapshot_never_a_disagreement():
    result = analysed({0: main_frames(BARRIER), 1: main_frames(HELPER)}, "requested", 1.0,
                     progress={0: MOVING, 1: MOVING})
    verdict = result["verdict"]
    assert verdict["kind"] == "progressing" and verdict["level"] == "info" and verdict["culprits"] == []
    assert verdict["message"] == "all 2 ranks are progressing (none stalled); a snapshot of where each was"
    text = format_stacks(result)
    assert "disagree" not in text and "culprit" not in text and "<<" not in text
    assert "ranks are progressing" in text


def test_a_progressing_rank_is_not_blamed_while_others_are_stuck():
    result = analysed({0: main_frames(BARRIER), 1: main_frames(HELPER), 2: main_frames(HELPER)}, "stalled", 1.0,
                     progress={0: STALLED, 1: STALLED, 2: MOVING})
    verdict = result["verdict"]
    assert verdict["culprits"] == [1] and verdict["progressing"] == [2]
    assert "rank 2 is progressing, not held up" in verdict["details"]


def test_ranks_waiting_in_a_collective_while_another_works_outside_any_wait_for_that_one():
    """rank 0 evaluates (working, no step) while the others wait in the barrier after the evaluation."""
    result = analysed({0: main_frames(HELPER), 1: main_frames(BARRIER), 2: main_frames(BARRIER)}, "stalled", 1.0,
                     progress={0: MOVING, 1: STALLED, 2: STALLED})
    verdict = result["verdict"]
    assert (verdict["kind"], verdict["level"]) == ("held_up", "warning")
    assert verdict["culprits"] == [0] and verdict["waiting"] == [1, 2]
    helper_line, _text = marked("WAIT")
    assert verdict["message"] == ("ranks 1, 2 wait in barrier for rank 0, which is working outside any collective "
                                  f"(at diag_hang.py:{helper_line} in wait_for_checkpoint): work on some ranks only "
                                  "(an evaluation, a checkpoint) holds up the others")


def test_all_ranks_in_the_same_collective_name_none_and_point_at_missing_ranks():
    result = analysed({0: main_frames(BARRIER), 1: main_frames(BARRIER)}, "stalled", 1.0,
                     [MissingStack(2, "on another host (node-b)")], progress={0: STALLED, 1: STALLED})
    verdict = result["verdict"]
    assert verdict["kind"] == "all_waiting" and verdict["culprits"] == [] and verdict["level"] == "warning"
    assert verdict["message"] == "every stalled rank waits in barrier: rank 2 gave no stack and may be the one missing"
    assert result["identical"]


def test_without_step_telemetry_the_verdict_says_it_judged_from_the_stacks_alone():
    result = analysed({0: main_frames(BARRIER), 1: main_frames(HELPER)}, "requested", 1.0)
    verdict = result["verdict"]
    assert verdict["culprits"] == [1] and verdict["level"] == "warning" and not verdict["progress_known"]
    assert verdict["message"].startswith("if the ranks are stuck (no step telemetry to tell), rank 1 is the culprit")


def test_the_side_by_side_view_names_the_culprit_and_marks_its_line():
    result = analysed({0: main_frames(BARRIER), 1: main_frames(HELPER)}, "stalled", 1.0,
                     progress={0: STALLED, 1: STALLED})
    helper_line, helper_text = marked("WAIT")
    text = format_stacks(result, width=120)
    header = text.splitlines()[1]
    assert "rank 1  <- culprit" in header and "rank 0  (waits in barrier)" in header and " | " in header
    assert f"diag_hang.py:{helper_line} in wait_for_checkpoint <<" in text
    assert f"  rank 1 is at {SCRIPT}:{helper_line} in wait_for_checkpoint" in text and helper_text in text
    narrow = format_stacks(result, width=40)
    assert " | " not in narrow and f"diag_hang.py:{helper_line} in wait_for_checkpoint <<" in narrow


def test_missing_ranks_are_listed_with_the_reason():
    result = analysed({0: main_frames(HELPER)}, "requested", 1.0, [MissingStack(1, "process 9 is gone")])
    assert result["missing"] == [{"rank": 1, "why": "process 9 is gone"}]
    assert "rank 1: no stack (process 9 is gone)" in format_stacks(result)


def test_a_capture_stored_by_an_earlier_version_is_judged_from_its_frames():
    frames = [frame.to_json() for frame in main_frames(BARRIER)]
    helper = [frame.to_json() for frame in main_frames(HELPER)]
    old = {"reason": "stalled", "t": 5.0, "ranks": [0, 1], "missing": [], "reference": None, "outlier": None,
           "identical": False, "groups": [{"ranks": [0], "frames": frames, "differs_at": None},
                                          {"ranks": [1], "frames": helper, "differs_at": None}]}
    judged = ensure_verdict(old)
    assert judged["t"] == 5.0 and judged["verdict"]["culprits"] == [1]
    assert "rank 1 is the culprit" in format_stacks(old)


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
    script = stacks_dir.parent / "sleeper.py"
    script.write_text(SLEEPER)
    process = subprocess.Popen([sys.executable, str(script), str(WORKER_PATH), str(stacks_dir), str(rank)],
                               stdout=subprocess.PIPE, text=True)
    assert process.stdout.readline().strip() == "ready"
    return process


def test_capture_signals_each_rank_and_reads_its_new_dump(tmp_path):
    """Real processes with the worker's handler: each dumps on the signal, the capture reads it."""
    tmp_path = tmp_path / "stacks"
    processes = [start_sleeper(tmp_path, rank) for rank in (0, 1)]
    unprotected = subprocess.Popen([sys.executable, "-c", "import time; print('ready', flush=True); time.sleep(60)"],
                                   stdout=subprocess.PIPE, text=True)
    assert unprotected.stdout.readline().strip() == "ready"
    try:
        hub = FakeHub()
        for rank, process in enumerate([*processes, unprotected]):
            hub.hello(rank, pid=process.pid)
        results = []
        capture = StackCapture(hub, tmp_path, on_result=lambda result: results.append(result.to_json()))
        assert capture.capture_stacks(reason="requested")
        assert not capture.capture_stacks(reason="requested")  # one at a time
        deadline = time.monotonic() + 5
        while not results and time.monotonic() < deadline:
            capture.tick(time.time())  # no event loop here: ticks drive the polling
            time.sleep(0.05)
        [result] = results
        assert result["ranks"] == [0, 1] and result["identical"]
        assert [f["function"] for f in result["groups"][0]["frames"]][-1] == "wait_for_data"
        [place] = {(p["kind"], p["frame"]["function"], p["frame"]["code"]) for p in result["places"]}
        assert place == ("user", "wait_for_data", "time.sleep(60)")
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
        {"rank": 0, "why": "on another host (node-b): no node agent could be asked for its stack (Slurm nodes: not yet)"}]


def test_the_remote_hook_feeds_dumps_from_other_hosts_into_the_same_capture(tmp_path):
    hub = FakeHub()
    hub.hello(0, pid=os.getpid(), host="node-b")
    asked = []
    capture = StackCapture(hub, tmp_path, is_local=lambda row: False,
                           remote_capture=lambda rows: asked.extend(row.rank for row in rows) or [0])
    assert capture.capture_stacks(reason="requested") and asked == [0]
    capture.add_remote_dump(0, dump(BARRIER))  # as node-b's agent would forward it
    capture.tick(time.time())
    capture.tick(time.time())
    [event] = hub.of_kind("stacks")
    assert event["ranks"] == [0] and event["missing"] == []
    assert event["groups"][0]["frames"][-1]["function"] == "barrier"


def test_rankwatchs_own_wrappers_are_not_shown_in_a_ranks_stack():
    frames = [Frame("/site/rankwatch/_bootstrap.py", 90, "main"), Frame("/job/train.py", 35, "<module>"),
              Frame("/site/rankwatch/_phases.py", 218, "collective"),  # our marked dist.barrier
              Frame("/torch/distributed/c10d_logger.py", 83, "wrapper"),
              Frame("/job/rankwatch/helpers.py", 3, "mine")]  # a user's own folder named rankwatch stays
    assert [(frame.file, frame.line) for frame in user_frames(frames)] == [
        ("/job/train.py", 35), ("/torch/distributed/c10d_logger.py", 83), ("/job/rankwatch/helpers.py", 3)]


def test_a_thousand_ranks_read_as_ranges_with_the_culprit_group_first():
    """1,024 ranks, rank 512 outside the barrier: two groups, the culprit's first, and every message
    names the waiting ranks as two ranges, not a thousand numbers."""
    stacks = {rank: main_frames(HELPER if rank == 512 else BARRIER) for rank in range(1024)}
    result = analysed(stacks, "stalled", 1.0, progress={rank: STALLED for rank in range(1024)})
    verdict = result["verdict"]
    assert verdict["culprits"] == [512]
    assert verdict["message"].startswith("rank 512 is the culprit: ranks 0-511, 513-1023 wait in barrier")
    assert [(g["role"], len(g["ranks"])) for g in result["groups"]] == [("culprit", 1), ("waiting", 1023)]
    text = format_stacks(result)
    assert "ranks 0-511, 513-1023" in text and len(text) < 8000


def test_ranks_text_keeps_short_lists_and_runs_three_or_more_into_ranges():
    from runner.format import rank_ranges, ranks_text
    assert ranks_text([3]) == "rank 3"
    assert ranks_text([1, 0]) == "ranks 0, 1"
    assert ranks_text([0, 2, 5]) == "ranks 0, 2, 5"
    assert ranks_text([5, 4, 3, 2, 0]) == "ranks 0, 2-5"
    assert rank_ranges([*range(512), *range(513, 1024), 7]) == "0-511, 513-1023"


def test_rank_ranges_read_back_what_they_write():
    from runner.format import parse_rank_ranges, rank_ranges

    ranks = {0, 1, 2, 5, 7, 8, 9, 512}
    assert parse_rank_ranges(rank_ranges(ranks)) == ranks
    assert parse_rank_ranges("512-514 3") == {3, 512, 513, 514}
