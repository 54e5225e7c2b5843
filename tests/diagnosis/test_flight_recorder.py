"""The Flight Recorder comparison on records shaped like torch 2.14's gloo dumps.

The entries below have the fields and values ``_dump_fr_trace`` gave on this torch
(4 ranks, gloo; rank 2 skipped the all_reduce of one step). The real job runs in
``test_diagnosis_jobs.py``.
"""

from __future__ import annotations

import pickle

import pytest

from rankwatch._flight_recorder import from_trace
from rankwatch.protocol import FlightRecord
from runner.diagnosis.findings import Findings
from runner.diagnosis.flight_recorder import analyse, read_dump_file
from runner.diagnosis.flight_records import FlightRecorderMonitor
from runner.diagnosis.progress import RankProgress
from tests.diagnosis.fakes import FakeHub


def entry(seq: int, op: str = "gloo:all_reduce", sizes=((4,),), retired: bool = True) -> dict:
    return {"record_id": seq - 1, "pg_id": 0, "process_group": ("0", "default_pg"), "thread_name": "python",
            "thread_id": "140083830995840", "collective_seq_id": seq, "p2p_seq_id": 0, "op_id": seq,
            "profiling_name": op, "time_created_ns": 1795365957025192784 + seq, "input_sizes": [list(s) for s in sizes],
            "input_dtypes": ["Float"] * len(sizes), "output_sizes": [list(s) for s in sizes],
            "output_dtypes": ["Float"] * len(sizes), "state": "scheduled", "time_discovered_started_ns": None,
            "time_discovered_completed_ns": None, "retired": retired, "timeout_ms": 1800000, "is_p2p": False}


def trace(entries: list[dict], completed: int, world: int = 4) -> dict:
    """torch's dump as ``pickle.loads(_dump_fr_trace(...))`` returns it."""
    return {"version": "2.10", "pg_config": {"": {"name": "", "desc": "", "ranks": str(list(range(world)))}},
            "comm_lib_version": "", "entries": entries,
            "pg_status": {"0": {"last_enqueued_collective": entries[-1]["collective_seq_id"] if entries else -1,
                                "last_started_collective": -1, "last_completed_collective": completed}}}


def test_a_rank_that_never_entered_the_collective_the_others_wait_in_is_named_with_both_ids():
    waiting = from_trace(trace([entry(seq) for seq in range(1, 32)], completed=30))
    stuck = from_trace(trace([entry(seq) for seq in range(1, 31)], completed=30))
    result = analyse({0: waiting, 1: waiting, 2: stuck, 3: waiting})
    assert result.culprits == [2] and result.seq == 31
    assert result.message == ("rank 2 never entered collective #31 (gloo:all_reduce) that ranks 0, 1, 3 are "
                                 "waiting in; its last was #30 gloo:all_reduce")
    assert "rank 0 [default group]: last entered #31 gloo:all_reduce (waiting), last completed #30" in result.lines
    assert "rank 2 [default group]: last entered #30 gloo:all_reduce, last completed #30" in result.lines


def test_many_ranks_that_never_entered_it_are_named_as_ranges_with_their_last_collective_once():
    """At 1,024 ranks rank 0 waits in #31 and the others never entered it, each last in #30: one
    phrase for their last collective, not 1,023."""
    world = 1024
    waiting = from_trace(trace([entry(seq) for seq in range(1, 32)], completed=30, world=world))
    stuck = from_trace(trace([entry(seq) for seq in range(1, 31)], completed=30, world=world))
    result = analyse({0: waiting, **{rank: stuck for rank in range(1, world)}})
    assert result.culprits == list(range(1, world)) and result.seq == 31
    assert result.message == ("ranks 1-1023 never entered collective #31 (gloo:all_reduce) that rank 0 is waiting "
                              "in; their last was #30 gloo:all_reduce")


def test_a_rank_that_skipped_an_all_reduce_and_waits_in_the_next_collective_is_the_odd_one():
    """As recorded: rank 2 skipped step 3's all_reduce, so its #6 is the barrier after the loop."""
    others = from_trace(trace([entry(seq) for seq in range(1, 6)] + [entry(6, retired=False)], completed=5))
    rank_2 = from_trace(trace([entry(seq) for seq in range(1, 6)] + [entry(6, "gloo:barrier", (), False)],
                              completed=5))
    result = analyse({0: others, 1: others, 2: rank_2, 3: others})
    assert result.culprits == [2] and result.seq == 6
    assert result.message.startswith(
        "rank 2 called a different collective #6 than ranks 0, 1, 3 (gloo:all_reduce sizes [[4]]; "
        "rank 2: gloo:barrier no tensors)")


def test_ranks_all_waiting_in_the_same_collective_name_nobody():
    same = from_trace(trace([entry(seq) for seq in range(1, 8)], completed=6))
    result = analyse({0: same, 1: same})
    assert result.culprits == [] and "every rank is in collective #7 (gloo:all_reduce)" in result.message
    done = from_trace(trace([entry(seq) for seq in range(1, 8)], completed=7))
    assert analyse({0: done, 1: done}).message.startswith("the ranks' collectives are in step")


def test_a_rank_without_a_recorder_is_listed_with_why():
    same = from_trace(trace([entry(1)], completed=1))
    result = analyse({0: same, 1: {"error": "this torch has no Flight Recorder"}})
    assert result.errors == {1: "this torch has no Flight Recorder"}
    assert "rank 1: no Flight Recorder (this torch has no Flight Recorder)" in result.lines


def test_nccls_dump_on_timeout_file_is_read_as_the_same_record(tmp_path):
    path = tmp_path / "nccl_trace_rank_2"
    path.write_bytes(pickle.dumps(trace([entry(seq, "nccl:all_reduce") for seq in range(1, 4)], completed=2)))
    record = read_dump_file(path)
    assert [e["collective_seq_id"] for e in record["entries"]] == [1, 2, 3]
    assert record["entries"][0]["process_group"] == ["0", "default_pg"]
    (tmp_path / "garbage").write_bytes(b"not a pickle")
    with pytest.raises(ValueError, match="is not a Flight Recorder dump"):
        read_dump_file(tmp_path / "garbage")


def test_the_flight_recorder_is_switched_on_by_the_name_this_torch_reads_without_importing_torch():
    from rankwatch import _flight_recorder

    environ: dict[str, str] = {}
    assert _flight_recorder.enable(environ) == _flight_recorder.DEFAULT_ENTRIES
    # torch 2.14 here: the current name only (the NCCL one makes every rank print a deprecation)
    assert environ == {"TORCH_FR_BUFFER_SIZE": str(_flight_recorder.DEFAULT_ENTRIES)}
    assert _flight_recorder._torch_before((99, 0)) and not _flight_recorder._torch_before((2, 0))


def skewed_snapshot() -> dict[int, dict]:
    """Seen on a healthy 2-rank job: rank 0's record was read in all_reduce #1599, rank 1's a moment
    earlier, after #1598."""
    ahead = from_trace(trace([entry(seq) for seq in range(1590, 1600)], completed=1598, world=2))
    behind = from_trace(trace([entry(seq) for seq in range(1590, 1599)], completed=1598, world=2))
    return {0: ahead, 1: behind}


def test_the_collectives_of_ranks_that_all_progress_are_not_compared():
    records = skewed_snapshot()
    result = analyse(records, stuck=set())
    assert result.culprits == [] and result.seq is None
    assert result.message == ("all 2 ranks are progressing: their records were read one after another while "
                                 "they trained, so their collectives are not compared")
    assert "rank 0 [default group]: last entered #1599 gloo:all_reduce, last completed #1598" in result.lines
    stuck = analyse(records, stuck={0})  # a rank that does not progress: compared, as without progress
    assert stuck.culprits == [1] == analyse(records).culprits
    assert stuck.message.startswith("rank 1 never entered collective #1599 (gloo:all_reduce) that rank 0 is")


@pytest.mark.parametrize("progressing", [True, False])
def test_a_capture_of_a_progressing_job_names_no_rank_that_never_entered_a_collective(tmp_path, progressing):
    """``rankwatch stacks`` on a healthy job said "rank 1 never entered collective #1599 ... that rank 0 is
    waiting in" next to "all 2 ranks are progressing": the monitor now asks whether the ranks progress."""
    hub = FakeHub()
    for rank in range(2):
        hub.hello(rank, pid=1000 + rank)
    findings = Findings()
    monitor = FlightRecorderMonitor(hub, tmp_path, findings)
    monitor.progress_of = lambda row, now: RankProgress(step=800, idle_seconds=0.0, stalled=not progressing,
                                                        progressing=progressing)
    for rank, record in skewed_snapshot().items():
        monitor.on_message(FlightRecord.from_wire({"type": "flight_record", "rank": rank, "record": record}))
    monitor.tick(0.0)  # every running rank answered
    [event] = hub.of_kind("flight_recorder")
    if progressing:
        assert event["culprits"] == [] and event["stuck"] == [] and "are progressing" in event["message"]
        assert findings.flight_recorder is None  # a snapshot of a healthy job is not a finding of the run
    else:
        assert event["culprits"] == [1] and event["stuck"] == [0, 1]
        assert findings.flight_recorder.message.startswith("rank 1 never entered collective #1599")
