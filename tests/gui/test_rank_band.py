"""Charts at many ranks: the median and the p10-p90 band across ranks, with only the ranks that
stand out drawn on their own, against a real runner with fake ranks."""

from __future__ import annotations

import numpy as np
import pytest

from gui.models.rank_band import BAND_ABOVE_RANKS, rank_band
from gui.widgets.monitor_panel import MonitorPanel

pytestmark = pytest.mark.gui


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
    qtbot.waitUntil(lambda: len(loss.keys) == 32 and loss.band is not None and len(loss.band.x) > 5, timeout=10000)
    assert BAND_ABOVE_RANKS < 32 and loss.band_mode and loss.band.ranks == 32
    def drawn() -> set[int]:
        return {key for key in loss.keys if loss.curve_points(key)}

    # the band, and only the ranks that stand out (none, unless a loaded machine made one stall)
    assert drawn() == set(loss.highlighted) == set(grid.rank_legend.keys)
    assert grid.rank_legend.title.startswith("Median and p10-p90 of 32 ranks")
    runner.fail_rank(5, exit_code=1)
    qtbot.waitUntil(lambda: loss.curve_points(5) > 0, timeout=5000)
    assert 5 in loss.highlighted and drawn() == set(loss.highlighted) and 5 in grid.rank_legend.keys
    x = float(loss.band.x[len(loss.band.x) // 2])
    loss.show_readout_at(x, float(loss.band.median[len(loss.band.x) // 2]))
    assert "median of 32 ranks" in loss.readout_text() and "p90 of 32 ranks" in loss.readout_text()
    table = panel.rank_table  # a rank chosen in the rank table is drawn over the band too
    qtbot.waitUntil(lambda: 9 in table.visible_ranks(), timeout=5000)
    table.view.selectRow(table.visible_ranks().index(9))
    grid.refresh(force=True)
    assert loss.curve_points(9) > 0 and {5, 9} <= set(grid.rank_legend.keys)
    grid.every_rank.setChecked(True)  # up to 128 ranks, every rank's own curve on demand
    assert not loss.band_mode and all(loss.curve_points(key) > 0 for key in loss.keys)
    panel.detach()
