"""A run's findings read back from the JSON the runner stored: the same typed values, leniently.

The GUI and every other reader of a stored summary or of the monitors' events decode through
these (``StoredDiagnostics``, ``CaptureRecord``, ``finding_events``) instead of string keys.
"""

from __future__ import annotations

import json

from rankwatch.protocol import Bottleneck, Event
from runner.diagnosis.bottleneck_record import BottleneckRecord, BottleneckVerdict
from runner.diagnosis.finding_events import EarlyFailure, StallEvent
from runner.diagnosis.findings import (
    Divergence,
    Findings,
    LauncherFinding,
    StallFinding,
    StoredDiagnostics,
)
from runner.diagnosis.hang_verdict import VerdictKind, VerdictLevel
from runner.diagnosis.progress import RankProgress
from runner.diagnosis.stacks import CaptureFiles, CaptureRecord, MissingStack
from runner.diagnosis.stacks import analyse as analyse_stacks
from runner.diagnosis.straggler_record import StragglerCause, StragglerRecord
from tests.diagnosis.test_stacks import BARRIER, HELPER, main_frames


def stalled_capture():
    stalled = RankProgress(step=7, idle_seconds=6.0, stalled=True, progressing=False)
    analysis = analyse_stacks({0: main_frames(BARRIER), 1: main_frames(HELPER)}, "stalled", 1.0,
                              [MissingStack(2, "process 9 is gone")], progress={0: stalled, 1: stalled})
    analysis.files = CaptureFiles(path="/runs/3/stacks/capture-1.json", text_path="/runs/3/stacks/capture-1.txt")
    return analysis


def test_a_stored_diagnostics_block_reads_back_into_the_findings_that_wrote_it():
    findings = Findings()
    findings.add_stall(StallFinding(rank=1, step=7, since=100.0, seconds=6.0, threshold=5.0, finished_after=20.0))
    findings.add_divergence(Divergence(step=14, ranks=[1], reference=[0], message="parameters differ"))
    findings.set_launcher("self_spawn", LauncherFinding(key="self_spawn", level="warning", ranks=[0, 1], title="t",
                                                        cause="c", advice="a"))
    findings.set_stacks(stalled_capture())
    findings.stragglers[1] = StragglerRecord(rank=1, cause=StragglerCause.DATA, step=6, step_time=0.2, excess=0.1,
                                             window=6, message="rank 1 is a straggler: x", held_steps=30, steps=40,
                                             share=0.75)
    findings.bottleneck = BottleneckRecord(BottleneckVerdict(Bottleneck.INPUT, "waiting for data", "feed it",
                                                             shares={"data": 0.5}, clock="cpu", steps=40),
                                           "input-bound: waiting for data",
                                           {0: BottleneckVerdict(Bottleneck.INPUT, "waiting", steps=40)})
    findings.consistency_checks = 3
    stored = json.loads(json.dumps(findings.to_json()))  # as the store gives it back

    read = StoredDiagnostics.from_wire(stored)
    assert read.stalls == tuple(findings.stalls)
    assert read.divergences == tuple(findings.divergences)
    assert read.launcher == tuple(findings.launcher.values())
    assert read.stragglers == (findings.stragglers[1],)
    assert read.bottleneck == findings.bottleneck
    assert read.stacks is not None and read.stacks.to_json() == stored["stacks"]
    assert read.stacks.verdict.kind is VerdictKind.CULPRIT and read.stacks.verdict.culprits == [1]
    assert read.consistency_checks == 3


def test_what_a_stored_block_cannot_say_is_left_out_not_guessed():
    assert StoredDiagnostics.from_wire(None) == StoredDiagnostics()
    read = StoredDiagnostics.from_wire({"stalls": [{"step": 3}, "junk"], "stragglers": "junk",
                                        "bottleneck": {"verdict": "from-a-newer-runner", "evidence": "e"}})
    assert read.stalls == () and read.stragglers == ()  # a stall without its rank names nobody
    assert read.bottleneck is not None and read.bottleneck.verdict.kind is None  # not determined, by this version


def test_a_capture_read_back_keeps_its_verdict_groups_missing_ranks_and_files():
    analysis = stalled_capture()
    capture = CaptureRecord.from_wire(json.loads(json.dumps(analysis.to_json())))
    assert capture.verdict == analysis.verdict and capture.groups == analysis.groups
    assert capture.missing == analysis.missing and capture.identical is False
    assert (capture.reason, capture.t, capture.ranks) == ("stalled", 1.0, [0, 1])
    assert capture.text_path == "/runs/3/stacks/capture-1.txt"
    culprit = capture.groups[0]
    assert culprit.role == "culprit" and culprit.source_frames()[culprit.mark].function == "wait_for_checkpoint"


def test_a_capture_of_an_earlier_version_without_a_verdict_is_judged_when_read():
    frames = [{"file": "/w/train.py", "line": 40, "function": "<module>"},
              {"file": "/w/site-packages/torch/distributed/distributed_c10d.py", "line": 12, "function": "barrier"}]
    capture = CaptureRecord.from_wire({"reason": "stalled", "t": 1.0, "ranks": [0, 1], "identical": True,
                                       "missing": [{"rank": 2, "why": "no dump within 2 s"}],
                                       "groups": [{"ranks": [0, 1], "differs_at": None, "frames": frames}]})
    assert capture.verdict is not None and capture.verdict.kind is VerdictKind.ALL_WAITING
    assert capture.verdict.level is VerdictLevel.WARNING and capture.missing == [MissingStack(2, "no dump within 2 s")]


def test_a_stall_event_says_how_long_its_rank_has_been_stalled():
    flagged = StallEvent.from_event(Event(105.0, "stalled", 1, "rank 1 stalled",
                                          {"step": 11, "seconds": 5.0, "threshold": 5.0, "last_progress": 100.0}))
    assert (flagged.rank, flagged.step, flagged.threshold) == (1, 11, 5.0)
    assert flagged.stalled_for(112.0) == 12.0
    older = StallEvent.from_event(Event(105.0, "stalled", 1, "", {"seconds": 5.0}))  # no last_progress
    assert older.step is None and older.stalled_for(112.0) == 12.0


def test_an_early_failure_is_worded_by_its_kind():
    assert EarlyFailure.from_event(Event(1.0, "rank_failed", 0, "", {"exit_code": 1})).text == \
        "rank 0 failed (exit code 1)"
    assert EarlyFailure.from_event(Event(1.0, "exception", 1, "ValueError: x", {})).text == "rank 1 raised ValueError: x"
    assert EarlyFailure.from_event(Event(1.0, "connection_lost", 2, "gone", {})).text == \
        "rank 2 disconnected without an exit message (killed?)"
