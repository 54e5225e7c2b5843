"""A run's progress (epoch, step, elapsed, ETA), derived once for the terminal and the GUI (part of RunState).

Qt-free and I/O-free: the GUI's monitor model and the terminal view each feed a
:class:`ProgressTracker` the (step, time) pairs and log lines they receive, and call
:func:`compute_progress` with what they know of the run.

Where the total comes from, first found wins: a metric the script logs
(``total_steps``, or ``steps_per_epoch`` times ``epochs``), the script's arguments
(``--max-steps``, ``--epochs``), or a printed "N steps per epoch" line. The rate
behind the ETA is the step rate over the last minute.
"""

from __future__ import annotations

import math
import re
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from runner.format import format_duration
from runner.rows import RunInfo
from runner.state import RunStatus

TOTAL_STEP_METRICS = ("total_steps", "max_steps", "num_steps")
TOTAL_EPOCH_METRICS = ("epochs", "total_epochs", "num_epochs", "max_epochs")
STEPS_PER_EPOCH_METRICS = ("steps_per_epoch",)
EPOCH_METRICS = ("epoch",)
PROGRESS_METRICS = TOTAL_STEP_METRICS + TOTAL_EPOCH_METRICS + STEPS_PER_EPOCH_METRICS + EPOCH_METRICS
"""Metric names that describe progress (the terminal shows them in the header, not as columns)."""
STEP_ARGS = ("--max-steps", "--max_steps", "--total-steps", "--total_steps", "--num-steps", "--num_steps", "--steps")
EPOCH_ARGS = ("--epochs", "--num-epochs", "--num_epochs", "--max-epochs", "--max_epochs", "--n-epochs", "--n_epochs")
STEPS_PER_EPOCH_LINE = re.compile(r"\b(\d+)\s+(?:steps|batches|iterations)\s+(?:per|an|each)\s+epoch\b", re.I)
RATE_WINDOW_SECONDS = 60.0
MARK_SPACING_SECONDS = 0.5
LIVE_STATUSES = ("running", "starting")
ENDED_STATUSES = frozenset(status.value for status in RunStatus if status.finished)
"""A run in one of these will have no more steps."""


@dataclass(frozen=True)
class Progress:
    step: int | None
    """The newest step index any rank reported (0 is the first step, as the charts count)."""
    total_steps: int | None
    epoch: int | None
    """The epoch under way, counted from 1 (or as the script logs it)."""
    total_epochs: int | None
    elapsed_s: float | None
    eta_s: float | None
    steps_per_s: float | None

    @property
    def steps_done(self) -> int | None:
        """Steps completed: one more than the newest step index (never more than the total)."""
        if self.step is None:
            return None
        done = self.step + 1
        return min(done, self.total_steps) if self.total_steps else done

    @property
    def fraction(self) -> float | None:
        done = self.steps_done
        if done is None or not self.total_steps:
            return None
        return max(0.0, min(1.0, done / self.total_steps))


class ProgressTracker:
    """(time, step) marks about every half second over the last minute, and the
    "N steps per epoch" a script printed."""

    def __init__(self) -> None:
        self.marks: deque[tuple[float, float]] = deque()
        self.last_step: float | None = None
        self.steps_per_epoch_from_log: int | None = None

    def note_steps(self, steps: Iterable[Any], times: Iterable[float]) -> None:
        """Steps of one series (in order); ``None`` and NaN steps are skipped."""
        marks = self.marks
        last = -math.inf if self.last_step is None else self.last_step
        for step, t in zip(steps, times, strict=False):
            if step is None or step <= last or (isinstance(step, float) and math.isnan(step)):
                continue
            last = float(step)
            if len(marks) >= 2 and t - marks[-2][0] < MARK_SPACING_SECONDS:
                marks[-1] = (float(t), last)
            else:
                marks.append((float(t), last))
        if last != -math.inf:
            self.last_step = last
        while len(marks) > 2 and marks[-1][0] - marks[1][0] > RATE_WINDOW_SECONDS:
            marks.popleft()

    def note_line(self, line: str) -> None:
        if self.steps_per_epoch_from_log is None:
            found = STEPS_PER_EPOCH_LINE.search(line)
            if found:
                self.steps_per_epoch_from_log = int(found.group(1))

    def rate(self) -> float | None:
        """Steps per second over the marks, or None while there is too little to say."""
        if len(self.marks) < 2:
            return None
        (t_old, s_old), (t_new, s_new) = self.marks[0], self.marks[-1]
        if t_new - t_old > MARK_SPACING_SECONDS and s_new > s_old:
            return (s_new - s_old) / (t_new - t_old)
        return None


def number_after_flag(args: Sequence[Any], flags: Sequence[str]) -> int | None:
    """The integer given to the first of ``flags`` in ``args`` (``--epochs 3`` or ``--epochs=3``)."""
    texts = [str(a) for a in args]
    for index, arg in enumerate(texts):
        for flag in flags:
            text = None
            if arg == flag and index + 1 < len(texts):
                text = texts[index + 1]
            elif arg.startswith(flag + "="):
                text = arg.split("=", 1)[1]
            if text is not None:
                try:
                    return int(text)
                except ValueError:
                    return None
    return None


def _int_or_none(value: float | None) -> int | None:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    return int(value)


def compute_progress(*, step: int | None, last_value: Callable[[Sequence[str]], float | None],
                     args: Sequence[Any], tracker: ProgressTracker, run: RunInfo | None,
                     finished: bool, now: float) -> Progress:
    """Step, epoch, elapsed and, when the number of steps is known, an ETA.

    Steps and epochs are counted the way a person reads them: after the last of 640
    steps (index 639) of 10 epochs, "epoch 10/10 · 640/640 steps", at 100 %.
    ``last_value(names)`` gives the newest value of the first of ``names`` any rank logged.
    """
    total_steps = _int_or_none(last_value(TOTAL_STEP_METRICS)) or number_after_flag(args, STEP_ARGS)
    total_epochs = _int_or_none(last_value(TOTAL_EPOCH_METRICS)) or number_after_flag(args, EPOCH_ARGS)
    per_epoch = _int_or_none(last_value(STEPS_PER_EPOCH_METRICS)) or tracker.steps_per_epoch_from_log
    if total_steps is None and per_epoch and total_epochs:
        total_steps = per_epoch * total_epochs
    epoch = _int_or_none(last_value(EPOCH_METRICS))
    if epoch is None and per_epoch and step is not None:
        # The epoch of the newest step, from 1: the last step of epoch 10 is in epoch 10.
        epoch = step // per_epoch + 1
        if total_epochs:
            epoch = min(epoch, total_epochs)
    elapsed = None
    if run is not None and run.started:
        elapsed = max(0.0, (run.ended or now) - run.started)
    rate = tracker.rate()
    eta = None
    if total_steps and step is not None and not finished:
        remaining = max(0, total_steps - (step + 1))
        if remaining == 0:
            eta = 0.0
        elif rate:
            eta = remaining / rate
    return Progress(step, total_steps, epoch, total_epochs, elapsed, eta, rate)


def progress_texts(progress: Progress, status: str | None) -> tuple[str, str]:
    """(position, timing) texts, e.g. ``("epoch 2/10 · 121/640 steps", "elapsed 1:05 · ETA 4:31")``.

    Steps are counted as done (the newest step index + 1), so a finished run reads
    "epoch 10/10 · 640/640 steps", not "step 639/640".
    """
    parts = []
    if progress.epoch is not None:
        parts.append(f"epoch {progress.epoch}" + (f"/{progress.total_epochs}" if progress.total_epochs else ""))
    done = progress.steps_done
    if done is not None:
        total = f"/{progress.total_steps:,}" if progress.total_steps else ""
        parts.append(f"{done:,}{total} step{'s' if (progress.total_steps or done) != 1 else ''}")
    timing = []
    if progress.elapsed_s is not None:
        timing.append(f"elapsed {format_duration(progress.elapsed_s)}")
    if progress.eta_s is not None and status in LIVE_STATUSES:
        timing.append(f"ETA {format_duration(progress.eta_s)}")
    nothing = "no steps" if status in ENDED_STATUSES else "no steps yet"  # ended: none will come
    return " · ".join(parts) or nothing, " · ".join(timing)
