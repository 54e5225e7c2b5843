"""The typed findings write the JSON their dicts wrote: the GUI, the terminal view and stored runs read it.

Each expected text below was printed by the code before these types (a dict per finding), from
the same inputs; ``json.dumps`` keeps key order, so a key moved or renamed shows here.
"""

from __future__ import annotations

import json
import time

from rankwatch._flight_recorder import from_trace
from rankwatch.protocol import Event
from runner.diagnosis.bottleneck import BottleneckMonitor
from runner.diagnosis.bottleneck_record import BottleneckRecord
from runner.diagnosis.doctor import DoctorFacts, judge
from runner.diagnosis.findings import Findings, LauncherFinding
from runner.diagnosis.flight_recorder import analyse
from runner.diagnosis.progress import RankProgress
from runner.diagnosis.stacks import CaptureFiles, MissingStack
from runner.diagnosis.stacks import analyse as analyse_stacks
from runner.diagnosis.straggler_record import StragglerRecord, StragglerWithdrawn, straggler_of
from tests.diagnosis.test_doctor import facts
from tests.diagnosis.test_flight_recorder import entry, trace
from tests.diagnosis.test_monitors import step_message, stepping_hub, straggler_monitor
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


def rank_two_computes_longer() -> tuple[list[dict], Findings]:
    """Three ranks of 100 ms steps; rank 2 computes 70 ms (others 30 ms) until step 29, catches up until 45,
    then computes 90 ms to the end: named, withdrawn, named again with a larger excess, still named at the
    end. The straggler and bottleneck monitors' events (as the store keeps their data) and findings."""
    hub, findings = stepping_hub(3), Findings()
    stragglers, windows = straggler_monitor(hub, findings)
    bottleneck = BottleneckMonitor(hub, windows, stragglers, findings)
    for number in range(1, 90):
        for rank in range(3):
            slow = rank == 2 and (number < 30 or number > 45)
            windows.on_message(step_message(rank, number, 0.100, (0.090 if number > 45 else 0.07) if slow else 0.030))
        stragglers.tick(time.time())
        bottleneck.tick(time.time())
    stragglers.conclude()
    bottleneck.conclude()
    return hub.events, findings


def stored_data(event: dict) -> str:
    """The event's ``events.data`` as the store keeps it: its message, then its fields in order."""
    return json.dumps({key: value for key, value in event.items() if key not in ("kind", "rank", "t")})


STRAGGLER_FINDING = (
    '{"rank": 2, "cause": "compute", "phase": "forward", "step": 58, "since_step": 43, "step_time": 0.1, '
    '"data_wait": null, "compute_time": 0.09, "others_step_time": 0.1, "others_data_wait": null, '
    '"others_compute_time": 0.03, "excess": 0.06, "margin": 0.003, "window": 6, "message": "rank 2 is a straggler: '
    'it computes longer (90 ms of its 100 ms step vs 30 ms on the other ranks, which wait for it in collectives, '
    'most in forward: 90 ms); for 74 of its 89 steps", "held_steps": 74, "steps": 89, "share": 0.831}')
NAMED_AGAIN = (
    '{"message": "rank 2 is a straggler: it computes longer (90 ms of its 100 ms step vs 30 ms on the other ranks, '
    'which wait for it in collectives, most in forward: 90 ms)", "active": true, "cause": "compute", "phase": '
    '"forward", "step": 58, "since_step": 43, "step_time": 0.1, "data_wait": null, "compute_time": 0.09, '
    '"others_step_time": 0.1, "others_data_wait": null, "others_compute_time": 0.03, "excess": 0.06, '
    '"margin": 0.003, "window": 6}')
WITHDRAWN = ('{"message": "rank 2 is no longer a straggler: since step 28 its excess over the other ranks stayed '
             'under half the noise margin", "active": false, "step": 43, "held_steps": 27}')
RANK_TWO_VERDICT = (
    '{"verdict": "compute-bound", "evidence": "forward, backward and optimizer 73% of the step, the rest \\u2013 '
    '(data \\u2013, communication 27%)", "action": "healthy: the device computes; to go faster, compute less '
    '(mixed precision, torch.compile) or add devices", "rank": null, "phase": "forward", "shares": {"data": null, '
    '"h2d": null, "forward": 0.7269662921348318, "backward": null, "comm": 0.2730337078651682, "optimizer": null, '
    '"rest": null}, "clock": "cpu", "gpu_busy": null, "steps": 89}')
RUN_VERDICT = (
    '{"verdict": "straggler", "evidence": "rank 2 is a straggler: it computes longer (90 ms of its 100 ms step vs '
    '30 ms on the other ranks, which wait for it in collectives, most in forward: 90 ms); for 74 of its 89 steps", '
    '"action": "look at that rank\'s device: another process on it, its clocks or temperature, or a rank that does '
    'extra work (a larger shard, logging or evaluation on one rank only)", "rank": 2, "phase": "forward", "shares": '
    'null, "clock": null, "gpu_busy": null, "steps": 0, "message": "rank 2 is a straggler: it computes longer (90 ms '
    'of its 100 ms step vs 30 ms on the other ranks, which wait for it in collectives, most in forward: 90 ms); for '
    '74 of its 89 steps", "ranks": {')
LIVE_STRAGGLER_VERDICT = (
    '{"message": "rank 2 is a straggler: it computes longer (90 ms of its 100 ms step vs 30 ms on the other ranks, '
    'which wait for it in collectives, most in forward: 90 ms)", "verdict": "straggler", "evidence": "rank 2 is a '
    'straggler: it computes longer (90 ms of its 100 ms step vs 30 ms on the other ranks, which wait for it in '
    'collectives, most in forward: 90 ms)", "action": "look at that rank\'s device: another process on it, its '
    'clocks or temperature, or a rank that does extra work (a larger shard, logging or evaluation on one rank '
    'only)", "phase": "forward", "shares": null, "clock": null, "gpu_busy": null, "steps": 0, "ranks": {"0": ')


def test_a_straggler_finding_and_its_events_write_the_json_of_the_dicts_they_were():
    events, findings = rank_two_computes_longer()
    stragglers = [event for event in events if event["kind"] == "straggler"]
    assert [(event["rank"], event["active"]) for event in stragglers] == [(2, True), (2, False), (2, True)]
    assert stored_data(stragglers[1]) == WITHDRAWN
    assert stored_data(stragglers[2]) == NAMED_AGAIN
    [finding] = findings.to_json()["stragglers"]
    assert json.dumps(finding) == STRAGGLER_FINDING  # the worse naming, its steps counted over both


def event_fields(event: dict) -> dict:
    """The event's own fields, as ``Event.fields`` holds them (no kind, rank, time or message)."""
    return {key: value for key, value in event.items() if key not in ("kind", "rank", "t", "message")}


def test_a_straggler_read_back_from_its_json_or_its_event_writes_it_again():
    events, findings = rank_two_computes_longer()
    stored = json.loads(STRAGGLER_FINDING)
    assert StragglerRecord.from_wire(stored) == findings.stragglers[2]
    assert StragglerRecord.from_wire(stored).to_wire() == stored
    named, withdrawn, _again = (event for event in events if event["kind"] == "straggler")
    record = straggler_of(Event(0.0, "straggler", 2, named["message"], event_fields(named)))
    assert isinstance(record, StragglerRecord) and (record.rank, record.step, record.excess) == (2, 15, 0.04)
    assert record.message == named["message"] and record.event_fields() == event_fields(named)
    gone = straggler_of(Event(0.0, "straggler", 2, withdrawn["message"], event_fields(withdrawn)))
    assert isinstance(gone, StragglerWithdrawn) and (gone.step, gone.held_steps) == (43, 27)
    assert gone.event_fields() == event_fields(withdrawn)
    assert StragglerRecord.from_wire({"rank": 1, "cause": "from a newer runner", "step_time": "fast"}) == \
        StragglerRecord(rank=1, cause=None)  # what this version cannot read is not known


def test_the_bottleneck_verdict_and_its_events_write_the_json_of_the_dicts_they_were():
    events, findings = rank_two_computes_longer()
    verdict = json.dumps(findings.to_json()["bottleneck"])
    assert verdict.startswith(RUN_VERDICT)
    assert f'"2": {RANK_TWO_VERDICT}' in verdict
    live = [stored_data(event) for event in events if event["kind"] == "bottleneck"]
    assert [event["rank"] for event in events if event["kind"] == "bottleneck"] == [None, 2, None, 2]
    assert live[-1].startswith(LIVE_STRAGGLER_VERDICT)
    stored = findings.to_json()["bottleneck"]
    assert BottleneckRecord.from_wire(stored) == findings.bottleneck
    assert BottleneckRecord.from_wire(stored).to_wire() == stored
    last = next(event for event in reversed(events) if event["kind"] == "bottleneck")
    fields = event_fields(last)
    typed = BottleneckRecord.from_event(Event(0.0, "bottleneck", last["rank"], last["message"], fields))
    assert typed.event_fields() == fields and typed.verdict.rank == 2 and sorted(typed.ranks) == [0, 1, 2]
