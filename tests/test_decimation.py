"""Chart decimation and smoothing (numpy only, no Qt)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from gui.charts.smoothing import SmoothedValues, ema
from gui.models.series import FACTOR, STEP, TIME, Column, MinMaxColumn, Series


def reference_ema(values, weight, start=None):
    out, smoothed = [], start
    for value in values:
        if not math.isnan(value):
            smoothed = value if smoothed is None else weight * smoothed + (1 - weight) * value
        out.append(math.nan if smoothed is None else smoothed)
    return np.array(out)


def test_column_grows_and_keeps_values():
    column = Column(capacity=2)
    for chunk in (np.arange(3.0), np.arange(3.0, 10.0), np.array([]), np.arange(10.0, 1000.0)):
        column.extend(chunk)
    assert len(column) == 1000
    np.testing.assert_array_equal(column.values, np.arange(1000.0))
    assert column.last == 999.0


def test_pyramid_matches_brute_force_after_appends_of_any_size():
    rng = np.random.default_rng(1)
    column = MinMaxColumn(capacity=1)
    chunks = []
    for size in [1, 7, 8, 9, 63, 64, 65, 1, 1, 500, 3, 4096, 2, 777]:
        chunk = rng.normal(size=size)
        chunks.append(chunk)
        column.extend(chunk)
        values = np.concatenate(chunks)
        for level in range(1, column.levels + 1):
            block = FACTOR**level
            mins, maxs = column.level(level)
            starts = np.arange(0, len(values), block)
            np.testing.assert_array_equal(mins, np.minimum.reduceat(values, starts))
            np.testing.assert_array_equal(maxs, np.maximum.reduceat(values, starts))
    assert column.levels >= 4


def test_pyramid_ignores_nan_unless_the_whole_block_is_nan():
    column = MinMaxColumn()
    values = np.arange(64.0)
    values[3] = np.nan
    values[8:16] = np.nan
    column.extend(values)
    mins, maxs = column.level(1)
    assert mins[0] == 0.0 and maxs[0] == 7.0
    assert math.isnan(mins[1]) and math.isnan(maxs[1])


def make_series(count: int, spike_at: int | None = None) -> Series:
    steps = np.arange(count, dtype=np.float64)
    values = np.sin(steps / 1000.0)
    if spike_at is not None:
        values[spike_at] = 50.0
        values[spike_at + 1] = -50.0
    series = Series()
    series.append(steps, 1000.0 + steps * 0.5, values)
    return series


def test_few_points_are_drawn_raw():
    series = make_series(300)
    x, y = series.decimate(STEP, pixels=500)
    np.testing.assert_array_equal(x, np.arange(300.0))
    np.testing.assert_array_equal(y, series.values.values)


@pytest.mark.parametrize("count", [10_000, 100_000, 1_000_000])
def test_many_points_become_about_two_per_pixel_and_keep_spikes(count):
    series = make_series(count, spike_at=count // 3)
    pixels = 700
    x, y = series.decimate(STEP, pixels=pixels)
    assert pixels <= len(x) <= 2 * pixels + 4
    assert y.max() == 50.0 and y.min() == -50.0  # a one-point spike survives
    assert np.all(np.diff(x) >= 0)
    assert x[0] == 0.0 and x[-1] <= count - 1


def test_zoomed_range_draws_only_that_range_in_detail():
    series = make_series(1_000_000)
    x, y = series.decimate(STEP, 400_000.0, 400_500.0, pixels=1000)
    # 501 points fit in 1000 pixels: raw, plus one neighbour on each side.
    assert len(x) == 503
    assert x[0] == 399_999.0 and x[-1] == 400_501.0
    np.testing.assert_array_equal(y, series.values.values[399_999:400_502])


def test_time_axis_uses_the_time_column():
    series = make_series(100)
    first, stop = series.index_range(TIME, 1010.0, 1020.0)
    assert (first, stop) == (19, 42)
    x, _ = series.decimate(TIME, 1010.0, 1020.0, pixels=100)
    assert x[0] == pytest.approx(1009.5) and x[-1] == pytest.approx(1020.5)


def test_a_step_counter_that_restarts_falls_back_to_the_whole_series():
    series = Series()
    series.append([0, 1, 2, 3], [0, 1, 2, 3], [1, 1, 1, 1])
    series.append([0, 1], [4, 5], [2, 2])  # torchrun restarted the workers
    assert series.sorted_by[STEP] is False and series.sorted_by[TIME] is True
    assert series.index_range(STEP, 1, 2) == (0, 6)
    assert series.index_range(TIME, 4, 5) == (3, 6)


def test_missing_steps_take_the_previous_step():
    series = Series()
    series.append([None, None], [0.0, 1.0], [1.0, 2.0])
    series.append([5, None], [2.0, 3.0], [3.0, 4.0])
    steps = series.steps.values
    assert math.isnan(steps[0]) and math.isnan(steps[1])
    assert list(steps[2:]) == [5.0, 5.0]


def test_append_rejects_columns_of_different_lengths():
    with pytest.raises(ValueError, match="same length"):
        Series().append([1, 2], [1.0], [1.0, 2.0])


@pytest.mark.parametrize("weight", [0.0, 0.01, 0.3, 0.6, 0.9, 0.99, 0.999])
def test_ema_matches_the_recurrence(weight):
    rng = np.random.default_rng(2)
    values = rng.normal(size=20_000) + np.linspace(0, 50, 20_000)
    values[[5, 100, 101, 102]] = np.nan
    np.testing.assert_allclose(ema(values, weight), reference_ema(values, weight), rtol=1e-9, atol=1e-9)


def test_ema_continues_from_a_start_value_and_keeps_leading_nan():
    values = np.array([np.nan, 1.0, 2.0])
    assert np.isnan(ema(values, 0.5)[0])
    np.testing.assert_allclose(ema(values, 0.5, start=3.0), [3.0, 2.0, 2.0])


def test_ema_rejects_a_weight_outside_zero_to_one():
    with pytest.raises(ValueError, match="smoothing weight"):
        ema(np.ones(3), 1.0)


def test_smoothed_values_follow_appends_and_weight_changes():
    rng = np.random.default_rng(3)
    series = Series()
    smoothed = SmoothedValues(series, 0.9)
    all_values = []
    for size in (1, 10, 1000, 5):
        chunk = rng.normal(size=size)
        all_values.append(chunk)
        series.append(np.arange(size), np.arange(size), chunk)
        column = smoothed.sync()
        np.testing.assert_allclose(column.values, reference_ema(np.concatenate(all_values), 0.9), atol=1e-12)
    smoothed.set_weight(0.5)
    np.testing.assert_allclose(smoothed.sync().values, reference_ema(np.concatenate(all_values), 0.5), atol=1e-12)
    _x, y = series.decimate(STEP, pixels=1000, values=smoothed.column)
    assert len(y) == len(series)
