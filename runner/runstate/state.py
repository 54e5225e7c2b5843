"""One run's state, as the hub's messages build it: the one reducer every surface renders.

:class:`RunState` applies the typed hub messages (``runner.runstate.messages``) and owns what
is derived from them, once, so that the terminal, the GUI and the history cannot disagree:

* the run, its ranks (only this run's: a new snapshot starts over) and its nodes;
* the current step and the steps done (``640/640``: the newest step index + 1, everywhere);
* the data-wait share of each step, paired from step time and data wait as the hub pairs them
  (``rankwatch.protocol.StepPairs``);
* progress and ETA (``runner.runstate.progress``);
* each rank's newest process sample that measured something: a process that is gone keeps
  its last known values, never zeros.

It is plain Python (no Qt, no I/O): the GUI's monitor model holds one and turns what
:meth:`RunState.apply` says changed into its events; the terminal view holds one and draws it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rankwatch import protocol
from runner.runstate.messages import (
    Bye,
    HistoryEnd,
    HubMessage,
    MetricItem,
    NodeInfo,
    ProcessSample,
    RankInfo,
    RunInfo,
    SnapshotMessage,
    UpdateMessage,
)
from runner.runstate.progress import Progress, ProgressTracker, compute_progress
from runner.state import RankState, RunStatus

HUNG = "hung"
"""How every surface names a run that is running while a rank of it makes no progress (the stall
monitor marked it ``stalled``): a condition of the running run, not a status the runner records.
The header, History, ``runs list`` and the notices say it alike (:func:`shown_status`)."""


def shown_status(status: str | None, rank_states: Iterable[str | None]) -> str | None:
    """The run's status as it is shown: :data:`HUNG` while it runs with a stalled rank."""
    if status == RunStatus.RUNNING.value and any(state == RankState.STALLED.value for state in rank_states):
        return HUNG
    return status


def steps_done(step: int | None) -> int | None:
    """Steps a rank (or the run) completed: its newest step index + 1 (index 639 is the 640th
    step). Every surface counts steps so: the header, the rank table, ``runs show``."""
    return None if step is None else step + 1


@dataclass
class Changes:
    """What one applied message changed (the GUI's model turns these into its events)."""

    reset: bool = False
    run: bool = False
    status: bool = False
    ranks: bool = False
    nodes: bool = False
    history_done: bool = False
    ended: bool = False


class RunState:
    """A run as its subscriber knows it. Not thread-safe: one thread applies and reads."""

    def __init__(self) -> None:
        self._start_over()

    def _start_over(self) -> None:
        self.run: RunInfo | None = None
        self.spec: dict[str, Any] = {}
        self.ranks: dict[int, RankInfo] = {}
        """This run's ranks, by rank: a snapshot replaces them."""
        self.nodes: dict[int, NodeInfo] = {}
        self.progress = ProgressTracker()
        self.last_process: dict[int, ProcessSample] = {}
        """Each rank's newest process sample that measured its process (see :meth:`note_process_samples`)."""
        self.history_done = False
        self.history_end: HistoryEnd | None = None
        """The replay's end: whether the history came thinned, and what it left out."""
        self.end_reason: str | None = None
        self._step_pairs: dict[int, protocol.StepPairs] = {}

    # ---- applying ----------------------------------------------------------------------

    def apply(self, message: HubMessage) -> Changes:
        """Apply one hub message. Records (metrics, logs, samples, events) are the caller's to
        keep; the state takes from them what it derives (steps, shares, last samples)."""
        if isinstance(message, SnapshotMessage):
            return self.apply_snapshot(message)
        if isinstance(message, UpdateMessage):
            return self.apply_update(message)
        if isinstance(message, HistoryEnd):
            self.history_done = True
            self.history_end = message
            return Changes(history_done=True)
        if isinstance(message, Bye):
            self.end_reason = message.reason
            return Changes(ended=True)
        return Changes()

    def apply_snapshot(self, message: SnapshotMessage) -> Changes:
        """Start over: a snapshot is the whole run (another run's ranks do not survive it)."""
        self._start_over()
        self.spec = dict(message.spec)
        self.run = message.run
        self.ranks = {row.rank: row for row in message.ranks}
        self.nodes = {node.node_rank: node for node in message.nodes}
        return Changes(reset=True, run=True, status=True, ranks=True, nodes=True)

    def apply_update(self, message: UpdateMessage) -> Changes:
        changes = Changes()
        if message.run:
            old_status = self.status
            self.run = RunInfo.from_wire(message.run) if self.run is None else self.run.merged(message.run)
            changes.run = True
            changes.status = self.status != old_status
        for data in message.ranks:
            self.merge_rank(data)
            changes.ranks = True
        for data in message.nodes:
            self.merge_node(data)
            changes.nodes = True
        if message.procs:
            self.note_process_samples(message.procs)
        for line in message.logs:
            self.progress.note_line(line.line)
        return changes

    def merge_rank(self, data: Mapping[str, Any]) -> None:
        rank = protocol.as_int(data.get("rank"))
        if rank is None:
            return
        known = self.ranks.get(rank)
        self.ranks[rank] = RankInfo.from_wire(data) if known is None else known.merged(data)

    def merge_node(self, data: Mapping[str, Any]) -> None:
        node_rank = protocol.as_int(data.get("node_rank")) or 0
        known = self.nodes.get(node_rank)
        self.nodes[node_rank] = (NodeInfo.from_wire({**data, "node_rank": node_rank}) if known is None
                                 else known.merged(data))

    def note_process_samples(self, samples: Iterable[ProcessSample]) -> list[ProcessSample]:
        """Keep each rank's newest sample that measured its process; returns the samples worth
        charting. A sample of a process that is gone (every figure zero: nothing was read) is no
        measurement: the rank's last known values stand."""
        kept = []
        for sample in samples:
            if not measured_process(sample):
                continue
            newest = self.last_process.get(sample.rank)
            if newest is None or sample.t >= newest.t:
                self.last_process[sample.rank] = sample
            kept.append(sample)
        return kept

    def pair_data_wait(self, record: MetricItem) -> tuple[int, float, float | None] | None:
        """``(step, t, share)`` once both the step time and the data wait of a step arrived (either
        order), as the hub pairs them; None otherwise. The one place a subscriber computes it."""
        rank, t, step, name, value, _source = record
        if step is None or name not in (protocol.STEP_TIME, protocol.DATA_WAIT):
            return None
        pairs = self._step_pairs.get(rank)
        if pairs is None:
            pairs = self._step_pairs[rank] = protocol.StepPairs()
        return pairs.add(step, t, name, value)

    def note_steps(self, steps: Sequence[Any], times: Sequence[float]) -> None:
        """Steps of one series, in order, for the progress rate."""
        self.progress.note_steps(steps, times)

    # ---- reading -----------------------------------------------------------------------

    @property
    def status(self) -> str | None:
        return None if self.run is None else self.run.status

    @property
    def shown_status(self) -> str | None:
        """The status every surface shows (:func:`shown_status`: ``hung`` while a rank stalls)."""
        return shown_status(self.status, (row.state for row in self.ranks.values()))

    @property
    def finished(self) -> bool:
        try:
            return self.status is not None and RunStatus(self.status).finished
        except ValueError:
            return False

    def rank_set(self) -> list[int]:
        """This run's ranks, in order (never a previous run's)."""
        return sorted(self.ranks)

    def current_step(self) -> int | None:
        """The newest step index any rank reported (the rank rows, else the metrics seen)."""
        steps = [row.step for row in self.ranks.values() if row.step is not None]
        if steps:
            return max(steps)
        return None if self.progress.last_step is None else int(self.progress.last_step)

    def steps_done(self) -> int | None:
        return steps_done(self.current_step())

    def progress_now(self, last_value: Callable[[Sequence[str]], float | None], now: float | None = None) -> Progress:
        """Step, epoch, elapsed and ETA (``runner.runstate.progress.compute_progress``)."""
        return compute_progress(step=self.current_step(), last_value=last_value, args=self.spec.get("args") or [],
                                tracker=self.progress, run=self.run, finished=self.finished,
                                now=time.time() if now is None else now)

    def working_text(self, rank: int, now: float) -> str:
        """``working without steps for 42 s (since step 311)`` while the rank works without
        stepping (an evaluation, a checkpoint), its steps counted as everywhere (:func:`steps_done`);
        empty otherwise (``rankwatch.protocol.working_without_steps``)."""
        row = self.ranks.get(rank)
        return "" if row is None else working_text(row, now)

    def process_figures(self, rank: int) -> tuple[float | None, int | None]:
        """``(cpu_percent, rss_bytes)`` of the rank's process: the newest measured, which for a
        process that is gone is its last known values (None: never measured)."""
        sample = self.last_process.get(rank)
        if sample is not None:
            return sample.cpu_percent, sample.rss_bytes
        row = self.ranks.get(rank)
        return (None, None) if row is None else (row.cpu_percent, row.rss_bytes)


def working_text(row: RankInfo, now: float) -> str:
    """``working without steps for 42 s (since step 311)`` for a rank that works without stepping,
    its steps counted as everywhere (:func:`steps_done`); empty otherwise."""
    if row.working_since is None:
        return ""
    return protocol.working_without_steps({"working_since": row.working_since, "step": steps_done(row.step)}, now)


def measured_process(sample: ProcessSample) -> bool:
    """Whether a process sample read anything: a live process has memory; all zeros is a
    process that was gone when it was sampled."""
    return not (sample.rss_bytes == 0 and not sample.cpu_percent and not sample[5])

