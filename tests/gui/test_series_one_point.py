"""A point appended alone gives the series exactly what appending it in a batch gives: the same
columns, the same order flags and every level of the min/max pyramid. Live updates bring one
point per series; the single-point path skips numpy's per-call cost."""

from __future__ import annotations

import math
import random

import numpy as np

from gui.models.series import Series


def random_points(chooser: random.Random, count: int) -> list[tuple]:
    points, step, t = [], 0, 1000.0
    for _ in range(count):
        step += chooser.choice([1, 1, 1, 0, -5])  # now and then a restart counts back
        t += chooser.choice([0.1, 0.1, -1.0])
        points.append((chooser.choice([step, step, None]), chooser.choice([t, t, None]),
                       chooser.choice([chooser.uniform(-3, 3), chooser.uniform(-3, 3), None, math.nan, 1e6])))
    return points


def same(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and bool(np.all((a == b) | (np.isnan(a) & np.isnan(b))))


def test_points_appended_one_by_one_equal_the_same_points_appended_together():
    chooser = random.Random(11)
    for trial in range(40):
        points = random_points(chooser, chooser.choice([1, 7, 8, 9, 64, 65, 600, 5000]))
        one_by_one, together = Series(capacity=1), Series(capacity=1)
        for step, t, value in points:
            one_by_one.append([step], [t], [value])
        together.append(*zip(*points, strict=True))
        assert same(one_by_one.steps.values, together.steps.values), trial
        assert same(one_by_one.times.values, together.times.values), trial
        assert same(one_by_one.values.values, together.values.values), trial
        assert one_by_one.sorted_by == together.sorted_by, trial
        assert one_by_one.values.levels == together.values.levels, trial
        for level in range(1, together.values.levels + 1):
            for mine, theirs in zip(one_by_one.values.level(level), together.values.level(level), strict=True):
                assert same(mine, theirs), (trial, level)


def test_batches_of_mixed_sizes_keep_the_pyramid_of_one_batch():
    chooser = random.Random(5)
    points = random_points(chooser, 3000)
    mixed, together = Series(), Series()
    index = 0
    while index < len(points):
        size = chooser.choice([1, 1, 1, 2, 9, 40])
        mixed.append(*zip(*points[index:index + size], strict=True))
        index += size
    together.append(*zip(*points, strict=True))
    for level in range(together.values.levels + 1):
        for mine, theirs in zip(mixed.values.level(level), together.values.level(level), strict=True):
            assert same(mine, theirs), level
