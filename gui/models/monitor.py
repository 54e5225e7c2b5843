"""The monitor's view model: one run as the hub streams it (or as the store kept it).

:class:`MonitorModel` applies the hub's messages (``snapshot``, ``update``,
``history_end``, ``bye``; see ``rankwatch.protocol``) and keeps what the monitor
shows: the run, its rank rows, every metric point of every rank and GPU (as
:class:`~gui.models.series.Series`, unlimited), the last ``log_limit`` log lines
(older ones stay in the store), events, and progress with an ETA.

It is plain Python (no Qt): widgets take it in ``__init__``, connect to its events
and redraw on their own timers; tests feed it messages directly. A model may be
built on a background thread (:meth:`MonitorModel.from_store`) and handed over to
the GUI thread once complete; after that only the GUI thread touches it.
"""

from __future__ import annotations

import math
import re
import time
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

from gui.gateway.run_state import (
    HistoryEnd,
    HubMessage,
    NodeInfo,
    RankInfo,
    RunInfo,
    RunReading,
    RunState,
    SnapshotMessage,
    UpdateMessage,
)
from gui.gateway.runner_rules import Progress, RankState, RunSummary
from gui.models import NOT_MEASURED, Event
from gui.models.event_words import event_message, event_title
from gui.models.exits import rank_ended_by, run_summary
from gui.models.phases import RankPhases, rank_phases
from gui.models.series import Series
from rankwatch import protocol
from rankwatch.protocol import Event as RunEvent
from rankwatch.protocol import EventKind, LogLine

if TYPE_CHECKING:
    import numpy as np

    from gui.gateway.store_reads import RankStats, RunRecords, StoredHistory

    Points = Sequence[float | None] | np.ndarray
    """One column of points for :meth:`MonitorModel.append_points` (a number or None each)."""

LOG_LIMIT = 50_000
"""Log lines kept in memory; the store has them all."""
EVENT_LIMIT = 10_000

# Series that are not worker metrics. Slashes keep them apart from user metric names.
GPU_UTILIZATION = "gpu/utilization"
"""Percent, per GPU index."""
GPU_MEMORY = "gpu/memory_used"
"""Bytes, per GPU index."""
CPU_PERCENT = "process/cpu_percent"
"""Percent of one core, per rank."""
RSS_BYTES = "process/rss_bytes"
"""Resident memory in bytes, per rank."""
DATA_WAIT_SHARE = protocol.DATA_WAIT_SHARE
"""Share (0..1) of each step spent waiting for data (``protocol.StepPairs``: paired as the hub pairs them)."""

SOURCE_PRIORITY = protocol.SOURCE_PRIORITY
"""When a rank reports one metric from several sources, charts show one (the hub ranks them alike)."""



class LogEntry(NamedTuple):
    rank: int | None
    """None: a line of the launcher (torchrun, the runner) rather than of a rank."""
    t: float
    stream: str
    line: str
    node: str | None


_TORCH_RANK_PREFIX = re.compile(r"^\[rank(\d+)\]:\s?")
"""torch.distributed prints ``[rankN]:`` before each line of a distributed traceback."""


def log_text(entry: LogEntry) -> str:
    """The line without torch's own ``[rankN]:`` prefix when it names the line's rank (which the
    view says already): no ``[localhost r1] [rank1]: ...``. The store keeps the line as printed."""
    if entry.rank is not None and entry.line.startswith("[rank"):
        found = _TORCH_RANK_PREFIX.match(entry.line)
        if found and int(found.group(1)) == entry.rank:
            return entry.line[found.end():]
    return entry.line


def format_log_entry(entry: LogEntry) -> str:
    """``[r3] text``, ``[host r3] text`` with a node name, ``[launcher] text`` without a rank."""
    who = "launcher" if entry.rank is None else f"r{entry.rank}"
    if entry.node:
        who = f"{entry.node} {who}"
    return f"[{who}] {log_text(entry)}"


class LogBuffer:
    """The last ``limit`` log lines, and how many arrived in all.

    A view remembers :attr:`total` after drawing, then asks :meth:`since` for what is
    new; when more arrived than the buffer holds, it redraws from scratch.
    """

    def __init__(self, limit: int = LOG_LIMIT) -> None:
        self.entries: deque[LogEntry] = deque(maxlen=limit)
        self.total = 0

    @property
    def limit(self) -> int:
        return self.entries.maxlen or 0

    @property
    def dropped(self) -> int:
        """Lines no longer in memory (still in the store)."""
        return self.total - len(self.entries)

    def extend(self, entries: Iterable[LogEntry]) -> int:
        old_total = self.total
        for entry in entries:
            self.entries.append(entry)
            self.total += 1
        return self.total - old_total

    def since(self, seen_total: int) -> tuple[list[LogEntry], bool]:
        """Entries that arrived after the view saw ``seen_total``; False when some are gone."""
        new = self.total - seen_total
        if new <= 0:
            return [], True
        if new > len(self.entries):
            return list(self.entries), False
        return [self.entries[i] for i in range(len(self.entries) - new, len(self.entries))], True


PHASES_COLUMN = "Where the step goes"
RANK_COLUMNS = ("Node", "Rank", "Host", "PID", "GPU", "State", "Step", "Loss", "Step ms", "Data wait %", "Comm wait %",
                PHASES_COLUMN, "Heartbeat", "Ended by", "Diagnosis")
"""``Node`` sorts by (node rank, rank), so sorting by it groups the ranks by node; ``Step`` says
the steps the rank made (its newest step index + 1: the header's and ``runs show``'s count) and
how many of them ``GradScaler`` skipped, when any; ``Where the step goes`` is drawn as a stacked
bar of the step's phases (``gui.models.phases``; its text lists the shares, its sort key is the
share spent computing); ``Ended by`` says it as every panel does (``gui.models.exits``);
``Diagnosis`` holds the diagnosis model's note for the rank (failed first, stalled, straggler,
diverged), else, while the rank works without steps (an evaluation), for how long
(``protocol.working_without_steps``)."""
STALE_HEARTBEAT_S = 10.0


def _text(value: Any, fmt: str = "{}") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return NOT_MEASURED
    return fmt.format(value)


def format_age(seconds: float | None) -> str:
    if seconds is None:
        return ""
    seconds = max(0.0, seconds)
    if seconds < 10:
        return f"{seconds:.1f} s"
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def format_loss(value: float | None) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return NOT_MEASURED
    magnitude = abs(value)
    if magnitude != 0 and (magnitude < 1e-3 or magnitude >= 1e5):
        return f"{value:.3e}"
    return f"{value:.4f}"


def heartbeat_age(row: RankInfo, now: float) -> float | None:
    if row.last_seen is None or finished_rank(row):
        return None
    return now - row.last_seen


def finished_rank(row: RankInfo) -> bool:
    try:
        return RankState(row.state).finished
    except ValueError:
        return False


_WHOLE_RUN_SHARE = "While the rank runs: its newest step's share. Once the run ended: the share of its whole run."
WHOLE_RUN_COLUMNS = {
    "Step ms": "While the rank runs: its newest step. Once the run ended: its median step over the whole run.",
    "Data wait %": _WHOLE_RUN_SHARE,
    "Comm wait %": "While the rank runs: the share of its recent measured steps in exposed communication. "
                   "Once the run ended: the share of its whole run.",
    PHASES_COLUMN: "Each phase's share of the step, on the device's own clock (hover a bar for the figures). "
                   "While the rank runs: its recent measured steps; once the run ended: its whole run. "
                   "Sorting orders the ranks by the share they spend computing.",
}
"""Columns whose figures change meaning at the end (their header tooltips say so)."""


@dataclass(frozen=True)
class RankTiming:
    """The rank table's timing columns for one rank."""

    step_time: float | None
    data_wait_share: float | None
    comm_wait_share: float | None
    whole_run_steps: int | None = None
    """Set when the figures are the whole run's (the median over this many steps)."""


def rank_timing(row: RankInfo, result: RankStats | None = None) -> RankTiming:
    """The newest step's figures while the rank runs; once it ended and the run's results were
    read (``MonitorModel.rank_results``), its whole run's: the median step, the shares over
    every step. A last step (a checkpoint, the final all-reduce) is no summary: seen "comm
    wait 46 %" for a rank that waited 3 % of its run, as the plain terminal's results say."""
    if result is not None and finished_rank(row) and result.median_step_time is not None:
        return RankTiming(result.median_step_time, result.data_wait_share, result.comm_wait_share, result.steps)
    return RankTiming(row.step_time, row.data_wait_share, row.comm_wait_share)


def rank_phases_of(row: RankInfo, result: RankStats | None = None) -> RankPhases:
    """Where the rank's steps go (``gui.models.phases.rank_phases``): its recent steps while it
    runs, its whole run once it ended and the run's figures were read (as :func:`rank_timing`)."""
    return rank_phases(row, result, finished_rank(row))


def skipped_steps(row: RankInfo, result: RankStats | None = None) -> int:
    """Steps ``GradScaler`` skipped on the rank (counted among its steps): the whole run's once it
    ended and the figures were read, else the hub's count."""
    if result is not None and finished_rank(row) and result.skipped_steps is not None:
        return int(result.skipped_steps)
    return int(row.skipped_steps or 0)


def step_text(step: Any, skipped: int) -> str:
    """``640``, or ``640 (3 skipped)`` when ``GradScaler`` skipped some: the steps done
    (``steps_done``), as the header and ``runs show`` count them."""
    text = _text(step)
    return f"{text} ({skipped:,} skipped)" if skipped else text


def rank_cells(row: RankInfo, now: float, note: str = "", summary: RunSummary | Mapping[str, Any] | None = None,
               result: RankStats | None = None) -> tuple[str, ...]:
    """The rank table's texts for one RANK row, in :data:`RANK_COLUMNS` order; ``summary`` is the
    run's triage (how it says a rank ended wins over the row); ``result`` the rank's whole-run
    figures once the run ended (:func:`rank_timing`)."""
    timing = rank_timing(row, result)
    share = timing.data_wait_share
    comm_share = timing.comm_wait_share
    step_time = timing.step_time
    gpu = row.gpu_index
    finished = finished_rank(row)
    age = heartbeat_age(row, now)
    return (
        _text(row.node_rank),
        _text(row.rank),
        _text(row.host),
        _text(row.pid),
        "cpu" if gpu is None else str(gpu),
        _text(row.state),
        step_text(RunReading.steps_done(row.step), skipped_steps(row, result)),
        format_loss(row.loss),
        NOT_MEASURED if step_time is None else f"{1000.0 * step_time:.1f}",
        NOT_MEASURED if share is None else f"{100.0 * share:.0f}",
        NOT_MEASURED if comm_share is None else f"{100.0 * comm_share:.0f}",
        rank_phases_of(row, result).text(),
        "" if finished else NOT_MEASURED if age is None else format_age(age),
        rank_ended_by(row, summary, finished),
        note or ("" if finished else RunReading.working_text(row, now)),
    )


def rank_sort_keys(row: RankInfo, now: float, note: str = "",
                   result: RankStats | None = None) -> tuple[Any, ...]:
    """Numbers where the column is numeric, so sorting by step or loss is numeric; the figures
    shown (:func:`rank_timing`)."""
    timing = rank_timing(row, result)
    step_time = timing.step_time
    return (
        (row.node_rank or 0) * 1_000_000 + row.rank, row.rank, row.host or "", row.pid, row.gpu_index, row.state,
        row.step, row.loss, None if step_time is None else 1000.0 * step_time,
        timing.data_wait_share, timing.comm_wait_share, rank_phases_of(row, result).compute_share,
        heartbeat_age(row, now), row.exit_code, note,
    )


class MonitorModel:
    """One run: status, ranks, nodes, metric series, logs, events, progress.

    Events (``gui.models.Event``), emitted on the thread that applies messages:
    ``reset`` (a new snapshot: everything was replaced), ``run_changed``,
    ``status_changed(str)``, ``ranks_changed``, ``nodes_changed``, ``series_added(name, key)``,
    ``points_added``, ``logs_added``, ``events_added``, ``history_finished``,
    ``ended(reason)``.
    """

    def __init__(self, log_limit: int = LOG_LIMIT, event_limit: int = EVENT_LIMIT) -> None:
        self.reset = Event()
        self.run_changed = Event()
        self.status_changed = Event()
        self.ranks_changed = Event()
        self.nodes_changed = Event()
        self.series_added = Event()
        self.points_added = Event()
        self.logs_added = Event()
        self.events_added = Event()
        self.history_finished = Event()
        self.ended = Event()
        self._log_limit = log_limit
        self._event_limit = event_limit
        self.history_from_store = False
        """The history comes from the store, not the hub's replay (``take_stored_history``): after
        each snapshot, live records, log lines and events are held until it arrived. Set by
        whoever subscribes (``Subscribe.from_store``)."""
        self._clear()

    def _clear(self) -> None:
        self.state = RunState()
        """The run, its ranks and nodes and what derives from them (``runner.runstate``): the
        terminal view renders the same state."""
        self.rank_results: dict[int, RankStats] = {}
        """Each rank's whole-run figures, read from the store once the run ended (``set_rank_results``)."""
        self.logs = LogBuffer(self._log_limit)
        self.events: deque[RunEvent] = deque(maxlen=self._event_limit)
        """The run's events as the hub publishes them (``rankwatch.protocol.Event``), newest last."""
        self.events_total = 0
        self._series: dict[str, dict[int, dict[str, Series]]] = {}
        self.gpu_memory_total: dict[int, float] = {}
        self.decimated_updates = 0
        self.messages_applied = 0
        self.points_total = 0
        self.first_t: float | None = None
        self.awaiting_history = self.history_from_store
        """Live records are held (``_held``) until the history from the store is in."""
        self._held = _HeldRecords()

    def adopt(self, other: MonitorModel) -> None:
        """Take over ``other``'s content (a run loaded off the GUI thread) and tell the views.

        Widgets keep their reference to this model; only its content changes.
        """
        for name, value in vars(other).items():
            if not isinstance(value, Event) and name not in ("_log_limit", "_event_limit"):
                setattr(self, name, value)
        self.reset.emit()
        self.run_changed.emit()
        if self.status is not None:
            self.status_changed.emit(str(self.status))
        self.ranks_changed.emit()
        self.nodes_changed.emit()
        self.points_added.emit()
        self.logs_added.emit()
        self.events_added.emit()

    def clear(self) -> None:
        """Forget everything (a new launch is coming)."""
        self._clear()
        self.reset.emit()
        self.run_changed.emit()
        self.ranks_changed.emit()
        self.nodes_changed.emit()
        self.logs_added.emit()
        self.events_added.emit()

    # ---- applying messages ---------------------------------------------------------

    def apply(self, message: dict[str, Any] | HubMessage) -> None:
        """Apply one hub message, as the link decoded it or typed already. Unknown types are
        ignored (newer hubs)."""
        typed = RunReading.decode(message) if isinstance(message, dict) else message
        self.messages_applied += 1
        if isinstance(typed, SnapshotMessage):
            self._apply_snapshot(typed)
        elif isinstance(typed, UpdateMessage):
            self._apply_update(typed)
        elif typed is not None:
            changes = self.state.apply(typed)
            if changes.history_done and not self.awaiting_history:
                self.history_finished.emit()
            if changes.ended:
                self.ended.emit(self.end_reason)

    def _apply_snapshot(self, message: SnapshotMessage) -> None:
        self._clear()
        self.state.apply(message)
        self.reset.emit()
        self.run_changed.emit()
        if self.status is not None:
            self.status_changed.emit(str(self.status))
        self.ranks_changed.emit()
        self.nodes_changed.emit()

    def _apply_update(self, message: UpdateMessage) -> None:
        if message.decimated:
            self.decimated_updates += 1
        shown = self.shown_status
        changes = self.state.apply(message)
        if changes.run:
            self.run_changed.emit()
        if changes.status or self.shown_status != shown:
            self.status_changed.emit(str(self.shown_status))
        added = 0
        if self.awaiting_history:
            self._held.hold(message)
        else:
            if message.metrics:
                added += self.add_metric_rows(message.metrics)
            if message.gpus:
                added += self.add_gpu_rows(message.gpus)
            if message.procs:
                added += self.add_process_rows(message.procs)
            if message.logs:
                self._add_log_lines(message.logs)
            if message.events:
                self.add_events(message.events)
        if changes.ranks:
            self.ranks_changed.emit()
        if changes.nodes:
            self.nodes_changed.emit()
        if added:
            self.points_added.emit()

    def take_stored_history(self, history: StoredHistory | None) -> None:
        """The history up to where the live updates begin, read from the store
        (``StoreReads.stored_history``), then the live records, log lines and events
        held meanwhile: they begin right after it (``HistoryEnd.stored_through``). None: the
        history could not be read; what was held goes in as it came."""
        if not self.awaiting_history:
            return
        self.awaiting_history = False
        held, self._held = self._held, _HeldRecords()
        added = 0
        if history is not None:
            added += self.add_metric_rows(history.metrics)
            added += self.add_gpu_rows(history.gpu_samples)
            added += self.add_process_rows(history.process_samples)
            self.state.note_process_samples(history.process_samples)
            self.add_log_lines(history.logs)
            self.logs.total += history.left_out.get("logs", 0)
            self.add_events(history.events)
            hub_end = self.state.history_end or HistoryEnd()
            self.state.history_end = HistoryEnd(hub_end.decimated or history.decimated,
                                                {**hub_end.left_out, **history.left_out}, hub_end.stored_through)
        added += self.add_metric_rows(held.metrics) + self.add_gpu_rows(held.gpus) + self.add_process_rows(held.procs)
        self._add_log_lines(held.logs)
        self.add_events(held.events)
        if added:
            self.points_added.emit()
        if self.state.history_done:
            self.history_finished.emit()

    def add_metric_rows(self, rows: Iterable[Sequence[Any]]) -> int:
        """Protocol metric items ``[rank, t, step, name, value, source]``; returns points added."""
        groups: dict[tuple[str, int, str], tuple[list, list, list]] = {}
        for item in rows:
            try:
                rank, t, step, name, value, source = item
            except (TypeError, ValueError):
                continue
            if rank is None or name is None or t is None:
                continue
            rank = int(rank)
            key = (name, rank, source or protocol.SOURCE_AUTO)
            group = groups.get(key)
            if group is None:
                group = groups[key] = ([], [], [])
            group[0].append(step)
            group[1].append(t)
            group[2].append(value)
            if name in (protocol.STEP_TIME, protocol.DATA_WAIT) and step is not None:
                paired = self.state.pair_data_wait((rank, t, step, name, value, source))
                if paired is not None:
                    share = groups.setdefault((DATA_WAIT_SHARE, rank, protocol.SOURCE_AUTO), ([], [], []))
                    share[0].append(paired[0])
                    share[1].append(paired[1])
                    share[2].append(paired[2])
        count = 0
        for (name, rank, source), (steps, times, values) in groups.items():
            series = self._series_for_write(name, rank, source)
            series.append(_numbers(steps), times, _numbers(values))
            count += len(values)
            if name != DATA_WAIT_SHARE:
                self.state.note_steps(steps, times)
            if self.first_t is None and times:
                self.first_t = float(min(times))
        self.points_total += count
        return count

    def add_gpu_rows(self, rows: Iterable[list | tuple]) -> int:
        """Protocol GPU samples ``[t, index, util, mem_used, mem_total, power_w, temp_c, sm_mhz]``."""
        by_gpu: dict[int, tuple[list, list, list]] = {}
        for row in rows:
            if len(row) < 5 or row[1] is None:
                continue
            t, index, util, used, total = row[:5]
            group = by_gpu.setdefault(int(index), ([], [], []))
            group[0].append(t)
            group[1].append(util)
            group[2].append(used)
            if total:
                self.gpu_memory_total[int(index)] = float(total)
        for index, (times, utils, used) in by_gpu.items():
            nan_steps = [None] * len(times)
            self._series_for_write(GPU_UTILIZATION, index, protocol.SOURCE_AUTO).append(
                _numbers(nan_steps), times, _numbers(utils))
            self._series_for_write(GPU_MEMORY, index, protocol.SOURCE_AUTO).append(
                _numbers(nan_steps), times, _numbers(used))
        count = 2 * sum(len(group[0]) for group in by_gpu.values())
        self.points_total += count
        return count

    def add_process_rows(self, rows: Iterable[list | tuple]) -> int:
        """Protocol process samples ``[t, rank, pid, cpu_percent, rss_bytes, threads]``. A sample of a
        process that was gone (nothing read: all zeros) is no point of its charts: they end at its
        last known values (``runner.runstate.state.measured_process``)."""
        by_rank: dict[int, tuple[list, list, list]] = {}
        for row in rows:
            if len(row) < 5 or row[1] is None:
                continue
            sample = protocol.ProcessSample.from_wire(row)
            if sample is not None and not RunReading.measured(sample):
                continue
            t, rank, _pid, cpu, rss = row[:5]
            group = by_rank.setdefault(int(rank), ([], [], []))
            group[0].append(t)
            group[1].append(cpu)
            group[2].append(rss)
        for rank, (times, cpus, rss) in by_rank.items():
            nan_steps = [None] * len(times)
            self._series_for_write(CPU_PERCENT, rank, protocol.SOURCE_AUTO).append(
                _numbers(nan_steps), times, _numbers(cpus))
            self._series_for_write(RSS_BYTES, rank, protocol.SOURCE_AUTO).append(
                _numbers(nan_steps), times, _numbers(rss))
        count = 2 * sum(len(group[0]) for group in by_rank.values())
        self.points_total += count
        return count

    def add_log_rows(self, rows: Iterable[list | tuple]) -> None:
        """Protocol log items ``[rank, t, stream, line, node]`` as published (a test's); a malformed
        one is left out (``LogLine.from_wire``)."""
        self.add_log_lines([line for line in (LogLine.from_wire(row) for row in rows) if line is not None])

    def add_log_lines(self, lines: Sequence[LogLine]) -> None:
        """Lines a rank printed before this model saw the run (a stored run's): their progress
        (``epoch 3/10``) is noted, as the hub notes a live line's."""
        for line in lines:
            self.state.progress.note_line(line.line)
        self._add_log_lines(lines)

    def _add_log_lines(self, lines: Iterable[LogLine]) -> None:
        entries = [LogEntry(line.rank, line.t, line.stream, line.line, line.node) for line in lines]
        if entries:
            self.logs.extend(entries)
            self.logs_added.emit()

    def add_events(self, events: Iterable[RunEvent]) -> None:
        added = 0
        for event in events:
            self.events.append(event)
            added += 1
        self.events_total += added
        if added:
            self.events_added.emit()

    def append_points(self, name: str, key: int, steps: Points, times: Points, values: Points,
                      source: str = protocol.SOURCE_AUTO) -> None:
        """Append arrays of points to one series at once (imports, benchmarks)."""
        series = self._series_for_write(name, key, source)
        series.append(steps, times, values)
        self.points_total += len(values)
        self.points_added.emit()

    def _series_for_write(self, name: str, key: int, source: str) -> Series:
        by_key = self._series.setdefault(name, {})
        by_source = by_key.get(key)
        new_key = by_source is None
        if by_source is None:
            by_source = by_key[key] = {}
        series = by_source.get(source)
        if series is None:
            series = by_source[source] = Series()
            if new_key:
                self.series_added.emit(name, key)
        return series

    # ---- reading -------------------------------------------------------------------

    @property
    def run(self) -> RunInfo | None:
        return self.state.run

    @property
    def spec(self) -> dict[str, Any]:
        return self.state.spec

    @property
    def ranks(self) -> dict[int, RankInfo]:
        """This run's ranks (a new snapshot replaces them)."""
        return self.state.ranks

    @property
    def nodes(self) -> dict[int, NodeInfo]:
        return self.state.nodes

    @property
    def history_done(self) -> bool:
        """The hub said where the history ends, and the history is in (``take_stored_history``)."""
        return self.state.history_done and not self.awaiting_history

    @property
    def end_reason(self) -> str | None:
        return self.state.end_reason

    @property
    def status(self) -> str | None:
        return self.state.status

    @property
    def shown_status(self) -> str | None:
        """The status the person sees: ``hung`` while the run goes with a stalled rank
        (``runner.runstate.state.shown_status``, as History and ``runs list`` say it)."""
        return self.state.shown_status

    @property
    def run_id(self) -> int | None:
        return None if self.run is None else self.run.id

    @property
    def finished(self) -> bool:
        return self.state.finished

    @property
    def t0(self) -> float:
        """Zero of the time axis: when the run started (or its first record)."""
        if self.run is not None:
            for when in (self.run.started, self.run.created):
                if when:
                    return when
        return self.first_t or 0.0

    def series_names(self) -> list[str]:
        return list(self._series)

    def series(self, name: str) -> dict[int, Series]:
        """Per rank (or GPU index), the series of ``name`` from its most deliberate source."""
        result = {}
        for key, by_source in self._series.get(name, {}).items():
            source = min(by_source, key=lambda s: SOURCE_PRIORITY.get(s, 9))
            result[key] = by_source[source]
        return result

    def has_gpu_samples(self) -> bool:
        return bool(self._series.get(GPU_UTILIZATION))

    def rank_rows(self) -> list[RankInfo]:
        return [self.ranks[rank] for rank in sorted(self.ranks)]

    def skipped_steps(self) -> int:
        """Steps ``GradScaler`` skipped, as the header counts them: the most any rank skipped (under
        DDP every rank skips the same steps, as the steps are counted by the rank furthest on)."""
        return max((skipped_steps(row, self.rank_results.get(row.rank)) for row in self.rank_rows()),
                   default=0)

    def set_rank_results(self, results: dict[int, RankStats]) -> None:
        """The run ended: each rank's whole-run figures (``StoreReads.rank_results``)."""
        self.rank_results = results
        self.ranks_changed.emit()

    def last_value(self, names: Iterable[str]) -> float | None:
        """The newest value of the first of ``names`` that any rank reported."""
        for name in names:
            newest_t, newest = -math.inf, None
            for series in self.series(name).values():
                if len(series):
                    t = series.times.last
                    if t is not None and t >= newest_t:
                        newest_t, newest = t, series.values.last
            if newest is not None and not math.isnan(newest):
                return newest
        return None

    def current_step(self) -> int | None:
        return self.state.current_step()

    def progress(self, now: float | None = None) -> Progress:
        """Step, epoch, elapsed and an ETA when the total is known (``runner.runstate.progress``)."""
        return self.state.progress_now(self.last_value, time.time() if now is None else now)

    # ---- loading a finished run ----------------------------------------------------

    @classmethod
    def from_records(cls, records: RunRecords, log_limit: int = LOG_LIMIT) -> MonitorModel:
        """A model of a run as the store recorded it (``StoreReads.run_records``;
        built on the store reader's thread, where ``records.window.metric_chunks`` can be read). A
        big run comes bounded as attaching to it would: ``state.history_end`` says what was
        thinned or left out."""
        model = cls(log_limit=log_limit)
        model.apply(SnapshotMessage(records.run, records.ranks, records.nodes, records.spec))
        window = records.window
        for chunk in window.metric_chunks:
            model.add_metric_rows(chunk)
        model.add_gpu_rows(window.gpu_samples)
        model.state.note_process_samples(window.process_samples)
        model.add_process_rows(window.process_samples)
        model.state.history_end = records.history_end
        model.add_log_lines(records.logs)
        model.logs.total = max(model.logs.total, records.log_total)
        model.add_events(records.events)
        model.rank_results = records.rank_results
        model._fill_rank_rows_from_series()
        model.state.history_done = True
        model.points_added.emit()
        model.ranks_changed.emit()
        return model

    def _fill_rank_rows_from_series(self) -> None:
        """The store keeps no latest step/loss per rank; take them from the series."""
        for name, field, scale in ((protocol.LOSS, "loss", 1.0), (protocol.STEP_TIME, "step_time", 1.0),
                                   (DATA_WAIT_SHARE, "data_wait_share", 1.0),
                                   (protocol.SAMPLES_PER_SECOND, "samples_per_s", 1.0)):
            for rank, series in self.series(name).items():
                row = self.ranks.get(rank) or RankInfo(rank=rank)
                last_value, last_step = series.values.last, series.steps.last  # None when empty
                if getattr(row, field) is None and last_value is not None:
                    known: dict[str, Any] = {"rank": rank, field: last_value * scale}
                    if row.step is None and last_step is not None and not math.isnan(last_step):
                        known["step"] = int(last_step)
                    self.state.merge_rank(known)


class _HeldRecords:
    """Live records, log lines and events that came while the history was read from the store."""

    def __init__(self) -> None:
        self.metrics: list[Sequence[Any]] = []
        self.gpus: list[protocol.GpuSample] = []
        self.procs: list[protocol.ProcessSample] = []
        self.logs: list[LogLine] = []
        self.events: list[RunEvent] = []

    def hold(self, message: UpdateMessage) -> None:
        self.metrics.extend(message.metrics)
        self.gpus.extend(message.gpus)
        self.procs.extend(message.procs)
        self.logs.extend(message.logs)
        self.events.extend(message.events)


def format_event(event: RunEvent) -> str:
    """``12:03:04  rank 3  Rank failed: message`` (local time of day; ``gui.models.event_words``).
    An event of a kind from a newer Rankwatch (a warning naming it) is titled by its own kind."""
    when = time.strftime("%H:%M:%S", time.localtime(event.t))
    who = "" if event.rank is None else f"rank {event.rank}  "
    message = event_message(event)
    text = f"{when}  {who}{event_title(_shown_kind(event))}"
    return f"{text}: {message}" if message else text


def _shown_kind(event: RunEvent) -> str:
    """The kind an event is titled by: its own, or the newer kind a warning stands for."""
    unknown = event.fields.get("unknown_kind") if event.kind == EventKind.WARNING else None
    return unknown if isinstance(unknown, str) and unknown else event.kind.value


def summary_lines(summary: RunSummary | Mapping[str, Any] | None) -> tuple[str, list[str]]:
    """The failure triage of a finished run (``RunInfo.summary``, decoded here when it comes as
    sent) as (headline, detail lines): hints and the first traceback."""
    decoded = run_summary(summary)
    if decoded is None:
        return "", []
    headline = decoded.headline or decoded.outcome.value
    details = [f"Hint: {hint.cause}. {hint.advice}".strip() for hint in decoded.hints]
    first = decoded.first_failure
    if first is not None and first.traceback:
        details.append(f"Traceback of rank {first.rank}:")
        details.extend(first.traceback.rstrip().splitlines())
    return headline, details


def _numbers(values: list) -> list:
    return [math.nan if v is None else v for v in values]

