"""The GUI names the right rank and cause for every failure kind of issue 5.

The fixtures in ``data/`` were recorded from real torchrun jobs of the
``tests/scripts/diag_*.py`` scripts (``data/capture.py``): an exception in rank 1,
rank 1 killed by SIGKILL, rank 0 in a barrier while rank 1 sleeps in a helper (a
hang, 2 ranks, stall timeout 5 s), a healthy 2-rank run dumped while it steps, rank
1 sleeping in its data loader (a straggler, with a
divergence), a rendezvous port already taken, a legacy ``--local_rank`` script
run without the toggle. They are replayed through the real hub
(``replay_run.py``) into the real monitor panel, or loaded from the run store
as History does; the tests read what the banner, the diagnosis panel, the rank
table and the stacks view show.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest
from live_run import LiveRun
from PySide6.QtCore import Qt
from replay_run import ReplayRun, load_fixture, store_fixture

from gui.gateway.store_reads import StoreReads
from gui.models.diagnosis import ERROR, WARNING, DiagnosisModel
from gui.models.monitor import MonitorModel
from gui.models.stacks import layout_capture
from gui.widgets.monitor_panel import MonitorPanel
from gui.widgets.rank_table import state_tint
from gui.widgets.stacks_view import CULPRIT_COLOR, CULPRIT_MARK, NO_CAPTURE_ENDED
from rankwatch import protocol
from runner.cli.main import main as cli_main
from runner.runstate.messages import (
    Event,
    EventKind,
    LogLine,
    NodeInfo,
    RankInfo,
    RunInfo,
    SnapshotMessage,
    StalledFields,
    event_of,
)
from runner.store.store import RunStore
from tests.hub_messages import run_changes, update

pytestmark = pytest.mark.gui

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


def marked_line(script: Path, marker: str) -> int:
    """The line number of the statement tagged ``# MARKER`` in a test script."""
    for number, line in enumerate(script.read_text().splitlines(), start=1):
        if f"# {marker}" in line:
            return number
    raise AssertionError(f"no '# {marker}' in {script}")


@pytest.fixture
def replay():
    runners: list[ReplayRun] = []

    def start(name: str) -> ReplayRun:
        runner = ReplayRun(load_fixture(name)).start()
        runners.append(runner)
        return runner

    yield start
    for runner in runners:
        runner.close()




def attached(qtbot, panel: MonitorPanel, runner: ReplayRun | LiveRun) -> MonitorPanel:
    panel.attach(runner.run_id)
    qtbot.waitUntil(lambda: panel.model.history_done and len(panel.model.ranks) == runner.world_size, timeout=15_000)
    return panel


# ---- the Qt-free model, for all six kinds ---------------------------------------------------

SIX_KINDS = {
    # fixture: (level, rank the banner names, words that name the cause)
    "exception": (ERROR, 1, ["rank 1 on localhost failed first (exit code 1)",
                             "ValueError: batch 3 on rank 1 has 7 features, expected 8"]),
    "sigkill": (ERROR, 1, ["rank 1 on localhost failed first (signal SIGKILL)", "killed from outside"]),
    "hang": (WARNING, None, ["ranks 0, 1 were stalled at step 7", "rank 1 is the culprit: rank 0 waits in barrier",
                             "diag_hang.py:19 in wait_for_checkpoint"]),
    "straggler": (WARNING, None, ["rank 1 is a straggler at step 6: it waits for data",
                                  "parameters diverged at step 14: rank 1 disagrees with rank 0"]),
    "port_taken": (ERROR, 0, ["rank 0 on localhost failed first (exit code 1)", "EADDRINUSE"]),
    "legacy": (ERROR, 0, ["rank 0 on localhost failed first (exit code 2)",
                          "the following arguments are required: --local_rank"]),
}


def recorded_snapshot(fixture: dict) -> SnapshotMessage:
    """The snapshot of a recorded run: its stored rows, read as a subscriber reads them."""
    run = {key: value for key, value in fixture["run"].items() if key != "spec_toml"}
    return SnapshotMessage(RunInfo.from_wire(run), tuple(RankInfo.from_wire(row) for row in fixture["ranks"]),
                           tuple(NodeInfo.from_wire(row) for row in fixture["nodes"]))


def recorded_events(events: list[dict]) -> list[Event]:
    """A recorded run's events (as published), typed; one of a kind the contract lacks fails the test."""
    typed = [event_of(event) for event in events]
    assert None not in typed, [event["kind"] for event in events]
    return [event for event in typed if event is not None]


@pytest.mark.parametrize("name", list(SIX_KINDS))
def test_the_diagnosis_of_each_recorded_run_names_its_rank_and_cause(name):
    fixture = load_fixture(name)
    model = MonitorModel()
    diagnosis = DiagnosisModel(model)
    model.apply(recorded_snapshot(fixture).to_wire())
    model.apply(update(events=recorded_events(fixture["events"]),
                       logs=[LogLine(*line) for line in fixture["logs"]]).to_wire())
    level, rank, words = SIX_KINDS[name]
    banner = diagnosis.banner()
    assert banner is not None and banner.level == level
    for text in words:
        assert text in banner.text
    if rank is not None:
        assert banner.rank == rank and diagnosis.first_failure.rank == rank
        assert diagnosis.rank_notes()[rank].startswith("failed first: ")


def test_a_run_that_exited_0_with_no_rank_says_so_in_a_warning_not_silence():
    """The runner's summary of such a run (``runner.diagnosis.triage``) leads with it; the banner
    shows it, since "succeeded" alone would read as a good run."""
    from runner.diagnosis.triage import TriageInput, triage

    summary = triage(TriageInput(cpu_mode=True, self_spawn=True,
                                 spawn_call="mp.spawn(...) on line 104"),
                     0, stopped=False)
    model = MonitorModel()
    diagnosis = DiagnosisModel(model)
    run = RunInfo(id=7, profile="multigpu", status="succeeded", started=1.0, ended=3.0, exit_code=0, summary=summary)
    model.apply(SnapshotMessage(run).to_wire())
    banner = diagnosis.banner()
    assert banner is not None and banner.level == WARNING
    assert banner.text == "the job exited 0, but no rank ever reported: nothing was measured"
    stepless = replace(run, summary=triage(TriageInput(seen={0}, instrumented=True), 0, stopped=False))
    model.apply(SnapshotMessage(stepless).to_wire())
    banner = diagnosis.banner()
    assert banner is not None and (banner.level, banner.kind) == (WARNING, "no_step_measured")
    assert banner.text == "all ranks finished, but none made a training step: nothing was measured"
    ran = replace(run, summary=triage(TriageInput(seen={0}, measured={0}, instrumented=True), 0, stopped=False))
    model.apply(SnapshotMessage(ran).to_wire())
    assert diagnosis.banner() is None  # a good run: no banner


def test_a_stall_the_run_saw_live_ends_as_the_summary_says_once_its_rank_finished_by_itself():
    """Seen in the GUI: rank 1 of evaluate_after_training.py stalled (live event), then exited 0; the
    finished run's banner kept the live words as if it still hung."""
    from runner.diagnosis.findings import Findings, StallFinding
    from runner.diagnosis.triage import TriageInput, triage

    stall = {"rank": 1, "step": 11, "since": 100.0, "seconds": 5.1, "threshold": 5.0, "resumed_after": None}
    model = MonitorModel()
    diagnosis = DiagnosisModel(model)
    model.apply(SnapshotMessage(RunInfo(id=3, profile="evaluate", status="running", started=90.0)).to_wire())
    event = Event(105.1, "stalled", 1, "rank 1 stalled at step 11: no progress for 5 s (threshold 5 s, the stall timeout)",
                  StalledFields(step=11, seconds=5.1, threshold=5.0).to_wire())
    model.apply(update(events=[event]).to_wire())
    [live] = [f for f in diagnosis.findings() if f.kind == "stalled"]
    assert live.active
    findings = Findings()
    findings.add_stall(StallFinding(**stall))
    summary = triage(TriageInput(findings=findings, seen={0, 1}, measured={0, 1}, instrumented=True,
                                 exits={0: (0, 125.0), 1: (0, 125.0)}), 0, stopped=False)
    ended = run_changes(id=3, profile="evaluate", status="succeeded", started=90.0, ended=126.0, exit_code=0,
                        summary=summary)
    model.apply(update(run=ended).to_wire())
    [done] = [f for f in diagnosis.findings() if f.kind == "stalled"]
    assert not done.active
    assert done.text.endswith("; then it finished by itself 25 s after its last progress (exit code 0): not a hang")
    assert "not a hang" in diagnosis.banner().text


# ---- failures: banner and diagnosis panel, live ----------------------------------------------

FAILURES = {
    # fixture: (rank, "ended by" as the panel says it, the exception line (or None), hint key (or None))
    "exception": (1, "exit code 1", "ValueError: batch 3 on rank 1 has 7 features, expected 8", None),
    "sigkill": (1, "SIGKILL", None, "killed"),
    "port_taken": (0, "exit code 1", "DistNetworkError: The server socket has failed to listen", "address_in_use"),
    "legacy": (0, "exit code 2", "diag_legacy.py: error: the following arguments are required: --local_rank",
               "legacy_local_rank"),
}


@pytest.mark.parametrize("name", list(FAILURES))
def test_a_failed_run_shows_a_red_banner_and_the_first_failure_in_the_diagnosis_panel(qtbot, panel, replay, name):
    rank, ended_by, exception_line, hint_key = FAILURES[name]
    runner = replay(name)
    attached(qtbot, panel, runner)
    assert not panel.failure_banner.isVisible()

    # The first rank_failed arrives before the runner's triage: named at once.
    runner.send_events("rank_started", "exception", "connection_lost", "rank_failed")
    qtbot.waitUntil(lambda: panel.failure_banner.isVisible(), timeout=15_000)
    assert "waiting for the runner's diagnosis" in panel.failure_banner.text()

    runner.end_as_recorded()
    summary = runner.fixture["run"]["summary"]
    qtbot.waitUntil(lambda: panel.failure_banner.text() == summary["headline"], timeout=15_000)
    banner = panel.failure_banner.banner
    assert banner.level == ERROR and banner.rank == rank
    assert panel.failure_banner.text().startswith(f"rank {rank} on localhost failed first (")
    assert not panel.banner.isVisible()  # one banner, not two

    qtbot.mouseClick(panel.failure_banner.details_button, Qt.MouseButton.LeftButton)
    assert panel.tabs.currentWidget() is panel.diagnosis_panel
    diagnosis = panel.diagnosis_panel
    diagnosis.refresh()
    shown = diagnosis.first_failure_text()
    assert f"rank {rank} on localhost (pid {summary['first_failure']['pid']})" in shown
    assert diagnosis.how_value.text() == ended_by
    if exception_line:
        assert diagnosis.exception_value.text().startswith(exception_line)
    else:
        assert not diagnosis.exception_value.isVisible()
    hint_keys = [hint["key"] for hint in summary["hints"]]
    if hint_key:
        assert hint_key in hint_keys
        hint = summary["hints"][hint_keys.index(hint_key)]
        assert hint["cause"] in diagnosis.hints_label.text().replace("&lt;", "<").replace("&gt;", ">")
    # Every rank's fate: the first one marked, the other one as torchrun left it.
    ranks = diagnosis.table_texts(diagnosis.ranks_table)
    assert [row[0] for row in ranks] == [str(rank), str(1 - rank)]  # the first failure leads
    assert ranks[0][3] == f"failed first: {ended_by}"
    other = ranks[1]
    assert other[3] in ("SIGTERM", "exit code 1")
    # The rank table says it too, in the same words for every rank (one truth everywhere).
    qtbot.waitUntil(lambda: rank in panel.rank_table.visible_ranks()
                    and panel.rank_table.cell_text(rank, "Diagnosis") == f"failed first: {ended_by}",
                    timeout=15_000)
    expected = [row[3].removeprefix("failed first: ") for row in ranks]
    qtbot.waitUntil(lambda: [panel.rank_table.cell_text(int(row[0]), "Ended by") for row in ranks] == expected,
                    timeout=15_000)  # the table refreshes on its own timer
    # Details again: back where it was.
    qtbot.mouseClick(panel.failure_banner.details_button, Qt.MouseButton.LeftButton)
    assert panel.tabs.currentWidget() is not panel.diagnosis_panel


def test_an_exception_shows_its_traceback_down_to_the_raising_line(qtbot, panel, replay):
    runner = replay("exception")
    attached(qtbot, panel, runner)
    runner.end_as_recorded()
    qtbot.waitUntil(lambda: panel.failure_banner.isVisible() and panel.model.finished, timeout=15_000)
    panel.diagnosis_panel.refresh()
    traceback = panel.diagnosis_panel.traceback_view.toPlainText()
    script = SCRIPTS / "diag_exception.py"
    assert f'diag_exception.py", line {marked_line(script, "RAISE")}, in check_batch' in traceback
    assert traceback.splitlines()[-1] == "ValueError: batch 3 on rank 1 has 7 features, expected 8"
    assert "reported by the worker" in panel.diagnosis_panel.traceback_label.text()


def test_a_failed_run_opened_from_history_shows_the_same_diagnosis(qtbot, panel):
    fixture = load_fixture("sigkill")
    run_id = store_fixture(fixture)
    panel.attach(run_id)  # finished: loaded from the store on a worker thread
    headline = fixture["run"]["summary"]["headline"]
    qtbot.waitUntil(lambda: panel.failure_banner.text() == headline, timeout=15_000)  # after "Loading run…"
    assert panel.failure_banner.isVisible() and panel.failure_banner.details_button.isVisible()
    panel.diagnosis_panel.refresh()
    assert panel.diagnosis_panel.how_value.text() == "SIGKILL"
    assert panel.diagnosis_panel.evidence_value.text().startswith("its connection to the runner dropped")
    assert "was killed from outside (SIGKILL)" in panel.diagnosis_panel.hints_label.text()


# ---- a hang: stalled ranks, the banner, the stacks view, Dump stacks --------------------------

def test_a_hung_run_is_hung_in_the_header_history_and_runs_list_and_show_not_running(qtbot, panel, replay, capsys):
    """A hang was red in the banner but "running" in the header pill, History, `runs list`
    and the notices. Running with a stalled rank is one condition, shown alike everywhere."""
    runner = replay("hang")
    attached(qtbot, panel, runner)
    runner.send_events("rank_started")
    qtbot.waitUntil(lambda: panel.status_label.text() == "running", timeout=15_000)
    runner.send_events("stalled", now=True, rank_states={0: "stalled", 1: "stalled"})
    qtbot.waitUntil(lambda: panel.failure_banner.isVisible(), timeout=15_000)
    qtbot.waitUntil(lambda: panel.status_label.text() == "hung", timeout=15_000)
    assert panel.model.status == "running"  # the runner's record: the run goes on
    with RunStore(readonly=True) as store:
        listed = {row.id: row.effective_status for row in StoreReads.runs(store, 10)}
    assert listed[runner.run_id] == "hung"  # History
    capsys.readouterr()
    assert cli_main(["runs", "list", "--json"]) == 0
    assert {run["id"]: run["status"] for run in json.loads(capsys.readouterr().out)}[runner.run_id] == "hung"
    assert cli_main(["runs", "show", str(runner.run_id), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["run"]["status"] == "hung"


def test_a_hang_flags_the_stalled_ranks_and_the_stacks_view_names_the_sleeping_rank_as_the_culprit(
        qtbot, panel, replay):
    script = SCRIPTS / "diag_hang.py"
    barrier, helper = marked_line(script, "HANG"), marked_line(script, "WAIT")
    runner = replay("hang")
    attached(qtbot, panel, runner)
    runner.send_events("rank_started")
    runner.send_events("stalled", now=True, rank_states={0: "stalled", 1: "stalled"})

    qtbot.waitUntil(lambda: panel.failure_banner.isVisible(), timeout=15_000)
    assert re.fullmatch(r"ranks 0, 1 stalled at step 7 for \d+(\.\d)? s", panel.failure_banner.text())
    assert panel.failure_banner.banner.level == WARNING
    table = panel.rank_table
    # the banner can come before the table's own timer has made its rows: wait for the row, then its state
    qtbot.waitUntil(lambda: 0 in table.visible_ranks() and table.cell_text(0, "State") == "stalled",
                    timeout=15_000)
    for rank in (0, 1):
        assert table.row_brush(rank).color() == state_tint("stalled")
        assert table.cell_text(rank, "Diagnosis").startswith("stalled at step 7 for ")

    # The stall's capture: rank 1, in no collective, is the culprit; rank 0 waits in the barrier.
    runner.send_events("stacks", now=True, first=1)
    view = panel.stacks_view
    qtbot.waitUntil(lambda: view.layout_shown is not None, timeout=15_000)
    assert panel.tabs.tabText(panel.tabs.indexOf(view)) == "Stacks •"  # new, not stolen focus
    assert view.column_titles() == ["rank 1  ← culprit", "rank 0 · waits in barrier"]
    assert view.column_frames(0) == [f"diag_hang.py:{barrier + 3} in <module>",
                                     f"diag_hang.py:{helper} in wait_for_checkpoint{CULPRIT_MARK}"]
    assert view.column_frames(1)[0].startswith(f"diag_hang.py:{barrier} in <module>")
    assert view.column_frames(1)[-1].endswith(" in barrier")
    assert view.marked_cells() == [(1, 0, f"diag_hang.py:{helper} in wait_for_checkpoint{CULPRIT_MARK}")]
    assert view.verdict.text() == ("Rank 1 is the culprit: rank 0 waits in barrier, rank 1 is in no collective "
                                   f"(at diag_hang.py:{helper} in wait_for_checkpoint)")
    assert view.verdict_color() == CULPRIT_COLOR.name() and view.layout_shown.level == "error"
    assert "time.sleep(0.2)  # WAIT: for rank 0's checkpoint" in view.details.text()
    assert "rank 0 waits in barrier, called at " in view.details.text() and "dist.barrier()" in view.details.text()
    assert "taken at" in view.heading.text() and "when ranks stalled" in view.heading.text()
    qtbot.waitUntil(lambda: "rank 1 is the culprit" in panel.failure_banner.text().lower(), timeout=15_000)
    assert panel.failure_banner.banner.rank == 1
    qtbot.waitUntil(lambda: table.cell_text(1, "Diagnosis").endswith(f"culprit: stuck at diag_hang.py:{helper}"),
                    timeout=15_000)
    assert "culprit" not in table.cell_text(0, "Diagnosis")

    # Dump stacks: the runner is asked, the view switches and shows the new capture.
    qtbot.mouseClick(panel.stacks_button, Qt.MouseButton.LeftButton)
    assert panel.tabs.currentWidget() is view
    qtbot.waitUntil(lambda: "on request" in view.heading.text(), timeout=15_000)
    assert {"type": "dump_stacks", "v": protocol.VERSION} in runner.received
    assert view.marked_cells()[0][2].startswith(f"diag_hang.py:{helper} in wait_for_checkpoint")

    # Stopped while hanging: the banner keeps saying who hung, and who held them up.
    runner.end_as_recorded()
    qtbot.waitUntil(lambda: panel.model.finished, timeout=15_000)
    qtbot.waitUntil(lambda: panel.failure_banner.text().startswith("stopped on request; ranks 0, 1 were stalled"
                                                                   " at step 7"), timeout=15_000)
    assert "rank 1 is the culprit" in panel.failure_banner.text()
    qtbot.waitUntil(lambda: table.cell_text(1, "Diagnosis") == f"culprit: stuck at diag_hang.py:{helper}",
                    timeout=15_000)  # no longer "stalled for ..."
    assert view.layout_shown is not None and view.marked_cells()  # the last capture stays shown


def test_dump_stacks_on_a_healthy_run_is_a_snapshot_no_red_no_disagreement(qtbot, panel, replay):
    runner = replay("healthy")
    attached(qtbot, panel, runner)
    runner.send_events("rank_started")
    runner.send_events("stacks", now=True)
    view = panel.stacks_view
    qtbot.waitUntil(lambda: view.layout_shown is not None, timeout=15_000)
    assert view.verdict.text() == "All 2 ranks are progressing (none stalled); a snapshot of where each was"
    assert view.verdict_color() is None and "color" not in view.verdict.styleSheet()
    assert all(title.endswith(" · progressing") for title in view.column_titles())
    assert view.marked_cells() == [] and "culprit" not in view.details.text()
    text = " ".join([view.verdict.text(), view.details.text(), *view.column_titles()]).lower()
    assert "disagree" not in text and "differ" not in text
    assert not panel.failure_banner.isVisible() or "culprit" not in panel.failure_banner.text()
    qtbot.waitUntil(lambda: panel.rank_table.table_model.rowCount() == 2, timeout=15_000)  # redrawn on a timer
    assert all("culprit" not in table_text for table_text in
               (panel.rank_table.cell_text(rank, "Diagnosis") for rank in (0, 1)))


def test_a_finished_run_shows_its_last_capture_or_says_why_there_is_none(qtbot, panel):
    panel.attach(store_fixture(load_fixture("hang")))  # ended: loaded from the store
    view = panel.stacks_view
    qtbot.waitUntil(lambda: view.layout_shown is not None and panel.model.finished, timeout=15_000)
    assert view.layout_shown.reason == "requested" and view.marked_cells()
    assert not panel.stacks_button.isEnabled()
    panel.attach(store_fixture(load_fixture("exception")))  # ended without a capture
    qtbot.waitUntil(lambda: panel.model.finished and panel.run_id is not None, timeout=15_000)
    qtbot.waitUntil(lambda: view.verdict.text() == NO_CAPTURE_ENDED, timeout=15_000)
    assert "Press Dump stacks" not in view.verdict.text() and not panel.stacks_button.isEnabled()


def test_a_finished_run_whose_capture_events_are_gone_reads_its_capture_file(tmp_path):
    fixture = load_fixture("hang")
    [*_, last] = [event for event in fixture["events"] if event["kind"] == "stacks"]
    capture_file = tmp_path / "capture-2.json"
    capture_file.write_text(json.dumps({key: value for key, value in last.items() if key not in ("kind", "message")}))
    summary = json.loads(json.dumps(fixture["run"]["summary"]))
    summary["diagnostics"]["stacks"]["json_path"] = str(capture_file)
    model = MonitorModel()
    diagnosis = DiagnosisModel(model)
    received = []
    diagnosis.stacks_received.connect(received.append)
    events = [event for event in fixture["events"] if event["kind"] != "stacks"]  # dropped from memory
    snapshot = recorded_snapshot(fixture)
    model.apply(replace(snapshot, run=replace(snapshot.run, summary=summary)).to_wire())
    model.apply(update(events=recorded_events(events)).to_wire())
    layout = diagnosis.stacks_layout()
    assert received and received[-1] is diagnosis.capture and layout is not None and layout.culprits == (1,)
    assert layout.verdict.startswith("rank 1 is the culprit")


def test_the_stacks_layout_lists_ranks_without_a_stack():
    frames = [{"file": "/w/train.py", "line": 40, "function": "<module>"},
              {"file": "/w/site-packages/torch/distributed/distributed_c10d.py", "line": 12, "function": "barrier"}]
    capture = {"kind": "stacks", "reason": "stalled", "t": 1.0, "ranks": [0, 1], "identical": True,
               "missing": [{"rank": 2, "why": "no dump within 2 s"}],
               "groups": [{"ranks": [0, 1], "differs_at": None, "frames": frames}]}  # an earlier version's shape
    layout = layout_capture(capture)
    assert [c.title for c in layout.columns] == ["ranks 0, 1 · wait in barrier"]
    assert layout.verdict == "every rank waits in barrier: rank 2 gave no stack and may be the one missing"
    assert layout.missing == ((2, "no dump within 2 s"),) and layout.culprits == ()


# ---- a straggler and a divergence -----------------------------------------------------------

def test_a_straggler_waiting_for_data_and_a_divergence_are_named_with_rank_cause_and_step(qtbot, panel, replay):
    runner = replay("straggler")
    attached(qtbot, panel, runner)
    runner.send_events("rank_started")
    runner.send_events("straggler", now=True)
    qtbot.waitUntil(lambda: panel.failure_banner.isVisible(), timeout=15_000)
    text = panel.failure_banner.text()
    # The runner's message, with the step it was seen at.
    assert text.startswith("rank 1 is a straggler at step 6: it waits for data (161 ms of its 167 ms step in the "
                           "data loader; the other ranks wait 0 ms)")
    assert panel.failure_banner.banner.level == WARNING
    qtbot.waitUntil(lambda: panel.rank_table.cell_text(1, "Diagnosis") == "straggler: waiting for data", timeout=15_000)
    assert panel.rank_table.cell_text(0, "Diagnosis") == ""

    runner.send_events("divergence", now=True)
    qtbot.waitUntil(lambda: panel.failure_banner.banner.more == 1, timeout=15_000)
    qtbot.waitUntil(lambda: "diverged at step 14" in panel.rank_table.cell_text(1, "Diagnosis"), timeout=15_000)
    panel.diagnosis_panel.refresh()
    findings = panel.diagnosis_panel.table_texts(panel.diagnosis_panel.findings_table)
    assert [row[1:3] for row in findings] == [["straggler", "1"], ["divergence", "1"]]
    assert findings[1][3] == "parameters diverged at step 14: rank 1 disagrees with rank 0"

    runner.end_as_recorded()  # it finished: the banner keeps what was found
    qtbot.waitUntil(lambda: panel.model.finished and panel.failure_banner.text().startswith(
        "all ranks finished, but rank 1 is a straggler at step 6: it waits for data"), timeout=15_000)
    assert "parameters diverged at step 14: rank 1 disagrees with rank 0" in panel.failure_banner.text()


def test_a_launcher_mismatch_is_a_named_finding(qtbot, panel):
    # A rank tells the real runner that its script never got --local-rank; the runner's
    # launch checks turn it into a launch_mismatch event; the panel names the finding.
    runner = LiveRun(ranks=2, slow_rank=None).start()
    try:
        attached(qtbot, panel, runner)
        runner.notice(1, "local_rank_unpassed")
        diagnosis = panel.diagnosis_panel
        qtbot.waitUntil(lambda: (diagnosis.refresh() or True) and bool(diagnosis.table_texts(diagnosis.findings_table)),
                        timeout=15_000)
        [(_time, name, rank, what)] = diagnosis.table_texts(diagnosis.findings_table)
        assert (name, rank) == ("launcher mismatch", "1")
        event = next(e for e in panel.model.events if e.kind == EventKind.LAUNCH_MISMATCH)
        assert what == event.fields["title"]
    finally:
        runner.close()


def test_a_rank_stopped_after_another_failed_reads_as_in_the_terminal(qtbot, panel):
    """Rank 0 of the exception run: gloo's "Connection closed by peer", then torchrun's SIGTERM. The run
    as the runner records it now (triage marks it ``after`` rank 1; the run gives it state "stopped")
    reads in the rank table and the Diagnosis panel as in the terminal's summary."""
    fixture = load_fixture("exception")
    summary = fixture["run"]["summary"]
    [other] = summary["other_failures"]
    other["after"] = summary["first_failure"]["rank"]
    rank_zero = next(row for row in fixture["ranks"] if row["rank"] == 0)
    rank_zero.update(state="stopped", exit_code=other["exit_code"])
    panel.attach(store_fixture(fixture))
    qtbot.waitUntil(lambda: panel.failure_banner.isVisible(), timeout=15_000)
    table = panel.rank_table
    qtbot.waitUntil(lambda: table.table_model.rowCount() == 2, timeout=15_000)
    assert table.cell_text(0, "Ended by") == "SIGTERM, stopped after rank 1 failed"
    assert table.cell_text(0, "State") == "stopped"
    assert table.cell_text(1, "Ended by") == "exit code 1" and table.cell_text(1, "State") == "failed"
    lines = {line.rank: line for line in panel.diagnosis_panel.diagnosis.rank_lines()}
    assert (lines[0].state, lines[0].fate) == ("stopped", "SIGTERM, stopped after rank 1 failed")
    assert lines[1].fate == "failed first: exit code 1"


def test_ranks_that_ended_alike_share_one_line_of_the_every_rank_table_at_1024_ranks():
    """Rank 1 failed first; torchrun stopped the other 1,023 on 128 hosts: two lines, not 1,024."""
    others = [{"rank": rank, "exit_code": -15, "signal": None, "after": 1, "host": f"node{rank // 8}"}
              for rank in range(1024) if rank != 1]
    summary = {"first_failure": {"rank": 1, "exit_code": 1, "evidence": "exception", "host": "node0",
                                 "exception_line": "ValueError: bad batch"}, "other_failures": others}
    ranks = tuple(RankInfo(rank=rank, state="failed" if rank == 1 else "stopped", host=f"node{rank // 8}",
                           exit_code=1 if rank == 1 else -15) for rank in range(1024))
    model = MonitorModel()
    diagnosis = DiagnosisModel(model)
    model.apply(SnapshotMessage(RunInfo(id=3, profile="big", status="failed", started=1.0, ended=9.0, exit_code=1,
                                        summary=summary), ranks).to_wire())
    lines = diagnosis.rank_lines()
    assert [(line.label, line.host, line.state, line.first) for line in lines] == [
        ("1", "node0", "failed", True), ("0, 2-1023 (1,023)", "128 hosts", "stopped", False)]
    assert lines[0].fate.startswith("failed first:") and lines[1].fate == "SIGTERM, stopped after rank 1 failed"


def test_every_rank_stalled_at_one_step_is_one_findings_row_and_a_few_are_a_row_each():
    model = MonitorModel()
    diagnosis = DiagnosisModel(model)
    model.apply(SnapshotMessage(RunInfo(id=3, profile="big", status="running", started=90.0),
                                tuple(RankInfo(rank=rank, state="running", step=7) for rank in range(1025))).to_wire())

    def stalled(rank: int, step: int) -> Event:
        return Event(105.0 + rank / 1000, "stalled", rank, f"rank {rank} stalled at step {step}: no progress for "
                     "31 s (threshold 30 s, the stall timeout)", StalledFields(step=step, seconds=31.0,
                                                                              threshold=30.0).to_wire())

    model.apply(update(events=[stalled(rank, 7) for rank in range(1024)] + [stalled(1024, 3)]).to_wire())
    rows = diagnosis.finding_rows()
    assert len(diagnosis.findings()) == 1025 and len(rows) == 2  # every stall held, past the 500 of a small run
    every, alone = rows
    assert (every.ranks, every.rank, every.step, every.active) == (tuple(range(1024)), None, 7, True)
    assert every.text == "ranks 0-1023 stalled at step 7 (1,024 ranks; still stalled)"
    assert (alone.rank, alone.text) == (1024, "rank 1024 stalled at step 3: no progress for 31 s (threshold 30 s, "
                                              "the stall timeout)")
    few = DiagnosisModel(MonitorModel())
    few.monitor.apply(SnapshotMessage(RunInfo(id=4, profile="p", status="running", started=90.0)).to_wire())
    few.monitor.apply(update(events=[stalled(rank, 7) for rank in range(3)]).to_wire())
    assert [row.rank for row in few.finding_rows()] == [0, 1, 2]  # a few ranks: a row each, as before
