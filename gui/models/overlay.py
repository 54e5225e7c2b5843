"""Runs compared on one chart: any metric the monitor charts, one curve per run (Qt-free).

A run's curve is the mean over its ranks (or GPUs) at each step, or at each sample time
for samples that have no step, as W&B draws a run's line: one number per x. The
metrics offered are the monitor's charts (``gui.models.charts``) that any of the runs
recorded, in the monitor's order, then the keys the scripts logged.

Runs that trained alike draw the same curve, and the one drawn last would hide the
others: :func:`dash_styles` gives each curve in a group of coinciding curves its own
dash pattern, so every run stays visible under the legend's colour.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gui.models.charts import BUILT_IN_CHARTS, ChartDef, logged_chart, logged_metric_names
from gui.models.monitor import MonitorModel
from gui.models.series import Series

SOLID, DASHED, DOTTED, DASH_DOTTED = "solid", "dashed", "dotted", "dash-dotted"
DASHES = (SOLID, DASHED, DOTTED, DASH_DOTTED)
"""Dash patterns given, in turn, to curves that coincide."""
OVERLAY_RUN_LIMIT = 10
"""Runs overlaid at once: past the ten distinct colours of the palette, curves cannot be told apart."""


@dataclass(frozen=True)
class OverlayCurve:
    run_id: int
    label: str
    steps: np.ndarray
    times: np.ndarray
    """Seconds since the run started."""
    values: np.ndarray
    """The mean over ranks (or GPUs) at each x, unscaled (as recorded)."""

    def series(self) -> Series:
        series = Series(max(64, len(self.values)))
        series.append(self.steps, self.times, self.values)
        return series


def run_label(run_id: int, profile: str | None) -> str:
    return f"run {run_id}" + (f" ({profile})" if profile else "")


def overlay_metrics(models: list[MonitorModel]) -> list[ChartDef]:
    """The charts any of ``models`` has points for: the built-in ones in the monitor's order, then
    the logged keys in the order they first appeared."""
    def recorded(name: str) -> bool:
        return any(len(series) for model in models for series in model.series(name).values())

    charts = [definition for definition in BUILT_IN_CHARTS if recorded(definition.series)]
    logged: list[str] = []
    for model in models:
        logged += [name for name in logged_metric_names(model) if name not in logged and recorded(name)]
    return charts + [logged_chart(name) for name in logged]


def overlay_curve(run_id: int, label: str, model: MonitorModel, definition: ChartDef) -> OverlayCurve:
    """Run ``run_id``'s curve of ``definition``: the mean over its keys at each step (each sample
    time for ``time_only`` charts); NaN values are left out of a mean, not counted as 0."""
    parts = [series for series in model.series(definition.series).values() if len(series)]
    if not parts:
        empty = np.empty(0)
        return OverlayCurve(run_id, label, empty, empty, empty)
    steps = np.concatenate([series.steps.values for series in parts])
    times = np.concatenate([series.times.values for series in parts]) - model.t0
    values = np.concatenate([series.values.values for series in parts])
    group_by = times if definition.time_only else steps
    keep = np.isfinite(group_by)
    group_by, steps, times, values = group_by[keep], steps[keep], times[keep], values[keep]
    unique, inverse = np.unique(group_by, return_inverse=True)
    finite = np.isfinite(values)
    sums = np.bincount(inverse, weights=np.where(finite, values, 0.0), minlength=len(unique))
    counts = np.bincount(inverse, weights=finite.astype(np.float64), minlength=len(unique))
    with np.errstate(invalid="ignore", divide="ignore"):
        means = np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)
    first_time = np.full(len(unique), np.inf)
    np.minimum.at(first_time, inverse, times)
    first_step = np.full(len(unique), np.inf)
    np.minimum.at(first_step, inverse, np.where(np.isfinite(steps), steps, np.inf))
    first_step[~np.isfinite(first_step)] = np.nan
    if definition.time_only:
        return OverlayCurve(run_id, label, first_step, unique, means)
    return OverlayCurve(run_id, label, unique, first_time, means)


def coincide(first: OverlayCurve, second: OverlayCurve, axis: str = "step") -> bool:
    """Whether two curves would be drawn on top of each other: the same x and (nearly) the same values."""
    x1 = first.steps if axis == "step" else first.times
    x2 = second.steps if axis == "step" else second.times
    if len(x1) == 0 or len(x1) != len(x2):
        return False
    return bool(np.allclose(x1, x2, equal_nan=True) and np.allclose(first.values, second.values, rtol=1e-3,
                                                                    atol=1e-12, equal_nan=True))


def dash_styles(curves: list[OverlayCurve], axis: str = "step") -> list[str]:
    """A dash pattern per curve: solid, but for a curve that coincides with an earlier one, the next
    pattern of its group (``DASHES``), so both stay visible."""
    styles: list[str] = []
    for position, curve in enumerate(curves):
        same = [styles[earlier] for earlier in range(position) if coincide(curves[earlier], curve, axis)]
        styles.append(DASHES[len(same) % len(DASHES)])
    return styles


def overlay_title(definition: ChartDef, curves: list[OverlayCurve]) -> str:
    """``Loss · run 3 vs run 5`` (mean over ranks)."""
    runs = " vs ".join(f"run {curve.run_id}" for curve in curves)
    per = "GPUs" if definition.key_label == "GPU" else "ranks"
    return f"{definition.title} · {runs} (mean over {per})"
