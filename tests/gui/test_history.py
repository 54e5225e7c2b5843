"""The runs list against a real run store: live, lost and finished runs; open/attach;
loss overlay of two runs; export to CSV and PNG."""

from __future__ import annotations

import csv
import dataclasses
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from live_run import LiveRun
from PySide6.QtCore import Qt

from gui.gateway.store_reads import StoreReads
from gui.models.history import HISTORY_COLUMNS, RunRow
from gui.widgets.history_panel import HistoryPanel
from rankwatch.protocol import Event, LogLine, MetricRecord
from runner.rows import StoredRun
from runner.store.liveness import process_identity
from runner.store.store import RecordBatch, RunStore

pytestmark = pytest.mark.gui


def dead_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def add_finished_run(store: RunStore, profile: str, status: str = "succeeded", exit_code: int = 0,
                     ranks: int = 2, steps: int = 20, loss_offset: float = 0.0) -> int:
    key = f"{profile}-{time.time_ns()}"
    run_id = store.create_run(run_key=key, profile=profile, spec_toml='script = "train.py"\nargs = ["--epochs", "1"]\n',
                              command="torchrun train.py", host="testhost", workdir="/tmp", runner_pid=dead_pid(),
                              socket=None, world_size=ranks, status="running")
    started = 1_700_000_000.0
    store.update_run(run_id, started=started, ended=started + 65.0, status=status, exit_code=exit_code)
    batch = RecordBatch()
    for step in range(steps):
        for rank in range(ranks):
            t = started + step
            batch.metrics.append(MetricRecord(rank, t, step, "loss", loss_offset + 10.0 - step + rank, "auto"))
            batch.metrics.append(MetricRecord(rank, t, step, "loss", 99.0, "parsed"))  # a printed line: not preferred
            batch.metrics.append(MetricRecord(rank, t, step, "step_time", 0.1, "auto"))
        batch.logs.append(LogLine(0, started + step, "stdout", f"step {step}", None))
    batch.events.append(Event(started + steps, "run_finished", None, "done"))
    store.write_batch(run_id, batch)
    for rank in range(ranks):
        store.upsert_rank(run_id, rank, host="testhost", pid=1000 + rank, state="exited", exit_code=exit_code)
    return run_id




def cell(history_panel: HistoryPanel, run_id: int, column: str) -> str:
    for row in range(history_panel.table_model.rowCount()):
        if history_panel.table_model.rows[row].run_id == run_id:
            return history_panel.table_model.data(history_panel.table_model.index(row, HISTORY_COLUMNS.index(column)))
    raise KeyError(run_id)


def test_runs_list_shows_finished_failed_lost_and_live_runs(qtbot, store, history_panel):
    finished = add_finished_run(store, "alpha")
    failed = add_finished_run(store, "beta", status="failed", exit_code=1)
    lost = store.create_run(run_key="lost-one", profile="gamma", spec_toml="", command=None, host="testhost",
                            workdir=None, runner_pid=dead_pid(), socket="/nonexistent.sock", world_size=2,
                            status="running")
    live_runner = LiveRun(ranks=2).start()
    try:
        # The real runner records its run as starting, then running: the list follows.
        qtbot.waitUntil(lambda: len(history_panel.rows()) == 4
                        and cell(history_panel, live_runner.run_id, "Status") == "running (live)", timeout=15_000)
        assert any(t.name == "rankwatch-store-reader" for t in threading.enumerate())  # reads off the GUI thread
        assert cell(history_panel, finished, "Status") == "succeeded"
        assert cell(history_panel, finished, "Duration") == "1:05"
        assert cell(history_panel, finished, "Profile") == "alpha"
        assert cell(history_panel, finished, "Script") == "train.py --epochs 1"  # what ran, not only the profile
        assert cell(history_panel, failed, "Status") == "failed"
        assert cell(history_panel, failed, "Exit") == "1"
        assert cell(history_panel, lost, "Status") == "lost"
        assert cell(history_panel, live_runner.run_id, "Status") == "running (live)"
        assert "1 live" in history_panel.status_label.text()

        history_panel.select_runs([live_runner.run_id])
        assert history_panel.open_button.text() == "Attach"
        with qtbot.waitSignal(history_panel.open_run_requested, timeout=15_000) as opened:
            qtbot.mouseClick(history_panel.open_button, Qt.MouseButton.LeftButton)
        assert opened.args == [live_runner.run_id]
        history_panel.select_runs([finished])
        assert history_panel.open_button.text() == "Open"

        live_runner.finish()
        qtbot.waitUntil(lambda: cell(history_panel, live_runner.run_id, "Status") == "succeeded", timeout=15_000)
    finally:
        live_runner.close()


def test_double_click_opens_a_run(qtbot, store, history_panel):
    run_id = add_finished_run(store, "alpha")
    qtbot.waitUntil(lambda: len(history_panel.rows()) == 1, timeout=15_000)
    index = history_panel.proxy.index(0, 0)
    rect = history_panel.view.visualRect(index)
    with qtbot.waitSignal(history_panel.open_run_requested, timeout=15_000) as opened:
        # Qt 6 item views want the press of a click before the double click.
        qtbot.mouseClick(history_panel.view.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())
        qtbot.mouseDClick(history_panel.view.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())
    assert opened.args == [run_id]


def test_overlay_shows_the_mean_loss_of_two_runs(qtbot, store, history_panel):
    first = add_finished_run(store, "alpha", ranks=2, steps=20)
    second = add_finished_run(store, "beta", ranks=4, steps=30, loss_offset=-3.0)
    qtbot.waitUntil(lambda: len(history_panel.rows()) == 2, timeout=15_000)
    history_panel.select_runs([first, second])
    assert history_panel.overlay_button.isEnabled()
    with qtbot.waitSignal(history_panel.overlay_shown, timeout=15_000):
        qtbot.mouseClick(history_panel.overlay_button, Qt.MouseButton.LeftButton)
    assert sorted(history_panel.overlay_run_ids) == sorted([first, second])
    chart = history_panel.overlay_chart
    curves = {history_panel.overlay_run_ids[key]: chart.curve_data(key) for key in chart.keys}
    # Mean over ranks of (offset + 10 - step + rank); the parsed 99s are ignored.
    np.testing.assert_allclose(curves[first][1], 10.0 - np.arange(20) + 0.5)
    np.testing.assert_allclose(curves[second][1], 7.0 - np.arange(30) + 1.5)
    labels = sorted(chart.legend.labels())
    assert labels == sorted([f"run {first} (alpha)", f"run {second} (beta)"])


def test_export_writes_csv_tables_and_a_charts_png(qtbot, store, history_panel, tmp_path):
    run_id = add_finished_run(store, "alpha", ranks=2, steps=20)
    with qtbot.waitSignal(history_panel.export_finished, timeout=10_000) as finished:
        history_panel.export_run(run_id, tmp_path)
    folder = Path(finished.args[0])
    assert folder == tmp_path / f"run-{run_id}"
    with (folder / "metrics.csv").open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 2 * 20 * 3
    assert {row["name"] for row in rows} == {"loss", "step_time"}
    assert len((folder / "logs.csv").read_text().splitlines()) == 21
    assert (folder / "charts.png").stat().st_size > 20_000


def test_overlay_png_can_be_saved(qtbot, store, history_panel, tmp_path):
    run_id = add_finished_run(store, "alpha")
    with qtbot.waitSignal(history_panel.overlay_shown, timeout=15_000):
        history_panel.overlay([run_id])
    path = history_panel.save_overlay_png(tmp_path / "overlay.png")
    assert path.stat().st_size > 5_000


# ---- the Qt-free model ---------------------------------------------------------------------


def test_run_rows_tell_live_from_lost(store, tmp_path):
    socket_file = tmp_path / "sock"
    socket_file.touch()
    base = StoredRun(id=1, profile=None, status="running", created=10.0, started=11.0, exit_code=None,
                     world_size=2, host="h", socket=str(socket_file))
    live = RunRow.from_store(StoreReads.with_liveness(dataclasses.replace(
        base, runner_pid=os.getpid(), runner_identity=process_identity(os.getpid()))))  # as stored
    lost = RunRow.from_store(StoreReads.with_liveness(dataclasses.replace(base, runner_pid=dead_pid())))
    done = RunRow.from_store(StoreReads.with_liveness(dataclasses.replace(base, ended=20.0, status="failed",
                                                               runner_pid=os.getpid())))
    assert (live.live, live.status) == (True, "running")
    assert (lost.live, lost.status) == (False, "lost")
    assert (done.live, done.status, done.duration()) == (False, "failed", 9.0)
    assert live.duration(now=15.0) == 4.0


