"""Per-rank statistics of a stored run: `rankwatch runs show` (text and ``--json``) and the end of `rankwatch run`.

Everything is computed from the store's records, the record of truth, never from the
live model: a value that was not measured is ``None`` (shown "–"), not 0. A read of the store
(SQL on its connection, the store's export writes it as ``rank_summary.csv``), so it lives in
``runner.store``: the only part of the runner that speaks SQL. Once a run has ended its runner
keeps the result (:func:`keep_run_statistics`, the ``run_statistics`` table): nothing is added
to a run after that, and reading one row stays fast at any size, where computing it reads
every record.

* ``steps``: optimizer steps the bootstrap counted (its step numbers start at 0, so
  the newest measured step + 1); ``None`` without zero-code instrumentation.
* ``last_step``: the newest step number of any record (``rankwatch.log`` keeps the
  script's own numbering).
* ``last_loss``: the newest loss, from the most deliberate source the rank reported
  it from (the rule the live table uses: measured, then ``rankwatch.log``, then parsed).
* ``median_step_time``: seconds, the median over every measured step.
* ``data_wait_share``: the share of step time spent waiting for the DataLoader, over
  the steps that measured both (total wait / total step time).
* ``comm_wait_share``: the share of the measured steps' span in exposed communication (the
  ``comm`` phase; None without a process group); for runs stored before the phases, the old
  ``comm_wait`` over the step time.
* ``phase_clock``, ``phase_shares``, ``measured_steps``: where the steps went, on the steps' own
  clock (``gpu`` or ``cpu``): each phase's share of the timed steps' span (``protocol.PHASES``;
  None for a phase that never happened), over every timed step of the rank.
* ``skipped_steps``: steps ``GradScaler`` skipped (counted in ``steps``).
* ``samples_per_s``: total samples / total step time over the steps that counted samples.
* ``first_seen``, ``last_seen``: the hub's times for the rank (``None`` when unknown); without a
  stored ``first_seen``, the time of the rank's hello (its ``rank_started`` event).
* ``dropped``: records the rank's reporter dropped, when the store keeps that count.
* ``gpu_index``: the GPU the rank's process was seen on (NVML's numbering, as ``nvidia-smi``'s;
  ranks on this machine only: other nodes' GPUs are not sampled).
* ``gpu_util``: percent, the median of that GPU's utilisation samples (NVML: the whole GPU, every
  process on it) from the rank's first measured step to its last; without measured steps, while
  the rank was seen (``first_seen`` .. ``last_seen``). None when no sample fell in that time.
* ``gpu_mem_used_peak``: bytes, the most NVML saw the rank's process hold on its GPU at a sample
  (its CUDA context and the allocator's cache included, as ``nvidia-smi`` shows it).
* ``gpu_mem_total``: bytes, that GPU's memory (NVML).
* ``gpu_mem_allocated``, ``gpu_mem_reserved``: bytes, torch's caching allocator at the rank's newest
  reading (about one a second, at a step's end): what its tensors held, and what the allocator
  held from the driver (allocated plus its cache).
* ``gpu_mem_peak``: bytes, the most the rank's tensors held at once (the largest of the
  allocator's peak readings).
"""

from __future__ import annotations

import json
import sqlite3
import statistics
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, TypedDict

from rankwatch import protocol
from runner.store.kept_json import (
    kept_float,
    kept_int,
    kept_list,
    kept_object,
    kept_shares,
    kept_text,
    loaded_json,
)
from runner.store.liveness import runner_alive
from runner.store.run_figures import (
    KEPT_VERSION,
    LIVE_STALE_SECONDS,
    RunFigures,
    computed_run_figures,
)

if TYPE_CHECKING:  # the store imports this module: only its type, to check the readers' calls
    from runner.store.store import RunStore

BUILT_IN_METRICS = frozenset({protocol.LOSS, protocol.STEP_TIME, protocol.DATA_WAIT, protocol.SAMPLES_PER_SECOND,
                              protocol.STEPS_PER_SECOND, protocol.COMM_WAIT, protocol.CPU_WAIT,
                              protocol.COMPUTE_TIME, protocol.PHASE_CLOCK, protocol.SKIPPED_STEP,
                              *protocol.PHASE_METRICS, *protocol.GPU_MEMORY_METRICS})
"""What the bootstrap measures without code changes; every other key was logged by the script
(``rankwatch.log``) or read from its output (``--parse-stdout``)."""

LOSS_SOURCE_ORDER = {protocol.SOURCE_AUTO: 0, protocol.SOURCE_LOG: 1, protocol.SOURCE_PARSED: 2}

StatValue = str | int | float | dict[str, float | None] | None
"""A value of a rank's statistics as their JSON holds it (``phase_shares`` is the only object)."""


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
    comm_wait_share: float | None = None
    samples_per_s: float | None = None
    phase_clock: str | None = None
    phase_shares: dict[str, float | None] | None = None
    measured_steps: int | None = None
    skipped_steps: int | None = None
    first_seen: float | None = None
    last_seen: float | None = None
    dropped: int | None = None
    gpu_index: int | None = None
    gpu_util: float | None = None
    gpu_mem_used_peak: int | None = None
    gpu_mem_total: int | None = None
    gpu_mem_allocated: int | None = None
    gpu_mem_reserved: int | None = None
    gpu_mem_peak: int | None = None

    def to_json(self) -> dict[str, StatValue]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> RankStats:
        """As ``to_json`` wrote it (kept in the store); a value of the wrong type reads as None.

        Raises:
            ValueError: an entry without its rank.
        """
        rank = kept_int(data.get("rank"))
        if rank is None:
            raise ValueError(f"kept rank statistics without a rank: {sorted(data)}")
        get = data.get
        return cls(rank, state=kept_text(get("state")), host=kept_text(get("host")), pid=kept_int(get("pid")),
                   exit_code=kept_int(get("exit_code")), steps=kept_int(get("steps")),
                   last_step=kept_int(get("last_step")), last_loss=kept_float(get("last_loss")),
                   loss_source=kept_text(get("loss_source")), median_step_time=kept_float(get("median_step_time")),
                   data_wait_share=kept_float(get("data_wait_share")),
                   comm_wait_share=kept_float(get("comm_wait_share")), samples_per_s=kept_float(get("samples_per_s")),
                   phase_clock=kept_text(get("phase_clock")), phase_shares=kept_shares(get("phase_shares")),
                   measured_steps=kept_int(get("measured_steps")), skipped_steps=kept_int(get("skipped_steps")),
                   first_seen=kept_float(get("first_seen")), last_seen=kept_float(get("last_seen")),
                   dropped=kept_int(get("dropped")), gpu_index=kept_int(get("gpu_index")),
                   gpu_util=kept_float(get("gpu_util")), gpu_mem_used_peak=kept_int(get("gpu_mem_used_peak")),
                   gpu_mem_total=kept_int(get("gpu_mem_total")), gpu_mem_allocated=kept_int(get("gpu_mem_allocated")),
                   gpu_mem_reserved=kept_int(get("gpu_mem_reserved")), gpu_mem_peak=kept_int(get("gpu_mem_peak")))


class LoggedKeyJson(TypedDict):
    """``LoggedKey`` as the store keeps it (JSON: the ranks' keys are text)."""

    name: str
    sources: list[str]
    last_by_rank: dict[str, float | None]


@dataclass(frozen=True)
class LoggedKey:
    """A metric key the script logged: its sources and each rank's newest value."""

    name: str
    sources: tuple[str, ...]
    last_by_rank: dict[int, float | None]

    def to_json(self) -> LoggedKeyJson:
        return {"name": self.name, "sources": list(self.sources),
                "last_by_rank": {str(rank): value for rank, value in sorted(self.last_by_rank.items())}}

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> LoggedKey:
        """As ``to_json`` wrote it; a rank that is not a number is left out."""
        last_by_rank = {}
        for rank, value in kept_object(data.get("last_by_rank")).items():
            number = _whole_number(rank)
            if number is not None:
                last_by_rank[number] = kept_float(value)
        return cls(kept_text(data.get("name")) or "", tuple(str(source) for source in kept_list(data.get("sources"))),
                   last_by_rank)


def _whole_number(text: str) -> int | None:
    try:
        return int(text)
    except ValueError:
        return None




@dataclass
class RecordFigures:
    """What a rank's metric records add up to: the part of ``RankStats`` read from them (computed
    from the store here, or tallied as they arrived by ``statistics_tally``)."""

    steps: int | None = None
    last_step: int | None = None
    last_loss: float | None = None
    loss_source: str | None = None
    median_step_time: float | None = None
    data_wait_share: float | None = None
    comm_wait_share: float | None = None
    """From the old ``comm_wait`` records; the ``comm`` phase's share replaces it where measured."""
    samples_per_s: float | None = None
    phase_shares: dict[str, float | None] | None = None
    measured_steps: int | None = None
    phase_clock: str | None = None
    skipped_steps: int = 0
    gpu_mem_allocated: int | None = None
    gpu_mem_reserved: int | None = None
    gpu_mem_peak: int | None = None

    def to_json(self) -> dict[str, StatValue]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> RecordFigures:
        """As ``to_json`` wrote it (a live run's tally); a value of the wrong type reads as None."""
        get = data.get
        return cls(steps=kept_int(get("steps")), last_step=kept_int(get("last_step")),
                   last_loss=kept_float(get("last_loss")), loss_source=kept_text(get("loss_source")),
                   median_step_time=kept_float(get("median_step_time")),
                   data_wait_share=kept_float(get("data_wait_share")),
                   comm_wait_share=kept_float(get("comm_wait_share")), samples_per_s=kept_float(get("samples_per_s")),
                   phase_shares=kept_shares(get("phase_shares")), measured_steps=kept_int(get("measured_steps")),
                   phase_clock=kept_text(get("phase_clock")), skipped_steps=kept_int(get("skipped_steps")) or 0,
                   gpu_mem_allocated=kept_int(get("gpu_mem_allocated")),
                   gpu_mem_reserved=kept_int(get("gpu_mem_reserved")), gpu_mem_peak=kept_int(get("gpu_mem_peak")))

    def apply_to(self, entry: RankStats) -> None:
        entry.steps, entry.last_step = self.steps, self.last_step
        entry.last_loss, entry.loss_source = self.last_loss, self.loss_source
        entry.median_step_time, entry.data_wait_share = self.median_step_time, self.data_wait_share
        entry.comm_wait_share, entry.samples_per_s = self.comm_wait_share, self.samples_per_s
        if self.phase_shares is not None:
            entry.phase_shares, entry.measured_steps = self.phase_shares, self.measured_steps
            entry.phase_clock = self.phase_clock
            entry.comm_wait_share = self.phase_shares.get("comm")
        if self.steps is not None:
            entry.skipped_steps = self.skipped_steps
        entry.gpu_mem_allocated, entry.gpu_mem_reserved = self.gpu_mem_allocated, self.gpu_mem_reserved
        entry.gpu_mem_peak = self.gpu_mem_peak


@dataclass(frozen=True)
class TalliedStatistics:
    """What the hub added up of a run's records as they came (``statistics_tally.RunTally``)."""

    ranks: dict[int, RecordFigures]
    logged: list[LoggedKey]
    run: RunFigures | None
    """The runs list's figures; None when the records hold none."""
    run_known: bool = True
    """False when the tally could not tell the runs list's figures (``statistics_tally.LOSS_DETAIL``)."""
    t: float | None = None
    """When they were tallied, as written for a live run (``keep_live_statistics``)."""


def custom_metric_names(names: list[str]) -> list[str]:
    """The keys a script logged, in the order given (built-in metrics left out)."""
    return [name for name in names if name not in BUILT_IN_METRICS]


def _rows(store, sql: str, *params: object) -> list[tuple]:
    """Read-only SQL on the store's own connection. The queries below follow the metrics table's
    index (run_id, name, rank, t), so a run of millions of records is read in a second or two,
    in SQLite, with memory bounded by one rank's steps."""
    return [tuple(row) for row in store.connection.execute(sql, params)]


def _per_rank_max_step(store, run_id: int, auto_only: bool) -> dict[int, int]:
    names = [protocol.STEP_TIME, protocol.DATA_WAIT, protocol.LOSS] if auto_only else store.metric_names(run_id)
    newest: dict[int, int] = {}
    for name in names:
        source_clause = " AND source = ?" if auto_only else ""
        params = (run_id, name, protocol.SOURCE_AUTO) if auto_only else (run_id, name)
        for rank, step in _rows(store, "SELECT rank, MAX(step) FROM metrics WHERE run_id = ? AND name = ?"
                                       f"{source_clause} AND step IS NOT NULL GROUP BY rank", *params):
            newest[rank] = max(newest.get(rank, step), step)
    return newest


def _last_losses(store, run_id: int) -> dict[int, tuple[float, str]]:
    """Each rank's newest loss from its most deliberate source (measured, then logged, then parsed)."""
    best: dict[int, tuple[int, float, str]] = {}
    for rank, source, value, _t in _rows(
            store, "SELECT rank, source, value, MAX(t) FROM metrics WHERE run_id = ? AND name = ?"
                   " AND value IS NOT NULL GROUP BY rank, source", run_id, protocol.LOSS):
        order = LOSS_SOURCE_ORDER.get(source, 9)
        if rank not in best or order < best[rank][0]:
            best[rank] = (order, value, source)
    return {rank: (value, source) for rank, (_order, value, source) in best.items()}


def _measured(store, run_id: int, name: str, rank: int) -> dict[int, float]:
    """step -> value of one measured series of one rank."""
    return {step: value for step, value in _rows(
        store, "SELECT step, value FROM metrics WHERE run_id = ? AND name = ? AND rank = ? AND source = ?"
               " AND step IS NOT NULL AND value IS NOT NULL", run_id, name, rank, protocol.SOURCE_AUTO)}


def _add_timing(store, run_id: int, rank: int, stats: RecordFigures) -> None:
    step_times = _measured(store, run_id, protocol.STEP_TIME, rank)
    if not step_times:
        return
    stats.median_step_time = statistics.median(step_times.values())
    stats.data_wait_share = _share_of_step_time(_measured(store, run_id, protocol.DATA_WAIT, rank), step_times)
    stats.comm_wait_share = _share_of_step_time(_measured(store, run_id, protocol.COMM_WAIT, rank), step_times)
    rates = _measured(store, run_id, protocol.SAMPLES_PER_SECOND, rank)
    counted = [step for step in rates if step in step_times]
    counted_time = sum(step_times[step] for step in counted)
    if counted and counted_time > 0:
        stats.samples_per_s = sum(rates[step] * step_times[step] for step in counted) / counted_time


def _add_phases(store, run_id: int) -> dict[int, tuple[dict[str, float | None], int]]:
    """rank -> (each phase's share of the timed steps' span, how many steps were timed)."""
    names = ", ".join("?" * len(protocol.PHASE_METRICS))
    totals: dict[int, list[float | None]] = {}
    for rank, name, total in _rows(
            store, f"SELECT rank, name, SUM(value * COALESCE(n, 1)) FROM metrics WHERE run_id = ?"
                   f" AND name IN ({names}) AND source = ? AND value IS NOT NULL GROUP BY rank, name", run_id, *protocol.PHASE_METRICS, protocol.SOURCE_AUTO):
        totals.setdefault(rank, [None] * len(protocol.PHASES))[protocol.PHASE_INDEX[name]] = total
    counts = _counts(store, run_id, protocol.PHASE_CLOCK)
    result = {}
    for rank, phases in totals.items():
        shares = protocol.phase_shares([phases])
        if shares is not None:
            result[rank] = (shares, int(counts.get(rank, 0)))
    return result


def _newest_clocks(store, run_id: int) -> dict[int, str | None]:
    return {rank: protocol.clock_name(value) for rank, value, _t in _rows(
        store, "SELECT rank, value, MAX(t) FROM metrics WHERE run_id = ? AND name = ? AND source = ? GROUP BY rank",
        run_id, protocol.PHASE_CLOCK, protocol.SOURCE_AUTO)}


def _counts(store, run_id: int, name: str) -> dict[int, int]:
    return {rank: int(count) for rank, count in _rows(
        store, "SELECT rank, SUM(COALESCE(n, 1)) FROM metrics WHERE run_id = ? AND name = ? AND source = ? GROUP BY rank",
        run_id, name, protocol.SOURCE_AUTO)}


def _share_of_step_time(waits: dict[int, float], step_times: dict[int, float]) -> float | None:
    both = [step for step in waits if step in step_times]
    total_time = sum(step_times[step] for step in both)
    if not both or total_time <= 0:
        return None
    return min(1.0, sum(waits[step] for step in both) / total_time)


def _step_span(store, run_id: int, rank: int) -> tuple[float | None, float | None]:
    """The time of the rank's first step time record and of its last: two walks down the metrics
    index (``runs list`` asks for every rank of many runs; no scan of a run's steps)."""
    sql = "SELECT t FROM metrics WHERE run_id = ? AND name = ? AND rank = ? ORDER BY t {} LIMIT 1"
    first = _rows(store, sql.format("ASC"), run_id, protocol.STEP_TIME, rank)
    last = _rows(store, sql.format("DESC"), run_id, protocol.STEP_TIME, rank)
    return (first[0][0], last[0][0]) if first and last else (None, None)


def _median_utilisation(store, run_id: int, gpu_index: int, start: float, end: float) -> float | None:
    """The median of GPU ``gpu_index``'s utilisation samples taken from ``start`` to ``end``."""
    values = [value for (value,) in _rows(
        store, "SELECT utilization FROM gpu_samples WHERE run_id = ? AND t >= ? AND t <= ? AND gpu_index = ?"
               " AND utilization IS NOT NULL", run_id, start, end, gpu_index)]
    return float(statistics.median(values)) if values else None


def gpu_utilisation(store, run_id: int, ranks: list[tuple[int, int | None, float | None, float | None]]
                    ) -> dict[int, float]:
    """rank -> its GPU's median utilisation (``RankStats.gpu_util``), for ``ranks`` given as
    ``(rank, gpu index, first seen, last seen)``; ranks without a GPU or a sample are left out.

    Over the samples taken while the rank made steps; over its whole life only when it made none
    (a script whose steps Rankwatch cannot see). A rank whose steps all fell between two readings
    has no figure: the readings around them are of the GPU loading the model or idle after the
    end (on an H200 the example's 128 steps took 0.8 s and showed "0%")."""
    result = {}
    for rank, gpu_index, first_seen, last_seen in ranks:
        if gpu_index is None:
            continue
        start, end = _step_span(store, run_id, rank)
        if start is None or end is None:
            start, end = first_seen, last_seen
        value = None if start is None or end is None else _median_utilisation(store, run_id, gpu_index, start, end)
        if value is not None:
            result[rank] = value
    return result


def run_gpu_utilisation(store: RunStore, run_id: int) -> float | None:
    """One figure for a run (``runs list``): the median of its ranks' ``gpu_util``; None when no rank
    of it was seen on a sampled GPU."""
    ranks = [(row.rank, row.gpu_index, row.first_seen, row.last_seen) for row in store.ranks(run_id)]
    values = list(gpu_utilisation(store, run_id, ranks).values())
    return float(statistics.median(values)) if values else None


def _add_gpu_utilisation(store, run_id: int, ordered: list[RankStats]) -> None:
    """Each rank's GPU's median utilisation and its memory, from the GPU samples (NVML)."""
    utilisation = gpu_utilisation(store, run_id, [(entry.rank, entry.gpu_index, entry.first_seen, entry.last_seen)
                                                  for entry in ordered])
    totals = {index: total for index, total in _rows(
        store, "SELECT gpu_index, MAX(memory_total) FROM gpu_samples WHERE run_id = ? GROUP BY gpu_index", run_id)}
    for entry in ordered:
        entry.gpu_util = utilisation.get(entry.rank)
        if entry.gpu_index is not None:
            entry.gpu_mem_total = _as_bytes(totals.get(entry.gpu_index))


def _gpu_memory(store, run_id: int) -> tuple[dict[int, int | None], dict[int, int | None], dict[int, int | None]]:
    """rank -> torch's allocator at the newest reading (allocated, reserved) and its peak."""
    newest = [{rank: _as_bytes(value) for rank, value, _t in _rows(
        store, "SELECT rank, value, MAX(t) FROM metrics WHERE run_id = ? AND name = ? AND source = ?"
               " AND value IS NOT NULL GROUP BY rank", run_id, name, protocol.SOURCE_AUTO)}
        for name in (protocol.GPU_MEMORY_ALLOCATED, protocol.GPU_MEMORY_RESERVED)]
    peaks = {rank: _as_bytes(value) for rank, value in _rows(
        store, "SELECT rank, MAX(value) FROM metrics WHERE run_id = ? AND name = ? AND source = ?"
               " AND value IS NOT NULL GROUP BY rank", run_id, protocol.GPU_MEMORY_PEAK, protocol.SOURCE_AUTO)}
    return newest[0], newest[1], peaks


def _as_bytes(value: float | None) -> int | None:
    return None if value is None else int(value)


def _logged_keys(store, run_id: int, names: list[str]) -> list[LoggedKey]:
    keys = []
    for name in custom_metric_names(names):
        sources = tuple(sorted(source for (source,) in _rows(
            store, "SELECT DISTINCT source FROM metrics WHERE run_id = ? AND name = ?", run_id, name)))
        newest = {rank: value for rank, value, _t in _rows(
            store, "SELECT rank, value, MAX(t) FROM metrics WHERE run_id = ? AND name = ? GROUP BY rank", run_id, name)}
        keys.append(LoggedKey(name, sources, dict(sorted(newest.items()))))
    return keys


def run_statistics(store, run_id: int) -> tuple[list[RankStats], list[LoggedKey]]:
    """Per-rank statistics and the keys the script logged: those its runner kept when the run
    ended, else computed from the records now.

    Every rank the store knows is listed, from the ranks table or from its records.

    Raises:
        runner.store.store.RunNotFound: no such run (from the store).
    """
    kept = _kept_statistics(store, run_id)
    if kept is not None:
        return kept
    live = live_statistics(store, run_id)
    if live is not None:
        return statistics_with(store, run_id, live.ranks, live.logged)
    return computed_run_statistics(store, run_id)


def keep_live_statistics(store, run_id: int, tallied: TalliedStatistics, t: float) -> None:
    """Write what the hub of live run ``run_id`` tallied by time ``t`` (``store`` writable)."""
    with store.connection:
        store.connection.execute(
            "INSERT OR REPLACE INTO live_statistics (run_id, version, t, ranks, logged, figures)"
            " VALUES (?, ?, ?, ?, ?, ?)",
            (run_id, KEPT_VERSION, t, json.dumps({rank: figures.to_json() for rank, figures in tallied.ranks.items()}),
             json.dumps([key.to_json() for key in tallied.logged]),
             json.dumps(tallied.run.to_json() if tallied.run else {}) if tallied.run_known else None))


def live_statistics(store: RunStore, run_id: int, now: float | None = None) -> TalliedStatistics | None:
    """What the hub of run ``run_id`` tallied, while its runner is alive and wrote them in the last
    ``LIVE_STALE_SECONDS``; else None (an ended run has its kept statistics; a lost one stored
    records after its last tally, so they are computed)."""
    try:
        rows = _rows(store, "SELECT t, ranks, logged, figures FROM live_statistics WHERE run_id = ? AND version = ?",
                     run_id, KEPT_VERSION)
    except sqlite3.OperationalError:  # a store read-only at an older schema: no such table
        return None
    if not rows:
        return None
    t, ranks, logged, figures = rows[0]
    if t < (time.time() if now is None else now) - LIVE_STALE_SECONDS or not runner_alive(store.stored_run(run_id)):
        return None
    run = kept_object(loaded_json(figures))
    tallied = {}
    for rank, data in kept_object(loaded_json(ranks)).items():
        number = _whole_number(rank)
        if number is not None:
            tallied[number] = RecordFigures.from_json(kept_object(data))
    return TalliedStatistics(tallied, [LoggedKey.from_json(kept_object(key)) for key in kept_list(loaded_json(logged))],
                             RunFigures.from_json(run) if run else None, run_known=figures is not None, t=t)


def keep_run_statistics(store, run_id: int, tallied: TalliedStatistics | None = None
                        ) -> tuple[list[RankStats], list[LoggedKey]]:
    """Keep the statistics of run ``run_id``, which has ended, and its runs-list figures
    (``run_figures``) in the store. Its hub calls it once it has stored the last record
    (``store`` writable), with what it tallied of every record it stored (``tallied``);
    without that they are computed from the records (every record read)."""
    if tallied is None:
        stats, logged = computed_run_statistics(store, run_id)
    else:
        stats, logged = statistics_with(store, run_id, tallied.ranks, tallied.logged)
    if tallied is not None and tallied.run_known:
        figures = tallied.run
    else:
        figures = computed_run_figures(store, [run_id]).get(run_id)
    with store.connection:
        store.connection.execute("DELETE FROM live_statistics WHERE run_id = ?", (run_id,))
        store.connection.execute(
            "INSERT OR REPLACE INTO run_statistics (run_id, version, ranks, logged, figures) VALUES (?, ?, ?, ?, ?)",
            (run_id, KEPT_VERSION, json.dumps([entry.to_json() for entry in stats]),
             json.dumps([key.to_json() for key in logged]), json.dumps(figures.to_json() if figures else {})))
    return stats, logged


def _kept_statistics(store, run_id: int) -> tuple[list[RankStats], list[LoggedKey]] | None:
    try:
        rows = _rows(store, "SELECT ranks, logged FROM run_statistics WHERE run_id = ? AND version = ?",
                     run_id, KEPT_VERSION)
    except sqlite3.OperationalError:  # a store read-only at an older schema: no such table
        return None
    if not rows:
        return None
    ranks, logged = rows[0]
    return ([RankStats.from_json(kept_object(entry)) for entry in kept_list(loaded_json(ranks))],
            [LoggedKey.from_json(kept_object(key)) for key in kept_list(loaded_json(logged))])


def computed_run_statistics(store, run_id: int) -> tuple[list[RankStats], list[LoggedKey]]:
    """Per-rank statistics and the logged keys, computed from the run's records."""
    return statistics_with(store, run_id, _record_figures(store, run_id),
                           _logged_keys(store, run_id, store.metric_names(run_id)))


def statistics_with(store: RunStore, run_id: int, figures: dict[int, RecordFigures],
                    logged: list[LoggedKey]) -> tuple[list[RankStats], list[LoggedKey]]:
    """Per-rank statistics of run ``run_id`` from the figures of its records (computed from the
    store, or tallied by its hub as they arrived: ``statistics_tally``), with what the store
    keeps of each rank (its row, its hello, its GPU's samples)."""
    stats: dict[int, RankStats] = {}
    for row in store.ranks(run_id):
        stats[row.rank] = RankStats(
            rank=row.rank, state=row.state, host=row.host, pid=row.pid, exit_code=row.exit_code,
            first_seen=row.first_seen, last_seen=row.last_seen, dropped=row.dropped, gpu_index=row.gpu_index,
            gpu_mem_used_peak=row.gpu_mem_used_peak)
    for event in store.stored_events(run_id, kind="rank_started"):  # the hello, when the store has no first_seen
        entry = stats.get(event.rank) if event.rank is not None else None
        if entry is not None and (entry.first_seen is None or event.t < entry.first_seen):
            entry.first_seen = event.t
    for rank in figures:
        stats.setdefault(rank, RankStats(rank=rank))
    ordered = [stats[rank] for rank in sorted(stats)]
    for entry in ordered:
        found = figures.get(entry.rank)
        if found is not None:
            found.apply_to(entry)
    _add_gpu_utilisation(store, run_id, ordered)
    return ordered, logged


def _record_figures(store, run_id: int) -> dict[int, RecordFigures]:
    """rank -> the figures of its records, read from the store (every record of the run)."""
    steps = _per_rank_max_step(store, run_id, auto_only=True)
    last_steps = _per_rank_max_step(store, run_id, auto_only=False)
    losses = _last_losses(store, run_id)
    phases, clocks = _add_phases(store, run_id), _newest_clocks(store, run_id)
    skipped = _counts(store, run_id, protocol.SKIPPED_STEP)
    memory = _gpu_memory(store, run_id)
    figures = {}
    for rank in sorted(set(steps) | set(last_steps) | set(losses)):
        found = figures[rank] = RecordFigures(
            steps=None if rank not in steps else steps[rank] + 1, last_step=last_steps.get(rank),
            skipped_steps=skipped.get(rank, 0), gpu_mem_allocated=memory[0].get(rank),
            gpu_mem_reserved=memory[1].get(rank), gpu_mem_peak=memory[2].get(rank))
        if rank in losses:
            found.last_loss, found.loss_source = losses[rank]
        _add_timing(store, run_id, rank, found)
        if rank in phases:
            found.phase_shares, found.measured_steps = phases[rank]
            found.phase_clock = clocks.get(rank)
    return figures


RANK_SUMMARY_COLUMNS = ("rank", "state", "host", "pid", "exit_code", "steps", "last_step", "last_loss", "loss_source",
                        "median_step_time", "data_wait_share", "comm_wait_share", "samples_per_s", "phase_clock",
                        "measured_steps", *(f"phase_{phase}_share" for phase in protocol.PHASES), "skipped_steps",
                        "gpu_index", "gpu_util", "gpu_mem_used_peak", "gpu_mem_total", "gpu_mem_allocated",
                        "gpu_mem_reserved", "gpu_mem_peak", "first_seen", "last_seen", "dropped")
"""The columns of an export's ``rank_summary.csv``: ``RankStats`` of each rank, its phase shares
one column each (``phase_forward_share``...)."""


def rank_summary_rows(stats: list[RankStats]) -> list[list[StatValue]]:
    """One row per rank in ``RANK_SUMMARY_COLUMNS`` order; None where not measured (an empty cell)."""
    rows = []
    for entry in stats:
        values = entry.to_json()
        shares = entry.phase_shares or {}
        values.update({f"phase_{phase}_share": shares.get(phase) for phase in protocol.PHASES})
        rows.append([values[column] for column in RANK_SUMMARY_COLUMNS])
    return rows
