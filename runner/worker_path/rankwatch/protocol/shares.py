"""The data-wait share and the phase shares of a step: computed here, once, for every surface."""

from __future__ import annotations

from rankwatch.protocol.records import (
    DATA_WAIT,
    PHASE_METRICS,
    PHASES,
    SOURCE_AUTO,
    STEP_TIME,
    MetricRow,
    data_wait_share,
)

TYPE_CHECKING = False  # `typing` costs ~3 ms to import and workers import this module
if TYPE_CHECKING:
    from collections.abc import Iterable
    from typing import Any

PHASE_INDEX = {name: index for index, name in enumerate(PHASE_METRICS)}


def phases_by_step(records: Iterable[MetricRow]) -> dict[int, list[float | None]]:
    """The measured phases of each step among ``records`` (``PHASES`` order, None where not
    measured): the zero-code instrumentation's, as ``step_row_records`` made them."""
    steps: dict[int, list[float | None]] = {}
    index_of = PHASE_INDEX
    for _rank, _t, step, name, value, source in records:
        index = index_of.get(name)
        if index is None or step is None or source != SOURCE_AUTO:
            continue
        phases = steps.get(step)
        if phases is None:
            phases = steps[step] = [None] * len(PHASES)
        phases[index] = value
    return steps


class PhaseWindow:
    """A rank's last ``limit`` measured steps' phases: where its steps go, as shares of their span.

    The share of a phase is its seconds over the window's span (the sum of every phase), so the
    shares add up to 1; a phase measured in none of the window's steps has no share (None). One
    definition for the hub's rank rows and the GUI (``phase_shares`` over the same steps).

    The hub asks for the shares after every step of every rank: the window keeps running
    totals (a step in, the oldest out) instead of summing its steps again each time, which was
    38 us a call at 512 ranks. The totals are summed afresh every ``limit`` steps, so rounding
    never builds up.
    """

    __slots__ = ("_steps", "_limit", "_totals", "_counts", "_since_sum")

    def __init__(self, limit: int = 20) -> None:
        self._steps: list[list[float | None]] = []
        self._limit = limit
        self._totals = [0.0] * len(PHASES)
        self._counts = [0] * len(PHASES)
        self._since_sum = 0

    def add(self, phases: list[float | None]) -> None:
        self._steps.append(phases)
        self._count(phases, 1)
        if len(self._steps) > self._limit:
            self._count(self._steps.pop(0), -1)
            self._since_sum += 1
            if self._since_sum >= self._limit:
                self._sum_afresh()

    def shares(self) -> dict[str, float | None] | None:
        """Phase name (``PHASES``) -> share (0..1) of the window's span; None before a measured step."""
        counts, totals = self._counts, self._totals
        if not any(counts):
            return None
        span = sum(total for total, count in zip(totals, counts, strict=True) if count)
        return {phase: (None if not count else (total / span if span > 0 else 0.0))
                for phase, total, count in zip(PHASES, totals, counts, strict=True)}

    def _count(self, phases: list[float | None], sign: int) -> None:
        totals, counts = self._totals, self._counts
        for index, value in enumerate(phases[:len(totals)]):
            if value is not None and value - value == 0:  # finite: gaps count as not measured
                totals[index] += sign * value
                counts[index] += sign

    def _sum_afresh(self) -> None:
        self._totals = [0.0] * len(PHASES)
        self._counts = [0] * len(PHASES)
        self._since_sum = 0
        for phases in self._steps:
            self._count(phases, 1)


def phase_shares(steps: Iterable[list[float | None]]) -> dict[str, float | None] | None:
    """Phase name (``PHASES``) -> its share of the steps' span (the sum of every phase); None when
    no step was measured. Non-finite values (gaps) count as not measured."""
    totals: list[float | None] = [None] * len(PHASES)
    for phases in steps:
        for index, value in enumerate(phases):
            if value is not None and value - value == 0:
                total = totals[index]
                totals[index] = value if total is None else total + value
    span = sum(total for total in totals if total is not None)
    if all(total is None for total in totals):
        return None
    return {phase: (None if total is None else (total / span if span > 0 else 0.0))
            for phase, total in zip(PHASES, totals, strict=False)}


class StepPairs:
    """Pairs each step's ``step_time`` and one other record of one rank into its share of the step.

    ``part`` is ``DATA_WAIT`` (the data-wait share) or ``COMM_WAIT`` (the share in
    collectives). The worker sends both for every step (usually in the same
    message); whichever comes second completes the pair. At most ``limit``
    incomplete steps are kept.
    """

    __slots__ = ("_pending", "_limit", "_part")

    def __init__(self, limit: int = 256, part: str = DATA_WAIT) -> None:
        self._pending: dict[int, list[Any]] = {}
        self._limit = limit
        self._part = part

    def add(self, step: int | None, t: float, name: str, value: float | None) -> tuple[int, float, float | None] | None:
        """Feed one record; returns ``(step, t, share)`` when it completes a pair."""
        if step is None or (name != STEP_TIME and name != self._part):
            return None
        pair = self._pending.get(step)
        if pair is None:
            pair = self._pending[step] = [None, None, t, 0]
        pair[0 if name == STEP_TIME else 1] = value
        pair[2] = max(pair[2], t)
        pair[3] |= 1 << (0 if name == STEP_TIME else 1)
        if pair[3] == 3:
            del self._pending[step]
            return step, pair[2], data_wait_share(pair[0], pair[1])
        if len(self._pending) > self._limit:
            self._pending.pop(next(iter(self._pending)))
        return None
