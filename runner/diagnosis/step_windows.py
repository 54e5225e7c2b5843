"""Each rank's recent steps and its whole run, as the zero-code instrumentation measured them.

One collector (a hub observer) for the two monitors that judge where steps go: the straggler
monitor (``stragglers``: one rank against the others) and the bottleneck verdict
(``bottleneck``: what limits each rank and the run). Both read the same windows, so a step is
taken in once and the two cannot see different steps.

Per rank it keeps:

* the step times of its last ``WINDOW_STEPS`` steps (every step has one);
* its last ``WINDOW_STEPS`` **measured** steps (those whose phases were timed, every step or
  every few steps: ``rankwatch._phases.split_every``): the phases (``PHASES`` order, None where
  not measured), the clock, the compute time the hub derived and the run-queue wait
  (``cpu_wait``) the worker read;
* a longer history of its last ``HISTORY_STEPS`` measured steps and of its last
  ``HISTORY_STEPS`` steps' times, each step with the rank's time so far (its step times
  added up): the straggler monitor compares two windows of the same steps on every rank;
* its first and last step numbers (how many steps it made: a straggler's share of the run);
* the whole run's sum of each phase and count of measured steps (the end-of-run verdict);
* its GPU's utilisation (NVML, percent): each reading of the live model once, and only one
  whose averaging period began after the rank's first step reached the hub, while the rank
  steps: the evidence that tells a GPU that computes from one that waits for the host. Fewer
  than ``MIN_GPU_READINGS`` such readings are no evidence (a run of a second or two: the
  readings NVML has are of the GPU idling before the first step or after the last).
"""

from __future__ import annotations

import statistics
import time
from collections import deque
from dataclasses import dataclass, field
from typing import NamedTuple

from rankwatch import protocol
from rankwatch.protocol import Message, Metrics
from runner.hub.observer import HubObserver

WINDOW_STEPS = 10
HISTORY_STEPS = 32
"""Measured steps (and step times) kept per rank for the straggler monitor's two windows."""
GPU_BUSY_WINDOW = 30
"""GPU utilisation samples kept per rank (about one a second)."""
MIN_GPU_READINGS = 3
"""NVML readings taken while a rank stepped that a verdict from its GPU's utilisation needs."""
NVML_PERIOD_SECONDS = 1.0
"""NVML's utilisation is the share of its last sample period (1/6 s to 1 s) in which a kernel
ran: a reading taken sooner than this after the first step also covers the time before it."""


@dataclass
class MeasuredStep:
    """One timed step of one rank."""

    step: int
    clock: str | None
    phases: list[float | None]
    compute_time: float | None
    cpu_wait: float | None = None
    """Seconds the training thread waited for a CPU outside its waits (Linux run queue)."""
    elapsed: float = 0.0
    """The rank's step times added up to this step: how long its steps ran so far."""


class TimedStep(NamedTuple):
    """One step's time, with the rank's step times added up to it."""

    step: int
    step_time: float
    elapsed: float


@dataclass
class RankSteps:
    """One rank's windows and whole-run totals (module docstring)."""

    step_times: deque[float] = field(default_factory=lambda: deque(maxlen=WINDOW_STEPS))
    measured: deque[MeasuredStep] = field(default_factory=lambda: deque(maxlen=WINDOW_STEPS))
    history: deque[MeasuredStep] = field(default_factory=lambda: deque(maxlen=HISTORY_STEPS))
    """The last ``HISTORY_STEPS`` measured steps (the straggler monitor's two windows)."""
    step_history: deque[TimedStep] = field(default_factory=lambda: deque(maxlen=HISTORY_STEPS))
    elapsed: float = 0.0
    """Its step times added up."""
    first_step: int | None = None
    last_step: int | None = None
    clock: str | None = None
    phase_totals: list[float | None] = field(default_factory=lambda: [None] * len(protocol.PHASES))
    measured_steps: int = 0
    gpu_busy: deque[float] = field(default_factory=lambda: deque(maxlen=GPU_BUSY_WINDOW))
    gpu_busy_total: float = 0.0
    gpu_busy_samples: int = 0
    first_step_at: float | None = None
    """When the rank's first step reached the hub (``time.time()``)."""
    gpu_read_at: float | None = None
    """When the last reading counted was taken: each NVML reading counts once."""

    @property
    def step_count(self) -> int:
        """Steps from its first to its last (0 before a step)."""
        if self.first_step is None or self.last_step is None:
            return 0
        return self.last_step - self.first_step + 1

    def window_shares(self) -> dict[str, float | None] | None:
        return protocol.phase_shares(step.phases for step in self.measured)

    def run_shares(self) -> dict[str, float | None] | None:
        return protocol.phase_shares([self.phase_totals]) if self.measured_steps else None

    def recent_gpu_busy(self) -> float | None:
        """The median of the recent GPU utilisation samples, 0..1; None when fewer than
        ``MIN_GPU_READINGS`` were taken while the rank stepped."""
        if len(self.gpu_busy) < MIN_GPU_READINGS:
            return None
        return statistics.median_high(self.gpu_busy) / 100.0

    def run_gpu_busy(self) -> float | None:
        if self.gpu_busy_samples < MIN_GPU_READINGS:
            return None
        return self.gpu_busy_total / self.gpu_busy_samples / 100.0


_SERIES = frozenset({protocol.STEP_TIME, protocol.PHASE_CLOCK, protocol.COMPUTE_TIME, protocol.CPU_WAIT,
                     *protocol.PHASE_METRICS})


class StepWindows(HubObserver):
    """Collects every rank's measured steps from the workers' metrics (module docstring)."""

    def __init__(self) -> None:
        self.ranks: dict[int, RankSteps] = {}
        self.changed = False
        """A step came since the last ``take_changed``."""

    def rank(self, rank: int) -> RankSteps:
        steps = self.ranks.get(rank)
        if steps is None:
            steps = self.ranks[rank] = RankSteps()
        return steps

    def take_changed(self) -> bool:
        changed, self.changed = self.changed, False
        return changed

    def on_message(self, message: Message) -> None:
        if not isinstance(message, Metrics):
            return
        by_step: dict[int, dict[str, float | None]] = {}
        for _rank, _t, step, name, value, source in message.records:
            if source == protocol.SOURCE_AUTO and name in _SERIES and step is not None:
                by_step.setdefault(step, {})[name] = value
        if by_step:
            self.add_steps(message.rank, by_step)

    def add_steps(self, rank: int, by_step: dict[int, dict[str, float | None]]) -> None:
        """``step -> {metric name: value}`` of one rank's new steps."""
        steps = self.rank(rank)
        for step in sorted(by_step):
            values = by_step[step]
            step_time = values.get(protocol.STEP_TIME)
            if step_time is not None:
                steps.step_times.append(step_time)
                steps.elapsed += step_time
                steps.step_history.append(TimedStep(step, step_time, steps.elapsed))
            steps.last_step = step if steps.last_step is None else max(steps.last_step, step)
            if steps.first_step is None:
                steps.first_step_at = time.time()
            steps.first_step = step if steps.first_step is None else min(steps.first_step, step)
            clock = protocol.clock_name(values.get(protocol.PHASE_CLOCK))
            if clock is None:
                continue
            phases = [values.get(name) for name in protocol.PHASE_METRICS]
            steps.clock = clock
            measured = MeasuredStep(step, clock, phases, values.get(protocol.COMPUTE_TIME), values.get(protocol.CPU_WAIT),
                                    steps.elapsed)
            steps.measured.append(measured)
            steps.history.append(measured)
            steps.measured_steps += 1
            totals = steps.phase_totals
            for index, value in enumerate(phases):
                if value is not None:
                    totals[index] = value if totals[index] is None else totals[index] + value  # type: ignore[operator]
        self.changed = True

    def sample_gpu_busy(self, rank: int, utilization: float | None, read_at: float | None) -> None:
        """NVML's reading of the rank's GPU (percent), taken at ``read_at`` while the rank steps: kept
        once, and only when its period began after the rank's first step reached the hub."""
        if utilization is None or read_at is None:
            return
        steps = self.rank(rank)
        if steps.first_step_at is None or read_at - NVML_PERIOD_SECONDS < steps.first_step_at:
            return
        if steps.gpu_read_at is not None and read_at <= steps.gpu_read_at:
            return
        steps.gpu_read_at = read_at
        steps.gpu_busy.append(utilization)
        steps.gpu_busy_total += utilization
        steps.gpu_busy_samples += 1
