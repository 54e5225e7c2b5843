"""The typed findings write the JSON their dicts wrote: the GUI, the terminal view and stored runs read it.

Each expected text below was printed by the code before these types (a dict per finding), from
the same inputs; ``json.dumps`` keeps key order, so a key moved or renamed shows here.
"""

from __future__ import annotations

import json

from rankwatch._flight_recorder import from_trace
from runner.diagnosis.doctor import DoctorFacts, judge
from runner.diagnosis.findings import Findings, LauncherFinding
from runner.diagnosis.flight_recorder import analyse
from runner.diagnosis.progress import RankProgress
from runner.diagnosis.stacks import CaptureFiles, MissingStack
from runner.diagnosis.stacks import analyse as analyse_stacks
from tests.diagnosis.test_doctor import facts
from tests.diagnosis.test_flight_recorder import entry, trace
from tests.diagnosis.test_stacks import BARRIER, HELPER, main_frames


def test_a_flight_recorder_analysis_writes_the_json_of_the_dict_it_was():
    waiting = from_trace(trace([entry(seq) for seq in range(1, 32)], completed=30))
    analysis = analyse({0: waiting, 1: {"error": "no FR"}})
    assert json.dumps(analysis.to_json()) == (
        '{"message": "every rank is in collective #31 (gloo:all_reduce): none is missing; the collective itself '
        'does not finish (network, a peer process gone)", "culprits": [], "seq": null, "group": null, "ranks": '
        '{"0": {"0": {"entered": {"seq": 31, "op": "gloo:all_reduce", "input_sizes": [[4]], "state": "scheduled", '
        '"record_id": 30}, "completed": 30}}}, "errors": {"1": "no FR"}, "lines": ["rank 0 [default group]: last '
        'entered #31 gloo:all_reduce (waiting), last completed #30", "rank 1: no Flight Recorder (no FR)"]}')


def test_a_stack_capture_and_its_summary_block_keep_their_keys_in_order():
    stalled = RankProgress(step=7, idle_seconds=6.0, stalled=True, progressing=False)
    analysis = analyse_stacks({0: main_frames(BARRIER), 1: main_frames(HELPER)}, "stalled", 1.0,
                              [MissingStack(2, "process 9 is gone")], progress={0: stalled, 1: stalled})
    analysis.files = CaptureFiles(path="/runs/3/stacks/capture-1.json", text_path="/runs/3/stacks/capture-1.txt")
    capture = analysis.to_json()
    assert list(capture) == ["reason", "t", "ranks", "missing", "progress", "places", "verdict", "groups",
                             "identical", "path", "text_path"]
    assert list(capture["verdict"]) == ["culprits", "waiting", "collective", "progressing", "details",
                                        "progress_known", "kind", "level", "message"]
    assert capture["progress"][0] == {"rank": 0, "step": 7, "idle_seconds": 6.0, "stalled": True,
                                      "progressing": False}
    assert capture["missing"] == [{"rank": 2, "why": "process 9 is gone"}]
    findings = Findings()
    findings.set_stacks(analysis)
    stacks = findings.to_json()["stacks"]
    assert list(stacks) == ["reason", "t", "ranks", "verdict", "places", "missing", "path", "json_path"]
    assert (stacks["path"], stacks["json_path"]) == ("/runs/3/stacks/capture-1.txt", "/runs/3/stacks/capture-1.json")
    assert stacks["places"][1] == {key: capture["places"][1][key] for key in ("rank", "kind", "op", "what", "frame")}
    assert stacks["verdict"] == capture["verdict"]


def test_a_launcher_finding_is_stored_as_the_record_it_was():
    findings = Findings()
    findings.set_launcher("self_spawn", LauncherFinding(key="self_spawn", level="warning", ranks=[0, 1], title="t",
                                                        cause="c", advice="a"))
    assert json.dumps(findings.to_json()) == (
        '{"launcher": [{"key": "self_spawn", "level": "warning", "ranks": [0, 1], "title": "t", "cause": "c", '
        '"advice": "a"}]}')


def test_doctor_facts_read_back_from_their_json_write_it_again_with_the_threads_total_judged():
    typed = DoctorFacts.from_json(facts())
    judge(typed)
    assert typed.to_json() == {**facts(), "threads": {**facts()["threads"], "threads_total": 8}}
