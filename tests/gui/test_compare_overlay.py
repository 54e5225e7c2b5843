"""The runs overlay against a real run store: any charted metric of several runs, smoothed as
the live charts are, each run in its own colour, coinciding runs in their own dash pattern."""

from __future__ import annotations

import time

import numpy as np
import pytest
from PySide6.QtCore import Qt
from test_history import dead_pid

from gui.charts.smoothing import ema
from gui.widgets.history_panel import HistoryPanel
from rankwatch.protocol import GpuSample, MetricRecord
from runner.store.store import RecordBatch, RunStore

pytestmark = pytest.mark.gui

T0 = 1_700_000_000.0


def add_run(store: RunStore, profile: str, *, ranks: int = 2, steps: int = 30, step_time: float = 0.1,
            loss_offset: float = 0.0, gpu_util: float | None = None) -> int:
    run_id = store.create_run(run_key=f"{profile}-{time.time_ns()}", profile=profile, spec_toml='script = "t.py"\n',
                              command=None, host="h", workdir=None, runner_pid=dead_pid(), socket=None,
                              world_size=ranks, status="running")
    store.update_run(run_id, started=T0, ended=T0 + steps, status="succeeded", exit_code=0)
    batch = RecordBatch()
    for step in range(steps):
        for rank in range(ranks):
            t = T0 + step
            batch.metrics.append(MetricRecord(rank, t, step, "loss", loss_offset + 3.0 - 0.05 * step + (step % 2), "auto"))
            batch.metrics.append(MetricRecord(rank, t, step, "step_time", step_time * (1 + rank), "auto"))
            batch.metrics.append(MetricRecord(rank, t, step, "samples_per_s", 100.0, "auto"))
    if gpu_util is not None:
        batch.gpu_samples.extend(GpuSample(T0 + second, index, gpu_util + 10 * index, 1 << 30, 8 << 30, None, None, None)
                                 for second in range(steps) for index in range(2))
    store.write_batch(run_id, batch)
    return run_id




def overlay(qtbot, history_panel: HistoryPanel, run_ids: list[int]) -> None:
    qtbot.waitUntil(lambda: len(history_panel.rows()) >= len(run_ids), timeout=15_000)
    history_panel.select_runs(run_ids)
    assert history_panel.overlay_button.isEnabled()
    with qtbot.waitSignal(history_panel.overlay_shown, timeout=10_000):
        qtbot.mouseClick(history_panel.overlay_button, Qt.MouseButton.LeftButton)


def curves_by_run(history_panel: HistoryPanel) -> dict[int, np.ndarray]:
    chart = history_panel.overlay_chart
    return {history_panel.overlay_run_ids[key]: chart.curve_data(key)[1] for key in chart.keys}


def test_overlay_compares_step_time_of_three_runs(qtbot, store, history_panel):
    fast, slow, wide = (add_run(store, "fast", step_time=0.1), add_run(store, "slow", step_time=0.3),
                        add_run(store, "wide", ranks=4, step_time=0.1))
    overlay(qtbot, history_panel, [fast, slow, wide])
    choices = [history_panel.overlay_metric_choice.itemData(i) for i in range(history_panel.overlay_metric_choice.count())]
    assert choices[:3] == ["loss", "step_time", "samples_per_s"]
    with qtbot.waitSignal(history_panel.overlay_shown, timeout=15_000):
        history_panel.set_overlay_metric("step_time")
    curves = curves_by_run(history_panel)
    assert sorted(curves) == sorted([fast, slow, wide])
    # Milliseconds, as the step time chart draws them; the mean over each run's ranks.
    np.testing.assert_allclose(curves[fast], np.full(30, 150.0))
    np.testing.assert_allclose(curves[slow], np.full(30, 450.0))
    np.testing.assert_allclose(curves[wide], np.full(30, 250.0))
    assert "Step time" in history_panel.overlay_chart.title
    assert sorted(history_panel.overlay_chart.legend.labels()) == sorted(
        [f"run {fast} (fast)", f"run {slow} (slow)", f"run {wide} (wide)"])


def test_overlay_compares_gpu_utilisation_against_time(qtbot, store, history_panel):
    busy, idle = add_run(store, "busy", gpu_util=80.0), add_run(store, "idle", gpu_util=20.0)
    overlay(qtbot, history_panel, [busy, idle])
    with qtbot.waitSignal(history_panel.overlay_shown, timeout=15_000):
        history_panel.set_overlay_metric("gpu/utilization")
    assert history_panel.overlay_chart.x_axis == "time"
    curves = curves_by_run(history_panel)
    np.testing.assert_allclose(curves[busy], np.full(30, 85.0))  # the mean of GPU 0 (80) and GPU 1 (90)
    np.testing.assert_allclose(curves[idle], np.full(30, 25.0))


def test_overlay_takes_the_smoothing_of_the_live_charts(qtbot, store, history_panel):
    run_id = add_run(store, "alpha")
    overlay(qtbot, history_panel, [run_id])
    raw = curves_by_run(history_panel)[run_id].copy()
    history_panel.set_overlay_smoothing(0.8)
    chart = history_panel.overlay_chart
    assert chart.smoothing == 0.8
    np.testing.assert_allclose(chart.curve_data(0)[1], ema(raw, 0.8))
    assert chart.curve_set.has_faint(0)  # the raw curve stays, faint
    with qtbot.waitSignal(history_panel.overlay_shown, timeout=15_000):
        history_panel.set_overlay_metric("step_time")
    assert history_panel.overlay_chart.smoothing == 0.8  # a new metric keeps the smoothing chosen


def test_identical_runs_get_distinct_colours_and_dash_styles(qtbot, store, history_panel):
    first, second, other = add_run(store, "a"), add_run(store, "b"), add_run(store, "c", loss_offset=1.0)
    overlay(qtbot, history_panel, [first, second, other])
    chart = history_panel.overlay_chart
    keys = {run_id: key for key, run_id in enumerate(history_panel.overlay_run_ids)}
    np.testing.assert_allclose(chart.curve_data(keys[first])[1], chart.curve_data(keys[second])[1])
    pens = {run_id: chart.curve_pen(key) for run_id, key in keys.items()}
    assert len({pen.color().name() for pen in pens.values()}) == 3
    assert pens[first].style() != pens[second].style()  # the one on top does not hide the other
    assert pens[other].style() == Qt.PenStyle.SolidLine  # a curve of its own stays solid
    assert len(chart.legend.labels()) == 3


def test_overlay_axis_widens_for_long_labels(qtbot, store, history_panel):
    big = add_run(store, "big")
    store.write_batch(big, RecordBatch(metrics=[MetricRecord(rank, T0 + s, s, "samples_per_s", 99900.0 + 0.01 * s, "auto")
                                                for s in range(30) for rank in (2, 3)]))  # about 50,000 a rank
    overlay(qtbot, history_panel, [big])
    with qtbot.waitSignal(history_panel.overlay_shown, timeout=15_000):
        history_panel.set_overlay_metric("samples_per_s")
    axis = history_panel.overlay_chart.left_axis
    # no label dropped for want of room (once the layout settled: a loaded machine takes its time)
    qtbot.waitUntil(lambda: axis.labels_width() > 0
                    and axis.width() >= axis.labels_width() + axis.style["tickTextOffset"][0], timeout=15_000)
