"""A run's statistics tallied as its records arrive, so that an ended run's are ready at once.

`rank_stats.computed_run_statistics` and `run_figures.computed_run_figures` read a run's records
back from the store: 65 s and about 100 s for a 1,024-rank run of ten minutes (16 to 22 million
records), while the runner waits to exit and ``runs show`` of the live run waits too. Every
record passes the hub once on its way to the store, and what those statistics hold are sums,
counts, extremes and newest values, so the hub feeds each record here (``add``, constant work
per record) and the statistics of the run so far are read off in a few milliseconds.

The definitions are those of ``rank_stats`` and ``run_figures`` (their docstrings), over the
records the hub took (ingest's validation passed). Where a tally cannot be exact in bounded
memory, it says how it differs:

* ``median_step_time``: exact over a rank's first ``EXACT_STEP_TIMES`` step times; after that
  the median of a histogram whose bins are ``STEP_TIME_BIN`` (0.1 %) wide, the middle bin's centre
  (within 0.05 % of the exact median; the store's own median is no better once the pyramid has
  replaced old records by 10 s means).
* Shares and throughput pair a step's records by step number, as the store's computation does;
  a step's records that wait for their pair more than ``PAIR_WINDOW`` newer steps are left out
  (the bootstrap sends them in one message). A step number a rank repeats (a restarted rank)
  counts each time, where the store's computation keeps the newest.
* The runs list's loss means take each rank's losses from its most deliberate source, as
  ``run_figures`` does. A rank whose better source comes after it logged more than
  ``LOSS_DETAIL`` losses from another leaves them to the store's computation (``run_known``).
* Those loss means are kept per step for the newest ``LOSS_STEPS_KEPT`` steps while every rank
  reports from one source; older steps are folded into the best mean and the newest, so a run of
  days holds ~1 MB, not ~50. A rank more than that many steps behind the others, or a better
  source arriving for a folded step, leaves those figures to the store's computation.
* Newest values are the ones with the latest time; on equal times the first that arrived, as
  SQLite's ``MAX(t)`` picks the first row in the index.
"""

from __future__ import annotations

import math
import statistics
from array import array
from dataclasses import dataclass

from rankwatch import protocol
from rankwatch.protocol import MetricRow
from runner.store.rank_stats import (
    BUILT_IN_METRICS,
    LOSS_SOURCE_ORDER,
    LoggedKey,
    RecordFigures,
    TalliedStatistics,
)
from runner.store.run_figures import RunFigures

EXACT_STEP_TIMES = 4096
"""Step times per rank kept as they are (8 bytes each); beyond them, the histogram."""
STEP_TIME_BIN = 0.001
"""The histogram's relative bin width: bin ``i`` holds values in [(1+w)^i, (1+w)^(i+1))."""
PAIR_WINDOW = 16
"""Steps of a rank waiting for the rest of their records at most. A step's records come in one
message, or the next; most steps never complete all four (a script without samples, runs
without the old ``comm_wait``), so this bounds what every rank holds: 256 held 65 MB at 1,024
ranks."""
LOSS_DETAIL = 1024
"""Logged or parsed losses of a rank kept, in case a better source of its loss comes later."""
LOSS_STEPS_KEPT = 10_000
"""Steps whose loss mean across ranks is kept open; older ones are folded into the best and the
newest mean so far (``RunTally._seal_oldest``), ``LOSS_SEAL_BATCH`` at a time."""
LOSS_SEAL_BATCH = 1_000

_LOG_BIN = math.log1p(STEP_TIME_BIN)
_STEP_TIME, _DATA_WAIT, _COMM_WAIT, _SAMPLES = (protocol.STEP_TIME, protocol.DATA_WAIT, protocol.COMM_WAIT,
                                                protocol.SAMPLES_PER_SECOND)
_PAIRED = {_DATA_WAIT: 1, _COMM_WAIT: 2, _SAMPLES: 3}
"""The records paired with a step's step time, and their slot in a pending step."""
_MEASURED_STEP_NAMES = frozenset({_STEP_TIME, _DATA_WAIT, protocol.LOSS})
"""The measured records whose step numbers count the rank's optimizer steps (``RankStats.steps``)."""
_AUTO = protocol.SOURCE_AUTO


class StepTimes:
    """A rank's step times, for their median: exact while few, a histogram after."""

    __slots__ = ("exact", "bins", "non_positive")

    def __init__(self) -> None:
        self.exact: array[float] | None = array("d")
        self.bins: dict[int, int] = {}
        self.non_positive: list[float] = []
        """Zero or negative step times (a clock that went back): kept as they are."""

    def add(self, value: float) -> None:
        if self.exact is not None:
            self.exact.append(value)
            if len(self.exact) > EXACT_STEP_TIMES:
                values, self.exact = self.exact, None
                for kept in values:
                    self._bin(kept)
            return
        self._bin(value)

    def _bin(self, value: float) -> None:
        if value > 0 and value != math.inf:
            index = math.floor(math.log(value) / _LOG_BIN)
            self.bins[index] = self.bins.get(index, 0) + 1
        else:
            self.non_positive.append(value)

    def median(self) -> float | None:
        if self.exact is not None:
            return statistics.median(self.exact) if self.exact else None
        count = sum(self.bins.values()) + len(self.non_positive)
        if count == 0:
            return None
        middle = (count - 1) // 2, count // 2  # the middle value, or the two middle ones
        return sum(self._nth(position) for position in set(middle)) / len(set(middle))

    def _nth(self, position: int) -> float:
        low = sorted(self.non_positive)
        if position < len(low):
            return low[position]
        position -= len(low)
        for index in sorted(self.bins):
            if position < self.bins[index]:
                return math.exp((index + 0.5) * _LOG_BIN)
            position -= self.bins[index]
        raise IndexError(position)


class RankTally:
    """What one rank's records add up to (see the module docstring)."""

    __slots__ = ("max_step", "max_measured_step", "max_timed_step", "losses", "step_times", "pending", "paired", "phases",
                 "clock_count", "clock", "skipped", "allocated", "reserved", "peak", "loss_detail")

    def __init__(self) -> None:
        self.max_step: int | None = None
        self.max_measured_step: int | None = None
        self.max_timed_step: int | None = None
        """The newest step with a measured step time (``RunFigures.steps``)."""
        self.losses: dict[str, tuple[float, float]] = {}
        """source -> (t, value) of the newest loss from it."""
        self.step_times = StepTimes()
        self.pending: dict[int, list[float | None]] = {}
        """step -> [step time, data wait, comm wait, samples/s] while its pair is incomplete."""
        self.paired = [0.0] * 6
        """Data wait and its steps' time, comm wait and its steps' time, samples and their time."""
        self.phases: list[float | None] = [None] * len(protocol.PHASES)
        self.clock_count = 0
        self.clock: tuple[float, float | None] | None = None
        self.skipped = 0
        self.allocated: tuple[float, float] | None = None
        self.reserved: tuple[float, float] | None = None
        self.peak: float | None = None
        self.loss_detail: dict[int, tuple[list[int], list[float]]] | None = {}
        """level -> the steps and values of this rank's logged or parsed losses that are in the
        run's per-step means: taken out again when a better source of the rank comes later. None
        once more than ``LOSS_DETAIL`` (the means then come from the store)."""

    def pair(self, step: int, slot: int, value: float) -> None:
        """A step's step time (slot 0) or one of the records shared over it; a complete pair adds up."""
        pending = self.pending.get(step)
        if pending is None:
            pending = self.pending[step] = [None, None, None, None]
            if len(self.pending) > PAIR_WINDOW:
                del self.pending[next(iter(self.pending))]
        if pending[slot] is not None:
            return
        pending[slot] = value
        step_time = pending[0]
        if step_time is None:
            return
        for other in ((1, 2, 3) if slot == 0 else (slot,)):
            part = pending[other]
            if part is None:
                continue
            if other == 3:
                self.paired[4] += part * step_time
            else:
                self.paired[2 * other - 2] += part
            self.paired[2 * other - 1] += step_time
        if None not in pending:
            del self.pending[step]

    def figures(self) -> RecordFigures:
        data_wait, data_time, comm_wait, comm_time, samples, samples_time = self.paired
        shares = protocol.phase_shares([self.phases])
        loss = min(self.losses.items(), key=lambda item: LOSS_SOURCE_ORDER.get(item[0], 9), default=None)
        return RecordFigures(
            steps=None if self.max_measured_step is None else self.max_measured_step + 1,
            last_step=self.max_step,
            last_loss=None if loss is None else loss[1][1], loss_source=None if loss is None else loss[0],
            median_step_time=self.step_times.median(),
            data_wait_share=min(1.0, data_wait / data_time) if data_time > 0 else None,
            comm_wait_share=min(1.0, comm_wait / comm_time) if comm_time > 0 else None,
            samples_per_s=samples / samples_time if samples_time > 0 else None,
            phase_shares=shares, measured_steps=self.clock_count if shares is not None else None,
            phase_clock=protocol.clock_name(self.clock[1]) if shares is not None and self.clock else None,
            skipped_steps=self.skipped,
            gpu_mem_allocated=None if self.allocated is None else int(self.allocated[1]),
            gpu_mem_reserved=None if self.reserved is None else int(self.reserved[1]),
            gpu_mem_peak=None if self.peak is None else int(self.peak))

    @property
    def has_figures(self) -> bool:
        """Whether the store's computation would list the rank from its records alone."""
        return self.max_step is not None or bool(self.losses)


@dataclass
class _LoggedTally:
    sources: set[str]
    newest: dict[int, tuple[float, float | None]]


class RunTally:
    """The statistics of one run's records so far; ``add`` each batch of one rank as it is taken."""

    def __init__(self) -> None:
        self.ranks: dict[int, RankTally] = {}
        self._logged: dict[str, _LoggedTally] = {}
        self._loss_steps: dict[int, dict[int, list[float]]] = {}
        """level -> step -> [sum, count] of every rank's losses with a step (``run_figures``' means)."""
        self._loss_levels: dict[int, set[int]] = {}
        """rank -> the loss source levels it reported with a step."""
        self._sealed: tuple[float, int, float] | None = None
        """(best mean, newest step, its mean) of the steps folded out of ``_loss_steps``."""
        self._unsealed_late = False
        """A loss came for a step at or before the newest folded one (a rank far behind, or step
        numbers that start again): the means are left to the store."""
        self.records = 0
        self.failed: str | None = None
        """Why a record could not be added (a bug: the statistics are then computed from the store)."""

    def add(self, rank: int, records: list[MetricRow]) -> None:
        """Records of ``rank`` (each ``(rank, t, step, name, value, source)``), in arrival order.
        Never raises: ingest goes on whatever a record holds."""
        if self.failed is not None:
            return
        try:
            self._add(rank, records)
        except Exception as error:  # a tally must never stop ingest
            self.failed = f"{type(error).__name__}: {error}"

    def _add(self, rank: int, records: list[MetricRow]) -> None:
        tally = self.ranks.get(rank)
        if tally is None:
            tally = self.ranks[rank] = RankTally()
        self.records += len(records)
        phase_index = protocol.PHASE_INDEX
        for _rank, t, step, name, value, source in records:
            if step is not None and (tally.max_step is None or step > tally.max_step):
                tally.max_step = step
            index = phase_index.get(name)
            if index is not None:
                if source == _AUTO and value is not None:
                    phases = tally.phases
                    total = phases[index]
                    phases[index] = value if total is None else total + value
                continue
            if name in _MEASURED_STEP_NAMES and source == _AUTO and step is not None and (
                    tally.max_measured_step is None or step > tally.max_measured_step):
                tally.max_measured_step = step
            if name == _STEP_TIME:
                if source == _AUTO and step is not None:
                    if tally.max_timed_step is None or step > tally.max_timed_step:
                        tally.max_timed_step = step
                    if value is not None:
                        tally.step_times.add(value)
                        tally.pair(step, 0, value)
            elif name in _PAIRED:
                if source == _AUTO and value is not None and step is not None:
                    tally.pair(step, _PAIRED[name], value)
            elif name == protocol.LOSS:
                if value is not None:
                    self._add_loss(rank, tally, t, step, value, source)
            elif name == protocol.PHASE_CLOCK:
                if source == _AUTO:
                    tally.clock_count += 1
                    if tally.clock is None or t > tally.clock[0]:
                        tally.clock = (t, value)
            elif name == protocol.SKIPPED_STEP:
                if source == _AUTO:
                    tally.skipped += 1
            elif name == protocol.GPU_MEMORY_ALLOCATED or name == protocol.GPU_MEMORY_RESERVED:
                if source == _AUTO and value is not None:
                    slot = "allocated" if name == protocol.GPU_MEMORY_ALLOCATED else "reserved"
                    newest = getattr(tally, slot)
                    if newest is None or t > newest[0]:
                        setattr(tally, slot, (t, value))
            elif name == protocol.GPU_MEMORY_PEAK:
                if source == _AUTO and value is not None and (tally.peak is None or value > tally.peak):
                    tally.peak = value
            elif name not in BUILT_IN_METRICS:
                logged = self._logged.get(name)
                if logged is None:
                    logged = self._logged[name] = _LoggedTally(set(), {})
                logged.sources.add(source)
                newest_logged = logged.newest.get(rank)
                if newest_logged is None or t > newest_logged[0]:
                    logged.newest[rank] = (t, value)

    def _add_loss(self, rank: int, tally: RankTally, t: float, step: int | None, value: float, source: str) -> None:
        newest = tally.losses.get(source)
        if newest is None or t > newest[0]:
            tally.losses[source] = (t, value)
        if step is None:
            return
        level = LOSS_SOURCE_ORDER.get(source, 9)
        levels = self._loss_levels.setdefault(rank, set())
        if levels and level > min(levels):
            levels.add(level)
            return  # the rank already reports a better source: not in the means
        levels.add(level)
        by_step = self._loss_steps.setdefault(level, {})
        total = by_step.get(step)
        if total is None:
            by_step[step] = [value, 1.0]
            if self._sealed is not None and step <= self._sealed[1]:
                self._unsealed_late = True  # a step at or before the folded ones: not whole in either
            if len(by_step) > LOSS_STEPS_KEPT + LOSS_SEAL_BATCH and len(self._loss_steps) == 1:
                self._seal_oldest(by_step)
        else:
            total[0] += value
            total[1] += 1
        if level and tally.loss_detail is not None:  # a better source may come: then these go out again
            steps, values = tally.loss_detail.setdefault(level, ([], []))
            steps.append(step)
            values.append(value)
            if len(steps) > LOSS_DETAIL:
                tally.loss_detail = None

    def _seal_oldest(self, by_step: dict[int, list[float]]) -> None:
        """Fold the ``LOSS_SEAL_BATCH`` steps entered first into ``_sealed`` (one source: each step's
        mean is its sum over its count)."""
        best, newest, newest_mean = self._sealed if self._sealed is not None else (math.inf, None, math.nan)
        for _ in range(LOSS_SEAL_BATCH):
            step, (total, count) = next(iter(by_step.items()))
            del by_step[step]
            mean = total / count
            best = min(best, mean)
            if newest is None or step > newest:
                newest, newest_mean = step, mean
        assert newest is not None
        self._sealed = (best, newest, newest_mean)

    # ---- reading ----------------------------------------------------------------------------

    def figures(self) -> dict[int, RecordFigures]:
        """rank -> the figures of its records, for every rank the store's computation would list."""
        return {rank: tally.figures() for rank, tally in sorted(self.ranks.items()) if tally.has_figures}

    def logged_keys(self) -> list[LoggedKey]:
        return [LoggedKey(name, tuple(sorted(logged.sources)),
                          {rank: value for rank, (_t, value) in sorted(logged.newest.items())})
                for name, logged in sorted(self._logged.items())]

    def statistics(self) -> TalliedStatistics:
        """The statistics of the records so far (a few milliseconds at 1,024 ranks)."""
        run, known = self.run_figures()
        return TalliedStatistics(self.figures(), self.logged_keys(), run, known)

    def run_figures(self) -> tuple[RunFigures | None, bool]:
        """The run's headline figures (``run_figures``; None when its records hold none), and
        whether the tally can tell them (see ``LOSS_DETAIL``)."""
        measured = [tally.max_timed_step for tally in self.ranks.values() if tally.max_timed_step is not None]
        means = self._loss_means()
        if means is None:
            return None, False
        throughputs = [tally.paired[4] / tally.paired[5] for tally in self.ranks.values() if tally.paired[5] > 0]
        if not measured and not means and not throughputs and self._sealed is None:
            return None, True
        lowest: float | None = min(means.values(), default=None)
        newest_step: int | None = max(means, default=None)
        final = means[newest_step] if newest_step is not None else None
        if self._sealed is not None:
            if self._unsealed_late:
                return None, False
            best, newest, newest_mean = self._sealed
            lowest = best if lowest is None else min(best, lowest)
            if newest_step is None or newest > newest_step:
                newest_step, final = newest, newest_mean
        last = max(measured) if measured else newest_step
        return RunFigures(final_loss=final, best_loss=lowest,
                          steps=None if last is None else int(last) + 1,
                          samples_per_s=sum(throughputs) if throughputs else None), True

    def _loss_means(self) -> dict[int, float] | None:
        """step -> the mean over ranks of each rank's loss from its most deliberate source; None
        when a rank's better source came after more than ``LOSS_DETAIL`` of its other losses."""
        sums: dict[int, list[float]] = {}
        for by_step in self._loss_steps.values():
            for step, (total, count) in by_step.items():
                into = sums.setdefault(step, [0.0, 0.0])
                into[0] += total
                into[1] += count
        for rank, levels in self._loss_levels.items():
            chosen = min(levels)
            detail = self.ranks[rank].loss_detail
            for level in levels - {chosen}:
                if detail is None:
                    return None
                steps, values = detail.get(level, ((), ()))
                for step, value in zip(steps, values, strict=True):
                    found = sums.get(step)
                    if found is None:  # folded away (``_seal_oldest``): the store can tell
                        return None
                    into = found
                    into[0] -= value
                    into[1] -= 1
        return {step: total / count for step, (total, count) in sums.items() if count > 0}
