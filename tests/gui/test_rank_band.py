"""Charts at many ranks: the median and the p10-p90 band across ranks, with only the ranks that
stand out drawn on their own, against a real runner with fake ranks."""

from __future__ import annotations

import numpy as np
import pytest
from PySide6.QtCore import QEvent, QObject

from gui.charts import chart as chart_module
from gui.charts.grid import ChartGrid
from gui.models.monitor import MonitorModel
from gui.models.rank_band import BAND_ABOVE_RANKS, rank_band
from gui.widgets.monitor_panel import MonitorPanel
from rankwatch.protocol import GpuSample, MetricRecord
from runner.runstate.messages import UpdateMessage

pytestmark = pytest.mark.gui


def shown_grid(qtbot, model: MonitorModel, width: int, height: int) -> ChartGrid:
    """The chart grid of ``model`` on screen (offscreen), its charts drawn once."""
    grid = ChartGrid(model, refresh_hz=1)
    qtbot.addWidget(grid)
    grid.resize(width, height)
    grid.show()
    grid.refresh(force=True)
    return grid


def test_the_band_is_the_percentiles_across_ranks_and_a_rank_counts_only_inside_its_own_range():
    x = np.arange(11.0)
    curves = [(x, np.full(11, float(rank))) for rank in range(11)]  # rank r is flat at r
    curves.append((np.arange(5.0, 11.0), np.full(6, 100.0)))  # a late rank, from x = 5 only
    band = rank_band(curves, 11)
    assert band is not None and band.ranks == 12
    np.testing.assert_allclose(band.median[:5], 5.0)  # before x = 5: ranks 0..10 only
    np.testing.assert_allclose(band.low[:5], 1.0) and np.testing.assert_allclose(band.high[:5], 9.0)
    np.testing.assert_allclose(band.median[5:], 5.5)  # from x = 5: the late rank counts too
    assert np.allclose(band.high[5:], np.percentile([*range(11), 100.0], 90))
    assert rank_band([(np.array([1.0]), np.array([2.0]))], 10) is None


def test_thirty_two_ranks_draw_the_median_and_band_and_only_the_failed_rank_on_its_own(qtbot, live_run):
    panel = MonitorPanel()
    qtbot.addWidget(panel)
    panel.resize(1300, 900)
    panel.show()
    runner = live_run(ranks=32)
    panel.attach(runner.run_id)
    grid = panel.charts
    loss = grid.charts["loss"]
    qtbot.waitUntil(lambda: len(loss.keys) == 32 and loss.band is not None and len(loss.band.x) > 5, timeout=20000)
    assert BAND_ABOVE_RANKS < 32 and loss.band_mode and loss.band.ranks == 32
    def drawn() -> set[int]:
        return {key for key in loss.keys if loss.curve_points(key)}

    # the band, and only the ranks that stand out (none, unless a loaded machine made one stall)
    assert drawn() == set(loss.highlighted) == set(grid.rank_legend.keys)
    assert grid.rank_legend.title.startswith("Median and p10-p90 of 32 ranks")
    runner.fail_rank(5, exit_code=1)
    qtbot.waitUntil(lambda: loss.curve_points(5) > 0, timeout=20000)
    assert 5 in loss.highlighted and drawn() == set(loss.highlighted) and 5 in grid.rank_legend.keys
    x = float(loss.band.x[len(loss.band.x) // 2])
    loss.show_readout_at(x, float(loss.band.median[len(loss.band.x) // 2]))
    assert "median of 32 ranks" in loss.readout_text() and "p90 of 32 ranks" in loss.readout_text()
    table = panel.rank_table  # a rank chosen in the rank table is drawn over the band too
    qtbot.waitUntil(lambda: 9 in table.visible_ranks(), timeout=20000)
    table.view.selectRow(table.visible_ranks().index(9))
    grid.refresh(force=True)
    assert loss.curve_points(9) > 0 and {5, 9} <= set(grid.rank_legend.keys)
    grid.every_rank.setChecked(True)  # up to 128 ranks, every rank's own curve on demand
    assert not loss.band_mode and all(loss.curve_points(key) > 0 for key in loss.keys)
    panel.detach()


def test_new_data_recomputes_one_charts_band_a_frame_and_every_chart_gets_its_turn(qtbot, monkeypatch):
    """At 1,024 ranks a band costs ~20-30 ms: every chart recomputing its band in the same frame
    made frames of 100+ ms once a second (``scale_gui.py``, cProfile of the frames)."""
    monkeypatch.setattr(chart_module, "BAND_SECONDS", 0.0)  # each band due again at once: only the turns limit
    monkeypatch.setattr(chart_module, "BAND_SHARE", 1e9)
    model = MonitorModel()
    names = ("loss", "step_time", "samples_per_s")

    def steps(first: int, count: int) -> None:
        model.apply(UpdateMessage(metrics=tuple(
            MetricRecord(rank, 1000.0 + step, step, name, 1.0 + rank / 100, "auto")
            for step in range(first, first + count) for rank in range(32) for name in names)).to_wire())

    steps(0, 20)
    grid = shown_grid(qtbot, model, 1200, 800)
    banded = [chart for chart in grid.charts.values() if chart.band_mode and chart.band is not None]
    assert len(banded) >= 3
    drawn = {id(chart): chart._band_drawn for chart in banded}
    steps(20, 5)
    turns = []
    for _frame in range(len(banded)):
        grid.refresh()
        turns.append([chart for chart in banded if chart.band_recomputed])
    assert all(len(recomputed) == 1 for recomputed in turns), [len(r) for r in turns]
    assert {id(recomputed[0]) for recomputed in turns} == {id(chart) for chart in banded}
    assert all(chart._band_drawn != drawn[id(chart)] for chart in banded)  # every band has the new steps


def test_a_band_that_takes_long_waits_longer_for_the_next(qtbot, monkeypatch):
    """The band's share of the GUI thread is bounded: its next recompute waits its cost / BAND_SHARE
    (here a share so small that any cost means a long wait)."""
    monkeypatch.setattr(chart_module, "BAND_SECONDS", 0.0)
    monkeypatch.setattr(chart_module, "BAND_SHARE", 1e-9)
    model = MonitorModel()

    def steps(first: int) -> None:
        model.apply(UpdateMessage(metrics=tuple(MetricRecord(rank, 1000.0 + step, step, "loss", 1.0, "auto")
                                                for step in range(first, first + 10) for rank in range(32))).to_wire())

    steps(0)
    grid = shown_grid(qtbot, model, 800, 600)
    loss = grid.charts["loss"]
    assert loss.band is not None and loss._band_every > 1000.0
    steps(10)
    grid.refresh()
    assert not loss.band_recomputed


def test_a_band_samples_each_ranks_own_stored_points_however_many_it_has():
    """The band interpolates each rank's stored points at its grid. Decimating them first to
    min/max pairs per pixel (done beyond 8 points a grid point, to bound the cost) moved the
    sampled values inside each pixel's range, and cost most of a 1,024-rank band frame."""
    from gui.models.series import STEP, Series

    for length in (400, 5000):
        series = Series()
        steps = np.arange(float(length))
        values = np.where(steps % 2 == 0, 1.0, 3.0) + steps / length  # a zigzag: every pixel holds both
        series.append(steps, steps + 1.7e9, values)
        x, y = series.band_points(STEP)
        np.testing.assert_array_equal(x, steps) and np.testing.assert_array_equal(y, values)
        assert not x.flags.writeable and not y.flags.writeable  # the series' own memory, read only
        band = rank_band([(x, y)], 97)
        grid = np.linspace(0.0, length - 1.0, 97)
        assert band is not None and np.allclose(band.median, np.interp(grid, steps, values), rtol=0, atol=1e-12)


def _band_rank_by_rank(curves: list[tuple[np.ndarray, np.ndarray]], grid: np.ndarray) -> np.ndarray:
    """What the band is, written plainly: each rank's finite points interpolated at the grid (NaN
    outside its own range), then the percentiles across ranks, NaN left out."""
    rows = []
    for x, y in curves:
        finite = np.isfinite(x) & np.isfinite(y)
        rows.append(np.interp(grid, x[finite], y[finite], left=np.nan, right=np.nan))
    return np.nanpercentile(np.array(rows), [10.0, 50.0, 90.0], axis=0)


def test_ranks_logging_other_steps_gaps_or_fewer_steps_get_the_band_their_own_points_give(qtbot):
    """Ranks sharing their steps are sampled together (one search for all); the others are
    sampled each on its own points, and a chart's band is the same as if every rank were, for
    runs longer than the chart has pixels too."""
    from gui.models.series import Series

    generator = np.random.default_rng(7)
    steps = np.arange(6000.0)
    columns = [(steps, 2.0 - steps / 6000 + generator.normal(0, 0.05, len(steps))) for _rank in range(40)]
    columns.append((steps[:4800], generator.normal(1.5, 0.2, 4800)))  # behind the others
    columns.append((steps[::3], generator.normal(1.0, 0.2, 2000)))  # logs every third step only
    columns.append((steps[1400:], generator.normal(1.2, 0.2, 4600)))  # started late
    gappy = generator.normal(1.4, 0.2, len(steps))
    gappy[2000:2200] = np.nan  # no value for 200 steps: joined across
    columns.append((steps, gappy))
    leading = steps.copy()
    leading[:5] = np.nan  # steps unknown before the first one
    columns.append((leading, generator.normal(1.6, 0.2, len(steps))))
    chart = chart_module.MetricChart("loss")
    qtbot.addWidget(chart)
    chart.resize(900, 500)
    chart.show()
    for key, (x, y) in enumerate(columns):
        series = Series()
        series.append(x, x + 1.7e9, y)
        chart.set_series(key, str(key), series, count=len(columns))
    chart.set_band_mode(True)
    chart.refresh(force=True)
    band = chart.band
    assert band is not None and band.ranks == len(columns) and len(band.x) > 100
    np.testing.assert_allclose(band.x, np.linspace(0.0, 5999.0, len(band.x)))
    expected = _band_rank_by_rank(columns, band.x)
    np.testing.assert_allclose(np.array([band.low, band.median, band.high]), expected, rtol=0, atol=1e-9)


def test_a_zoomed_band_spans_the_view_only():
    x = np.arange(100.0)
    curves = [(x, x * rank) for rank in range(1, 21)]
    band = rank_band(curves, 11, 40.0, 60.0)
    assert band is not None
    np.testing.assert_allclose(band.x, np.linspace(40.0, 60.0, 11))
    np.testing.assert_allclose(np.array([band.low, band.median, band.high]),
                               _band_rank_by_rank(curves, band.x), rtol=0, atol=1e-9)


class _PaintCounter(QObject):
    """Counts the paint events a widget gets."""

    def __init__(self) -> None:
        super().__init__()
        self.paints = 0

    def eventFilter(self, _watched: QObject, event: QEvent) -> bool:  # noqa: N802 - Qt override
        if event.type() == QEvent.Type.Paint:
            self.paints += 1
        return False


def test_new_points_of_ranks_inside_the_band_repaint_nothing_until_the_band_is_recomputed(qtbot, monkeypatch):
    """Their points show only through the band: emptying their curves again every frame cost ~3 ms
    a chart at 1,024 ranks, and a repaint of every chart every frame."""
    monkeypatch.setattr(chart_module, "BAND_SECONDS", 1e9)  # the band is not due again
    model = MonitorModel()

    def steps(first: int, count: int) -> None:
        model.apply(UpdateMessage(metrics=tuple(MetricRecord(rank, 1000.0 + step, step, "loss", 1.0 + rank / 100,
                                                             "auto")
                                                for step in range(first, first + count) for rank in range(32))
                                  ).to_wire())

    steps(0, 20)
    grid = shown_grid(qtbot, model, 800, 600)
    loss = grid.charts["loss"]
    assert loss.band_mode and loss.band is not None and not loss.highlighted
    qtbot.wait(50)
    counter = _PaintCounter()
    loss.plot_widget.viewport().installEventFilter(counter)
    steps(20, 3)
    grid.refresh()
    qtbot.wait(50)
    assert not loss.band_recomputed and counter.paints == 0
    assert all(loss.curve_points(key) == 0 for key in loss.keys)
    loss._band_every = 0.0  # the band is due: it is recomputed with the new steps and repainted
    grid.refresh()
    qtbot.wait(50)
    assert loss.band_recomputed and counter.paints > 0 and loss.band is not None and loss.band.x[-1] == 22.0


def test_many_gpus_draw_their_median_and_band_and_the_gpu_legend_names_none(qtbot):
    """The scale benchmark's 1,024 GPUs (8 per node) were 1,024 legend entries: they filled the
    area of every chart (seen on the 1,024-rank screenshot)."""
    model = MonitorModel()
    gpus = BAND_ABOVE_RANKS + 8
    model.apply(UpdateMessage(gpus=tuple(GpuSample(1000.0 + i, gpu, 50.0 + gpu % 7, 10**9, 8 * 10**10, None, None, None)
                                         for i in range(5) for gpu in range(gpus))).to_wire())
    grid = shown_grid(qtbot, model, 1200, 800)
    gpu_charts = [chart for name, chart in grid.charts.items() if name.startswith("gpu/")]
    assert gpu_charts and all(chart.band_mode for chart in gpu_charts)
    assert grid.gpu_legend.keys == []
    assert grid.gpu_legend.title == f"Median and p10-p90 of {gpus:,} GPUs"


def test_a_few_gpus_keep_a_curve_and_a_legend_entry_each(qtbot):
    model = MonitorModel()
    model.apply(UpdateMessage(gpus=tuple(GpuSample(1000.0 + i, gpu, 50.0, 10**9, 8 * 10**10, None, None, None)
                                         for i in range(5) for gpu in range(8))).to_wire())
    grid = shown_grid(qtbot, model, 1200, 800)
    assert not any(chart.band_mode for name, chart in grid.charts.items() if name.startswith("gpu/"))
    assert grid.gpu_legend.keys == list(range(8)) and grid.gpu_legend.title == "GPUs"
