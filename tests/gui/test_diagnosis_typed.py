"""The GUI's diagnosis holds the runner's own finding types, decoded once from the events it is handed."""

from __future__ import annotations

import pytest
from replay_run import load_fixture
from test_diagnosis_gui import recorded_events, recorded_snapshot

from gui.gateway.findings import (
    CaptureRecord,
    StallEvent,
    StoredDiagnostics,
    StragglerCause,
    StragglerRecord,
)
from gui.models.diagnosis import DiagnosisModel
from gui.models.monitor import MonitorModel
from tests.hub_messages import update

pytestmark = pytest.mark.gui


def replayed(name: str) -> DiagnosisModel:
    """A recorded run's snapshot and events, as a subscriber's monitor model gets them (published JSON)."""
    fixture = load_fixture(name)
    model = MonitorModel()
    diagnosis = DiagnosisModel(model)
    model.apply(recorded_snapshot(fixture).to_wire())
    model.apply(update(events=recorded_events(fixture["events"])).to_wire())
    return diagnosis


def test_a_straggler_event_and_the_summarys_findings_are_the_runners_typed_records():
    diagnosis = replayed("straggler")
    straggler = diagnosis.stragglers[1]
    assert isinstance(straggler, StragglerRecord) and straggler.cause is StragglerCause.DATA
    assert straggler.step == 6 and straggler.data_wait == pytest.approx(0.161, abs=0.001)
    diagnostics = diagnosis.diagnostics
    assert isinstance(diagnostics, StoredDiagnostics) and diagnostics.stragglers[0].rank == 1
    assert [divergence.step for divergence in diagnostics.divergences] == [14]


def test_a_hangs_stall_events_and_capture_are_typed_with_the_culprit_named():
    diagnosis = replayed("hang")
    assert isinstance(diagnosis.capture, CaptureRecord)
    assert diagnosis.capture.verdict is not None and diagnosis.capture.verdict.culprits == [1]
    stalls = [finding for finding in diagnosis.findings() if finding.kind == "stalled"]
    assert {finding.rank for finding in stalls} == {0, 1}
    assert sorted(diagnosis.stalls) == [0, 1]  # never resumed: the run was stopped while they hung
    assert all(isinstance(stall, StallEvent) and stall.step == 7 for stall in diagnosis.stalls.values())
