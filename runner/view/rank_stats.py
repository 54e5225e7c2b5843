"""Per-rank statistics of a stored run, for `rankwatch runs show` (text and ``--json``).

Everything is computed from the store's records, the record of truth, never from the
live model: a value that was not measured is ``None`` (shown "–"), not 0.

* ``steps``: optimizer steps the bootstrap counted (its step numbers start at 0, so
  the newest measured step + 1); ``None`` without zero-code instrumentation.
* ``last_step``: the newest step number of any record (``rankwatch.log`` keeps the
  script's own numbering).
* ``last_loss``: the newest loss, from the most deliberate source the rank reported
  it from (the rule the live table uses: measured, then ``rankwatch.log``, then parsed).
* ``median_step_time``: seconds, the median over every measured step.
* ``data_wait_share``: the share of step time spent waiting for the DataLoader, over
  the steps that measured both (total wait / total step time).
* ``samples_per_s``: total samples / total step time over the steps that counted samples.
* ``first_seen``, ``last_seen``: the hub's times for the rank (``None`` when unknown).
* ``dropped``: records the rank's reporter dropped, when the store keeps that count.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass
from typing import Any

from rankwatch import _protocol as protocol

BUILT_IN_METRICS = frozenset({protocol.LOSS, protocol.STEP_TIME, protocol.DATA_WAIT, protocol.SAMPLES_PER_SECOND,
                              protocol.STEPS_PER_SECOND})
"""What the bootstrap measures without code changes; every other key was logged by the script
(``rankwatch.log``) or read from its output (``--parse-stdout``)."""

LOSS_SOURCE_ORDER = {protocol.SOURCE_AUTO: 0, protocol.SOURCE_LOG: 1, protocol.SOURCE_PARSED: 2}


@dataclass
class RankStats:
    rank: int
    state: str | None = None
    host: str | None = None
    pid: int | None = None
    exit_code: int | None = None
    steps: int | None = None
    last_step: int | None = None
    last_loss: float | None = None
    loss_source: str | None = None
    median_step_time: float | None = None
    data_wait_share: float | None = None
    samples_per_s: float | None = None
    first_seen: float | None = None
    last_seen: float | None = None
    dropped: int | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class LoggedKey:
    """A metric key the script logged: its sources and each rank's newest value."""

    name: str
    sources: tuple[str, ...]
    last_by_rank: dict[int, float | None]

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "sources": list(self.sources),
                "last_by_rank": {str(rank): value for rank, value in sorted(self.last_by_rank.items())}}


def custom_metric_names(names: list[str]) -> list[str]:
    """The keys a script logged, in the order given (built-in metrics left out)."""
    return [name for name in names if name not in BUILT_IN_METRICS]


class _Accumulator:
    """One pass over a run's metric rows (in the order they were stored)."""

    def __init__(self) -> None:
        self.steps: dict[int, int] = {}
        self.last_step: dict[int, int] = {}
        self.loss: dict[int, tuple[int, float, float, str]] = {}
        self.timing: dict[int, dict[str, dict[int, float]]] = {}
        self.logged: dict[str, dict[int, tuple[float, float | None]]] = {}
        self.logged_sources: dict[str, set[str]] = {}

    def add(self, rank: int, step: int | None, t: float, name: str, value: float | None, source: str) -> None:
        if step is not None:
            if step > self.last_step.get(rank, -1):
                self.last_step[rank] = step
            if source == protocol.SOURCE_AUTO and step + 1 > self.steps.get(rank, 0):
                self.steps[rank] = step + 1
        if name not in BUILT_IN_METRICS:
            self.logged_sources.setdefault(name, set()).add(source)
            newest = self.logged.setdefault(name, {})
            if rank not in newest or t >= newest[rank][0]:
                newest[rank] = (t, value)
        elif name == protocol.LOSS:
            if value is not None:
                order = LOSS_SOURCE_ORDER.get(source, 9)
                current = self.loss.get(rank)
                if current is None or order < current[0] or (order == current[0] and t >= current[1]):
                    self.loss[rank] = (order, t, value, source)
        elif source == protocol.SOURCE_AUTO and step is not None and value is not None:
            self.timing.setdefault(rank, {}).setdefault(name, {})[step] = value

    def fill(self, stats: RankStats) -> None:
        rank = stats.rank
        stats.steps = self.steps.get(rank)
        stats.last_step = self.last_step.get(rank)
        if rank in self.loss:
            _order, _t, stats.last_loss, stats.loss_source = self.loss[rank]
        series = self.timing.get(rank, {})
        step_times = series.get(protocol.STEP_TIME, {})
        if step_times:
            stats.median_step_time = statistics.median(step_times.values())
        stats.data_wait_share = _share_of_step_time(series.get(protocol.DATA_WAIT, {}), step_times)
        rates = series.get(protocol.SAMPLES_PER_SECOND, {})
        counted = [step for step in rates if step in step_times]
        counted_time = sum(step_times[step] for step in counted)
        if counted and counted_time > 0:
            stats.samples_per_s = sum(rates[step] * step_times[step] for step in counted) / counted_time

    def logged_keys(self, names: list[str]) -> list[LoggedKey]:
        return [LoggedKey(name, tuple(sorted(self.logged_sources.get(name, ()))),
                          {rank: value for rank, (_t, value) in sorted(self.logged.get(name, {}).items())})
                for name in custom_metric_names(names)]


def _share_of_step_time(waits: dict[int, float], step_times: dict[int, float]) -> float | None:
    both = [step for step in waits if step in step_times]
    total_time = sum(step_times[step] for step in both)
    if not both or total_time <= 0:
        return None
    return min(1.0, sum(waits[step] for step in both) / total_time)


def run_statistics(store, run_id: int) -> tuple[list[RankStats], list[LoggedKey]]:
    """Per-rank statistics and the keys the script logged, in one pass over the run's records.

    Every rank the store knows is listed, from the ranks table or from its records.

    Raises:
        runner.store.store.RunNotFound: no such run (from the store).
    """
    stats: dict[int, RankStats] = {}
    for row in store.ranks(run_id):
        stats[row["rank"]] = RankStats(
            rank=row["rank"], state=row.get("state"), host=row.get("host"), pid=row.get("pid"),
            exit_code=row.get("exit_code"), first_seen=row.get("first_seen"), last_seen=row.get("last_seen"),
            dropped=row.get("dropped"))
    accumulator = _Accumulator()
    for chunk in store.iter_metrics(run_id):
        for row in chunk:
            accumulator.add(*row)
    for rank in set(accumulator.last_step) | set(accumulator.loss) | set(accumulator.timing):
        stats.setdefault(rank, RankStats(rank=rank))
    ordered = [stats[rank] for rank in sorted(stats)]
    for entry in ordered:
        accumulator.fill(entry)
    return ordered, accumulator.logged_keys(store.metric_names(run_id))
