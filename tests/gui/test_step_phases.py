"""Where each rank's step goes, and the run's bottleneck verdict, as the monitor shows them.

The live tests watch the real runner (``runner.run.Run``: its hub, store, straggler and
bottleneck monitors) whose fake ranks send step rows with their phases on the CPU's clock
(``live_run.py``); the panel subscribes through its socket, then opens the same run from
the store once it ended. The Qt-free tests feed the view models the records the runner
publishes.
"""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest
from PySide6.QtCore import QRect, Qt
from PySide6.QtGui import QColor

from gui.gateway.run_state import RankInfo, RunInfo, SnapshotMessage
from gui.gateway.store_reads import RankStats
from gui.models.diagnosis import INFO, DiagnosisModel
from gui.models.monitor import (
    NOT_MEASURED,
    PHASES_COLUMN,
    RANK_COLUMNS,
    MonitorModel,
    rank_cells,
    rank_phases_of,
)
from gui.models.phases import RankPhases, clocks_text, format_share
from gui.widgets.monitor_panel import MonitorPanel
from gui.widgets.phase_bars import PHASE_COLORS, segment_rects, text_color_on
from gui.widgets.rank_table import PHASE_BAR_COLUMN, PHASES_ROLE
from rankwatch import protocol
from runner.runstate.messages import event_of
from tests.hub_messages import run_changes, update

pytestmark = pytest.mark.gui

SHARES = {"data": 0.10, "h2d": None, "forward": 0.30, "backward": 0.40, "comm": 0.15, "optimizer": 0.05, "rest": 0.0}


@pytest.fixture
def panel_size() -> tuple[int, int]:
    return (1500, 900)


def bar_widths(panel: MonitorPanel) -> dict[int, dict[str, int]]:
    """Each rank's segments as drawn in a 300-pixel bar: phase -> width in pixels."""
    table = panel.rank_table.table_model
    widths = {}
    for row in range(table.rowCount()):
        phases = table.data(table.index(row, PHASE_BAR_COLUMN), PHASES_ROLE)
        widths[phases.rank] = {phase: box.width() for phase, box in segment_rects(phases, QRect(0, 0, 300, 14))}
    return widths


def step_of(panel: MonitorPanel, rank: int) -> int:
    """The step the rank table shows for ``rank`` (-1 before one)."""
    text = panel.rank_table.cell_text(rank, "Step").split()[0] if panel.rank_table.table_model.rowCount() else ""
    return int(text) if text.isdigit() else -1


def cell_tooltip(panel: MonitorPanel, rank: int, column: str) -> str:
    table = panel.rank_table.table_model
    row = next(row for row in range(table.rowCount()) if table.rank_at(row) == rank)
    return table.data(table.index(row, RANK_COLUMNS.index(column)), Qt.ItemDataRole.ToolTipRole)


# ---- live, then from the store --------------------------------------------------------------

def test_a_rank_that_computes_longer_has_the_wider_forward_and_is_the_named_straggler(qtbot, panel, live_run):
    runner = live_run(ranks=3, slow_rank=1, slow_phase="forward", rate_hz=20, skipped_steps=frozenset({2, 5}))
    panel.attach(runner.run_id)
    table = panel.rank_table
    qtbot.waitUntil(lambda: len(bar_widths(panel)) == 3 and all(bar_widths(panel)[r] for r in range(3)),
                    timeout=10_000)
    qtbot.waitUntil(lambda: step_of(panel, 0) >= 8, timeout=10_000)
    table.refresh()  # the table and the model as of now (no message is applied before the next wait)
    widths = bar_widths(panel)
    # The straggler's longer forward, and its peers' longer wait for it in their collectives.
    assert widths[1]["forward"] > 1.5 * widths[0]["forward"]
    assert widths[1]["forward"] > 1.5 * widths[2]["forward"]
    assert widths[0]["comm"] > 5 * widths[1]["comm"]
    assert all(sum(w.values()) == 300 for w in widths.values())  # the segments tile the bar
    assert list(widths[0]) == list(protocol.PHASES)  # in the terminal's order, every phase measured
    tooltip = cell_tooltip(panel, 1, PHASES_COLUMN)
    assert "on the CPU clock" in tooltip and "rank 1, its recent measured steps" in tooltip
    forward = (panel.model.ranks[1].phase_shares or {})["forward"]
    assert f"forward: {format_share(forward)}" in tooltip  # the hub's share, as it computed it
    assert table.legend.isVisible() and "on the CPU clock" in table.legend.text()

    # The live verdict: the straggler, by rank and phase, with its evidence and what to do.
    qtbot.waitUntil(lambda: "a straggler: rank 1 (forward)" in table.verdict, timeout=10_000)
    verdict = table.verdict
    assert table.verdict_label.isVisible() and "<b>Bottleneck (live): a straggler: rank 1 (forward)</b>" in (
        table.verdict_label.text())
    assert verdict.startswith("Bottleneck (live): a straggler: rank 1 (forward): it computes longer (")
    assert "most in forward" in verdict and "→ look at that rank's device" in verdict
    qtbot.waitUntil(lambda: table.cell_text(1, "Diagnosis") == "straggler: computing (forward)", timeout=15_000)
    assert panel.failure_banner.text().startswith("rank 1 is a straggler at step ")  # the straggler's own message
    assert "it computes longer" in panel.failure_banner.text()

    # GradScaler skipped steps 2 and 5 on every rank: counted, and said.
    assert table.cell_text(0, "Step").endswith(" (2 skipped)")
    assert "GradScaler skipped 2 of its steps" in cell_tooltip(panel, 0, "Step")
    panel.progress.refresh()
    assert panel.progress.position_label.text().endswith("steps (2 skipped)")

    runner.finish()
    qtbot.waitUntil(lambda: panel.model.status == "succeeded", timeout=20_000)
    qtbot.waitUntil(lambda: "Bottleneck (whole run" in table.verdict, timeout=15_000)
    assert "a straggler: rank 1 (forward)" in table.verdict
    qtbot.waitUntil(lambda: all(p.whole_run for p in table.table_model.phases()), timeout=15_000)
    results = panel.model.rank_results
    assert "its whole run (" in cell_tooltip(panel, 1, PHASES_COLUMN)
    assert f"forward: {format_share((results[1].phase_shares or {})['forward'])}" in cell_tooltip(panel, 1, PHASES_COLUMN)
    panel.diagnosis_panel.refresh()
    box = panel.diagnosis_panel.bottleneck_text()
    assert box.startswith("Bottleneck (whole run")
    assert "a straggler: rank 1 (forward)" in box and "→ look at that rank's device" in box

    # Opened again from the store (as History does): the same bars and verdict, the whole run's.
    stored = MonitorPanel()
    qtbot.addWidget(stored)
    stored.resize(1500, 900)
    stored.show()
    stored.attach(runner.run_id)
    qtbot.waitUntil(lambda: stored.model.history_done and len(bar_widths(stored)) == 3, timeout=10_000)
    assert bar_widths(stored) == {rank: {phase: rect.width() for phase, rect in segment_rects(
        rank_phases_of(RankInfo(rank=rank, state="exited"), results[rank]), QRect(0, 0, 300, 14))} for rank in range(3)}
    assert bar_widths(stored)[1]["forward"] > 1.5 * bar_widths(stored)[0]["forward"]
    stored.rank_table.refresh()
    assert "Bottleneck (whole run" in stored.rank_table.verdict
    assert stored.rank_table.cell_text(2, "Step").endswith(" (2 skipped)")


def test_ranks_without_measured_phases_have_no_bar_and_no_legend(qtbot, panel, live_run):
    runner = live_run(ranks=2, slow_rank=None, clock=None)
    panel.attach(runner.run_id)
    table = panel.rank_table
    qtbot.waitUntil(lambda: table.table_model.rowCount() == 2 and step_of(panel, 1) >= 5, timeout=10_000)
    assert table.cell_text(0, PHASES_COLUMN) == NOT_MEASURED
    assert bar_widths(panel) == {0: {}, 1: {}}
    assert "not measured" in cell_tooltip(panel, 0, PHASES_COLUMN)
    assert not table.legend.isVisible()
    assert table.cell_text(0, "Step") == table.cell_text(0, "Step").split()[0]  # nothing skipped: no word of it


# ---- the Qt-free models ---------------------------------------------------------------------

def test_a_phase_not_measured_has_no_segment_and_reads_as_not_measured():
    phases = RankPhases(3, SHARES, protocol.CLOCK_GPU)
    segments = phases.segments()
    assert [s.phase for s in segments] == ["data", "forward", "backward", "comm", "optimizer"]  # no h2d, no rest
    assert segments[0].start == 0.0 and segments[-1].start + segments[-1].width == pytest.approx(1.0)
    assert [s.width for s in segments] == pytest.approx([0.10, 0.30, 0.40, 0.15, 0.05])
    tooltip = phases.tooltip()
    assert "on the GPU clock" in tooltip
    assert "\nh2d: –" in tooltip and "\nforward: 30 %" in tooltip and "\nrest: 0 %" in tooltip
    assert phases.text().startswith("data 10 % · h2d – · forward 30 %")
    assert phases.compute_share == pytest.approx(0.75)
    nothing = RankPhases(1, None, None)
    assert nothing.segments() == [] and nothing.text() == NOT_MEASURED and nothing.compute_share is None
    assert format_share(0.001) == "<1 %"


def test_segments_tile_the_bar_whatever_the_rounding():
    shares = {phase: 1 / 7 for phase in protocol.PHASES}
    boxes = segment_rects(RankPhases(0, shares, "cpu"), QRect(10, 2, 101, 12))
    assert boxes[0][1].left() == 10 and boxes[-1][1].right() == 110
    assert all(a[1].right() + 1 == b[1].left() for a, b in itertools.pairwise(boxes))


def test_every_phase_has_its_own_colour_and_a_readable_label_colour():
    assert set(PHASE_COLORS) == set(protocol.PHASES)
    assert len({color.name() for color in PHASE_COLORS.values()}) == len(protocol.PHASES)
    assert text_color_on(QColor("#0072B2")) == QColor(Qt.GlobalColor.white)  # forward: dark blue
    assert text_color_on(QColor("#E69F00")) == QColor(Qt.GlobalColor.black)  # data: orange


def test_a_finished_rank_shows_its_whole_run_and_the_clocks_are_named():
    row = RankInfo(rank=2, state="exited", phase_shares={"forward": 1.0}, phase_clock="gpu", step=9, skipped_steps=1)
    result = RankStats(rank=2, phase_shares=SHARES, phase_clock="gpu", measured_steps=640, skipped_steps=3)
    phases = rank_phases_of(row, result)
    assert phases.whole_run and phases.shares == SHARES and "its whole run (640 timed steps)" in phases.tooltip()
    assert not rank_phases_of(replace(row, state="running"), result).whole_run  # live: its recent steps
    cells = dict(zip(RANK_COLUMNS, rank_cells(row, 0.0, result=result), strict=True))
    assert cells["Step"] == "10 (3 skipped)"  # steps 0..9
    assert cells[PHASES_COLUMN].startswith("data 10 %")
    assert clocks_text([phases]) == "GPU clock"
    assert clocks_text([phases, RankPhases(0, SHARES, "cpu")]) == "GPU and CPU clocks"
    model = MonitorModel()
    model.apply(SnapshotMessage(RunInfo(id=1, status="running"), (RankInfo(rank=0, state="running", skipped_steps=2),
                                                                  RankInfo(rank=1, state="running"))).to_wire())
    assert model.skipped_steps() == 2


def _model_with_events(*events: dict, summary: dict | None = None) -> tuple[MonitorModel, DiagnosisModel]:
    """A two-rank run given ``events`` (as published: ``Event.to_wire``; a kind the contract lacks
    fails the test), finished with ``summary`` when one is given."""
    model = MonitorModel()
    diagnosis = DiagnosisModel(model)
    run = RunInfo(id=1, status="running" if summary is None else "succeeded", summary=summary)
    model.apply(SnapshotMessage(run, (RankInfo(rank=0, state="running"), RankInfo(rank=1, state="running"))).to_wire())
    typed = [event_of(event) for event in events]
    assert None not in typed, [event["kind"] for event in events]
    model.apply(update(events=[event for event in typed if event is not None]).to_wire())
    return model, diagnosis


INPUT_BOUND = {"kind": "bottleneck", "t": 100.0, "rank": None, "verdict": "input-bound",
               "evidence": "waiting for data 45% of the step (communication 3%)",
               "action": "feed it faster: more DataLoader workers (num_workers)", "phase": "data",
               "shares": SHARES, "clock": "cpu", "gpu_busy": None, "steps": 10,
               "message": "input-bound: waiting for data 45% of the step (communication 3%)",
               "ranks": {"0": {"verdict": "input-bound"}, "1": {"verdict": "compute-bound"}}}


def test_the_live_verdict_is_shown_with_its_evidence_and_action_and_the_end_verdict_replaces_it():
    _model, diagnosis = _model_with_events(INPUT_BOUND)
    verdict = diagnosis.bottleneck
    assert verdict is not None and not verdict.whole_run and verdict.scope == "live, last 10 timed steps"
    assert verdict.text == ("bottleneck: input-bound: waiting for data 45% of the step (communication 3%) "
                            "→ feed it faster: more DataLoader workers (num_workers)")
    assert verdict.rank_verdicts_text() == "rank 0 input-bound · rank 1 compute-bound"
    banner = diagnosis.banner()
    assert banner is not None and banner.level == INFO and banner.kind == "bottleneck"
    assert banner.text.startswith("bottleneck: input-bound: waiting for data 45%")

    end = {"verdict": "compute-bound", "evidence": "forward, backward and optimizer 80% of the step",
           "action": "healthy: the device computes", "rank": None, "phase": "backward", "steps": 640,
           "message": "compute-bound: ...", "ranks": {"0": {"verdict": "compute-bound"}}}
    summary = {"outcome": "succeeded", "headline": "all ranks finished", "diagnostics": {"bottleneck": end}}
    _model, diagnosis = _model_with_events(INPUT_BOUND, summary=summary)
    verdict = diagnosis.bottleneck
    assert verdict.whole_run and verdict.title == "compute-bound" and verdict.scope == "whole run, 640 timed steps"
    assert diagnosis.banner() is None  # healthy: nothing to point at
    summary["diagnostics"]["bottleneck"] = {**INPUT_BOUND, "steps": 640}
    _model, diagnosis = _model_with_events(summary=summary)
    assert diagnosis.banner().text.startswith("all ranks finished; bottleneck: input-bound: waiting for data")


def test_a_straggler_verdict_names_the_rank_and_the_phase_and_is_said_once():
    message = ("rank 1 is a straggler: it computes longer (97 ms of its 111 ms step vs 67 ms on the other ranks, "
               "which wait for it in collectives, most in forward: 49 ms)")
    straggler = {"kind": "straggler", "t": 100.0, "rank": 1, "message": message, "active": True, "cause": "compute",
                 "phase": "forward", "step": 10, "step_time": 0.111, "compute_time": 0.097,
                 "others_compute_time": 0.067}
    bottleneck = {"kind": "bottleneck", "t": 101.0, "rank": 1, "verdict": "straggler", "evidence": message,
                  "action": "look at that rank's device", "phase": "forward", "steps": 0, "message": message}
    _model, diagnosis = _model_with_events(straggler, bottleneck)
    verdict = diagnosis.bottleneck
    assert verdict.title == "a straggler: rank 1 (forward)"
    assert verdict.text == ("bottleneck: a straggler: rank 1 (forward): it computes longer (97 ms of its 111 ms step "
                            "vs 67 ms on the other ranks, which wait for it in collectives, most in forward: 49 ms) "
                            "→ look at that rank's device")
    banner = diagnosis.banner()
    assert banner.kind == "straggler" and banner.more == 0  # said once, by the straggler's own finding
    assert diagnosis.rank_notes()[1] == "straggler: computing (forward)"


def test_the_banner_names_the_straggler_that_holds_the_others_up_most_as_the_verdict_does():
    def straggler(rank: int, excess: float) -> dict:
        return {"kind": "straggler", "t": 100.0, "rank": rank, "active": True, "cause": "compute", "phase": "rest",
                "step": 5, "excess": excess, "message": f"rank {rank} is a straggler: it computes longer"}

    verdict = {"kind": "bottleneck", "t": 101.0, "rank": 7, "verdict": "straggler", "phase": "rest", "steps": 0,
               "evidence": "rank 7 is a straggler: it computes longer", "action": "look at that rank's device"}
    model, diagnosis = _model_with_events(straggler(5, 0.08), straggler(7, 0.16), straggler(6, 0.12), verdict)
    banner = diagnosis.banner()
    assert banner.rank == 7 and banner.text.startswith("rank 7 is a straggler at step 5") and banner.more == 2
    assert diagnosis.bottleneck.title == "a straggler: rank 7 (rest)" and diagnosis.bottleneck.scope == "live"
    model.apply(update(run=run_changes(status="lost")).to_wire())  # no whole-run verdict
    assert diagnosis.bottleneck.scope == "last live verdict"

