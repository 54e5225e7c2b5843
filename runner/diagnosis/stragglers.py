"""Stragglers: the rank that makes every step slower, and in which phase -- named only when it beats the noise.

With DDP every step ends in an all-reduce, so every rank's *step time* is the
slowest rank's: the fast ranks simply wait inside the collective. Step time alone
therefore cannot name the straggler (pytorch/pytorch#71303, traceopt-ai/traceml#252).
What still differs is where a rank spends its step: its **phases**, on the step's own
clock (``rankwatch._phases``; the GPU's on a GPU). Two causes are compared:

* **waiting for data**: its ``data`` phase against the other ranks' -- the others wait
  for it in the all-reduce;
* **computing**: its compute time (the step less its waits for data, for communication
  and, on the CPU clock, for a CPU) against the others'. The phase named is the one of
  forward, backward, optimizer, host-to-device and rest whose excess over the others'
  median is largest. Without exposed communication on any rank (no process group: the
  steps are not synchronised), its step time, when data does not explain it.

A value that was not measured is never read as 0: data is compared only among ranks that
measured it (``MIN_STEPS`` of the window), compute time likewise.

**The rule.** On a shared machine a healthy rank's phases move with everything else that
runs there: a neighbour's burst puts it on the run queue, its DataLoader's work (or its
workers) waits for a CPU, and the next second it is another rank's turn. So a finding must
beat the noise, persist, and be withdrawn explicitly. Each rank's steps are read in two
disjoint windows of ``WINDOW`` measured steps, the same steps on every rank (they end at
the last step every rank has reported; ``step_windows`` keeps the history). In each
window, per cause:

    excess = its median  -  the median of the other ranks' medians
    margin = max(ABSOLUTE_MARGIN_SECONDS, RELATIVE_MARGIN x the others' median)
           + NOISE_Z x 1.25 x sigma x sqrt(1 / its steps + 1 / the others' steps)
           + (data only, CPU clock) contention x the others' median

* the others' median is of the compared quantity, for data of the step time (30 ms more
  data wait in a 300 ms step is not a straggler);
* ``sigma`` is the ranks' own spread: 1.4826 x the median absolute deviation of every
  compared rank's steps from that rank's own median (the rank's and the others'): the
  ``NOISE_Z`` term is ``NOISE_Z`` standard errors of the difference of two medians
  (a median's is about 1.25 sigma / sqrt(n)). A steady machine has a small sigma; one
  whose ranks' steps jump has a large one;
* ``contention`` is the run-queue share: ``cpu_wait / (compute_time + cpu_wait)``, the
  share of the time the training thread wanted a CPU and waited for one (the worker's
  ``cpu_wait``), the largest of the compared ranks'. Compute time already leaves the
  run-queue wait out; a data phase does not (it is a wait, but the batch it waits for is
  made by the rank's own thread or its DataLoader workers, which queue as long), so up to
  that share of the others' data phase may be the machine's.

A rank whose excess reaches the margin in both windows, in the same cause, is a
*candidate*; it is **named** (an event ``straggler`` with ``active: true``) once it held
for ``HOLD_SECONDS`` more of its own steps (their step times added up): either its two
windows ending that long before the last ones showed it too (steps that came in one
batch, a worker that sends every 2 s while nobody watches, are judged as if they had
come one by one), or it stayed a candidate at every evaluation (each monitor tick that
brought new steps) for that long. A neighbour's burst on one rank that covers most of
both windows for a moment is gone by then. A named rank is **withdrawn** (``active:
false``, with the reason) when its excess is under half its margin in every cause in both
windows, held as long. A rank that finishes is no longer judged, and is not withdrawn.

The run's summary (``conclude``) keeps a rank only when it was named for at least
``SUMMARY_SHARE`` of its steps (from the first step of the earlier window that began its
finding to the first of the earlier window that began its recovery, or its last step): a
straggler of a moment is in the events, not in the summary.

Events (``rank`` is the straggler)::

    straggler {message, active: true, cause: "data"|"compute", phase, step, since_step, step_time,
               data_wait, compute_time, others_step_time, others_data_wait, others_compute_time,
               excess, margin (s per step), window (steps)}   # data_wait, compute_time: null if not measured
    straggler {message, active: false, step, held_steps}       # withdrawn: no longer beats the noise
"""

from __future__ import annotations

import bisect
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import NamedTuple

from rankwatch import protocol
from rankwatch.protocol import EventKind
from runner.diagnosis.findings import Findings
from runner.diagnosis.step_windows import MeasuredStep, RankSteps, StepWindows, TimedStep
from runner.diagnosis.straggler_record import StragglerCause, StragglerRecord, StragglerWithdrawn
from runner.state import RankState

WINDOW = 6
"""Measured steps per window; a verdict reads the rank's last two windows (module docstring)."""
MIN_STEPS = 5
"""A value measured in fewer of a window's steps is not measured."""
RELATIVE_MARGIN = 0.10
ABSOLUTE_MARGIN_SECONDS = 0.002
NOISE_Z = 2.5
"""Standard errors of the difference of the medians an excess must add to the margin."""
MEDIAN_ERROR = 1.25
"""A median of n normal values has a standard error of about 1.25 sigma / sqrt(n)."""
MAD_TO_SIGMA = 1.4826
HOLD_SECONDS = 0.4
"""How long (the rank's own step times added up) a finding or a recovery must go on holding after both
windows first showed it, before it is said."""
SUMMARY_SHARE = 0.2
"""The share of a rank's steps it must have been a straggler for to be in the run's summary."""
COMPUTE_PHASES = (*protocol.COMPUTING_PHASES, "rest")
"""The phases a rank works in, one of which names a compute straggler (the loop's own work too)."""


class StepSummary(NamedTuple):
    """One rank's window: medians in seconds (None where not measured) and the spread around them."""

    step_time: float
    data_wait: float | None = None
    """The ``data`` phase (the step's clock)."""
    compute_time: float | None = None
    phases: tuple[float | None, ...] | None = None
    """Each phase's median (``PHASES`` order), for naming the phase a straggler computes longer in."""
    contention: float | None = None
    """The run-queue share of its time outside waits (CPU clock): cpu_wait / (compute_time + cpu_wait)."""
    step_deviations: tuple[float, ...] = ()
    """Each step's distance from the median, per quantity: the noise the margin grows with."""
    data_deviations: tuple[float, ...] = ()
    compute_deviations: tuple[float, ...] = ()


@dataclass(frozen=True)
class _Baseline:
    """The other ranks' medians one rank is compared with, and the margin its excess must reach per cause."""

    data_margin: float | None
    """None exactly when the data waits are not comparable."""
    compute_margin: float
    others_step_time: float
    others_data_wait: float | None
    others_compute_time: float | None


@dataclass(frozen=True)
class StragglerVerdict:
    """A rank whose excess over the others reaches the margin in ``cause`` (``straggler_verdict``)."""

    cause: StragglerCause
    phase: str | None
    """``data``, or the compute phase it exceeds the others in most (None without phases)."""
    excess: float
    """Seconds per step more than the others' median."""
    margin: float
    others_step_time: float
    others_data_wait: float | None
    others_compute_time: float | None


def straggler_verdict(mine: StepSummary | tuple, others: list[StepSummary] | list[tuple]) -> StragglerVerdict | None:
    """Whether the rank summarised by ``mine`` holds the ``others`` up, beyond the noise (module docstring):
    its verdict when its excess reaches the margin in a cause, else None."""
    if not others:
        return None
    return Cohort([StepSummary(*mine), *(StepSummary(*other) for other in others)]).verdict(0)


def below_half_margin(mine: StepSummary | tuple, others: list[StepSummary] | list[tuple]) -> bool:
    """Whether a named rank looks recovered now (hysteresis: its excess is under half the margin in every cause)."""
    if not others:
        return True
    return Cohort([StepSummary(*mine), *(StepSummary(*other) for other in others)]).below_half_margin(0)


class Cohort:
    """Every live rank's window at once, each judged against all the others.

    Judging each rank against the others one by one rebuilt the others' medians and sorted their
    deviations for every rank: quadratic, 11 of 26 s of a 256-rank hub's time. Here the values are
    sorted once; the others' median is the median of the sorted values without the rank's own one
    (the same number, found in constant time), and the noise's pooled deviations and the
    contention are the same for every rank (they were always taken over all ranks)."""

    def __init__(self, summaries: list[StepSummary]) -> None:
        self.summaries = summaries
        self.step_times = sorted(summary.step_time for summary in summaries)
        self.data_waits = sorted(summary.data_wait for summary in summaries if summary.data_wait is not None)
        self.computes = sorted(summary.compute_time for summary in summaries if summary.compute_time is not None)
        self.contention = max((summary.contention for summary in summaries if summary.contention is not None),
                              default=0.0)
        self.phases: list[list[float]] = [
            sorted(value for summary in summaries if summary.phases is not None
                   and (value := summary.phases[index]) is not None) for index in range(len(protocol.PHASES))]
        """Each phase's measured medians over the ranks, sorted (``slowest_phase``)."""
        self.pooled: dict[str, tuple[float | None, int]] = {}
        """field -> (the median of every rank's deviations, how many there are)."""
        for field in ("step_deviations", "data_deviations", "compute_deviations"):
            values = [value for summary in summaries for value in getattr(summary, field)]
            self.pooled[field] = (statistics.median(values) if values else None, len(values))

    def verdict(self, index: int) -> StragglerVerdict | None:
        """``straggler_verdict`` of rank ``index`` against all the others."""
        if len(self.summaries) < 2:
            return None
        me = self.summaries[index]
        (data, compute), base = self._excesses(me)
        others = (base.others_step_time, base.others_data_wait, base.others_compute_time)
        if data is not None and base.data_margin is not None and data >= base.data_margin:
            return StragglerVerdict(StragglerCause.DATA, "data", data, base.data_margin, *others)
        if compute is not None and compute >= base.compute_margin:
            return StragglerVerdict(StragglerCause.COMPUTE, self.slowest_phase(me), compute, base.compute_margin,
                                    *others)
        return None

    def slowest_phase(self, me: StepSummary) -> str | None:
        """The compute phase in which ``me`` exceeds the others' median most; None without phases."""
        if me.phases is None:
            return None
        best, best_excess = None, 0.0
        for phase in COMPUTE_PHASES:
            index = protocol.PHASES.index(phase)
            mine = me.phases[index]
            theirs = _median_without(self.phases[index], mine)
            if mine is None or theirs is None:
                continue
            if mine - theirs > best_excess:
                best, best_excess = phase, mine - theirs
        return best

    def below_half_margin(self, index: int) -> bool:
        if len(self.summaries) < 2:
            return True
        (data, compute), base = self._excesses(self.summaries[index])
        return ((data is None or (base.data_margin is not None and data < base.data_margin / 2))
                and (compute is None or compute < base.compute_margin / 2))

    def _excesses(self, me: StepSummary) -> tuple[tuple[float | None, float | None], _Baseline]:
        """Per cause, how much longer ``me`` takes than the others' median (None: not comparable), and the margins."""
        others_step = _median_without(self.step_times, me.step_time)
        assert others_step is not None  # two ranks at least: the others have step times
        others_wait = _median_without(self.data_waits, me.data_wait)
        others_compute = _median_without(self.computes, me.compute_time)
        data = data_margin = None
        if me.data_wait is not None and others_wait is not None:
            data = me.data_wait - others_wait
            data_margin = (_base_margin(others_step) + self._noise(me, "data_deviations")
                           + self.contention * others_wait)
        if me.compute_time is not None and others_compute is not None:
            compute: float | None = me.compute_time - others_compute
            compute_margin = _base_margin(others_compute) + self._noise(me, "compute_deviations")
        elif me.compute_time is None and others_compute is None:
            compute = me.step_time - others_step  # steps not synchronised: step time is the compute
            compute_margin = _base_margin(others_step) + self._noise(me, "step_deviations")
        else:
            compute, compute_margin = None, _base_margin(others_step)  # measured on some ranks only: not comparable
        return (data, compute), _Baseline(data_margin=data_margin, compute_margin=compute_margin,
                                          others_step_time=others_step, others_data_wait=others_wait,
                                          others_compute_time=others_compute)

    def _noise(self, me: StepSummary, field: str) -> float:
        """``NOISE_Z`` standard errors of (its median - the others' median), from the ranks' own spread."""
        mine = len(getattr(me, field))
        pooled, count = self.pooled[field]
        theirs = count - mine
        if not mine or theirs <= 0 or pooled is None:
            return 0.0
        sigma = MAD_TO_SIGMA * pooled
        return NOISE_Z * MEDIAN_ERROR * sigma * math.sqrt(1 / mine + 1 / theirs)


def _median_without(ordered: list[float], value: float | None) -> float | None:
    """The median of ``ordered`` (sorted) less one ``value`` (a rank's own; None: it has none there)."""
    if value is None:
        return statistics.median(ordered) if ordered else None
    skip = bisect.bisect_left(ordered, value)
    count = len(ordered) - 1
    if count <= 0:
        return None

    def at(position: int) -> float:
        return ordered[position] if position < skip else ordered[position + 1]

    if count % 2:
        return at(count // 2)
    return (at(count // 2 - 1) + at(count // 2)) / 2


def _base_margin(others_median: float) -> float:
    """The margin on a quiet machine: a share of the others' value, and at least a few milliseconds.

    The data margin's share is of the others' step time (a rank that waits 30 ms more for data
    in a 300 ms step is noise; in a 60 ms step it is not)."""
    return max(ABSOLUTE_MARGIN_SECONDS, RELATIVE_MARGIN * others_median)


@dataclass
class _Streak:
    """A candidate finding (or a named rank's recovery) that has to hold before it is said."""

    cause: StragglerCause | None
    since_step: int | None
    """The first step of the earlier window when both windows first showed it (where its evidence begins)."""
    held_from: float
    """The rank's step times added up to the end of the later window then: it must hold from there."""


class StragglerMonitor:
    """Judges each rank against the others on ``tick``, from the shared step windows (module docstring)."""

    def __init__(self, hub, windows: StepWindows, findings: Findings | None = None):
        self.hub = hub
        self.windows = windows
        self.findings = findings if findings is not None else Findings()
        self.flagged: dict[int, StragglerRecord] = {}
        """rank -> its record, while it is named (the live bottleneck verdict reads it)."""
        self._named_since: dict[int, int | None] = {}
        """rank -> the first step of the window where its current naming began, while it is named."""
        self._candidates: dict[int, _Streak] = {}
        self._recoveries: dict[int, _Streak] = {}

    def tick(self, now: float) -> None:
        if not self.windows.take_changed():
            return
        self._judge(finished_too=False)

    def _judge(self, finished_too: bool) -> None:
        """Judge every rank's last two windows against the others' (module docstring). Live, a rank
        that finished is left out; at the end (``finished_too``) every rank is judged once more on
        all its steps: a run of a second or two sends them in a batch or two, and the ranks may have
        finished before a tick saw the two windows."""
        live = {}
        for rank, steps in self.windows.ranks.items():
            row = self.hub.model.ranks.get(rank)
            if not finished_too and row is not None and RankState(row.state).finished:
                self._candidates.pop(rank, None)
                continue
            if len(steps.step_history) >= MIN_STEPS:
                live[rank] = steps
        if len(live) < 2:
            return
        # the same steps on every rank: windows end at the last step every rank has reported
        ends = (min((steps.history[-1].step for steps in live.values() if steps.history), default=None),
                min(steps.step_history[-1].step for steps in live.values()))
        judged = _judged_pairs(live, *ends)
        earlier_ends = _ends_before(live, *ends)  # HOLD_SECONDS earlier: the steps may have come in one batch
        judged_then = _judged_pairs(live, *earlier_ends) if earlier_ends is not None else {}
        for rank, steps in live.items():
            if rank not in judged:
                continue
            mine, verdict, recovered = judged[rank]
            _mine, verdict_then, recovered_then = judged_then.get(rank, (None, None, False))
            span = window_span(steps, *ends)
            if rank in self.flagged:
                if recovered and recovered_then:
                    self._recoveries.pop(rank, None)
                    self._clear(rank, window_span(steps, *earlier_ends)[0] if earlier_ends else span[0])
                else:
                    self._judge_recovery(rank, recovered, span)
                continue
            if verdict is not None and verdict_then is not None and verdict_then.cause == verdict.cause:
                self._candidates.pop(rank, None)
                self._flag(rank, mine, verdict, window_span(steps, *earlier_ends)[0] if earlier_ends else span[0])
            else:
                self._judge_candidate(rank, mine, verdict, span)

    def _judge_candidate(self, rank: int, mine: StepSummary, verdict: StragglerVerdict | None,
                         span: tuple[int | None, float]) -> None:
        """``verdict``: both windows show it, in that cause; ``span``: ``window_span``."""
        if verdict is None:
            self._candidates.pop(rank, None)
            return
        streak = self._candidates.get(rank)
        if streak is None or streak.cause != verdict.cause:
            streak = self._candidates[rank] = _Streak(verdict.cause, *span)
        if span[1] - streak.held_from >= HOLD_SECONDS - 1e-9:
            del self._candidates[rank]
            self._flag(rank, mine, verdict, streak.since_step)

    def _judge_recovery(self, rank: int, recovered: bool, span: tuple[int | None, float]) -> None:
        if not recovered:
            self._recoveries.pop(rank, None)
            return
        streak = self._recoveries.get(rank)
        if streak is None:
            streak = self._recoveries[rank] = _Streak(None, *span)
        if span[1] - streak.held_from >= HOLD_SECONDS - 1e-9:
            del self._recoveries[rank]
            self._clear(rank, streak.since_step)

    def _flag(self, rank: int, mine: StepSummary, verdict: StragglerVerdict, since_step: int | None) -> None:
        step_time, data_wait, compute = mine.step_time, mine.data_wait, mine.compute_time
        others_step, others_wait = verdict.others_step_time, verdict.others_data_wait
        others_compute = verdict.others_compute_time
        phase = verdict.phase
        if verdict.cause == StragglerCause.DATA:
            message = (f"rank {rank} is a straggler: it waits for data ({_ms(data_wait)} of its {_ms(step_time)} "
                       f"step in the data loader; the other ranks wait {_ms(others_wait)})")
        elif compute is not None and others_compute is not None:
            where = ""
            if phase is not None and mine.phases is not None:
                index = protocol.PHASES.index(phase)
                where = f", most in {phase}: {_ms(mine.phases[index])}"
            message = (f"rank {rank} is a straggler: it computes longer ({_ms(compute)} of its {_ms(step_time)} "
                       f"step vs {_ms(others_compute)} on the other ranks, which wait for it in collectives{where})")
        else:
            message = (f"rank {rank} is a straggler: it computes longer (step {_ms(step_time)} vs {_ms(others_step)} "
                       f"on the other ranks; data wait {_ms(data_wait)})")
        steps = self.windows.ranks[rank]
        record = StragglerRecord(
            rank=rank, cause=verdict.cause, phase=phase, step=steps.last_step, since_step=since_step,
            step_time=round(step_time, 6), data_wait=_rounded(data_wait), compute_time=_rounded(compute),
            others_step_time=round(others_step, 6), others_data_wait=_rounded(others_wait),
            others_compute_time=_rounded(others_compute), excess=round(verdict.excess, 6),
            margin=round(verdict.margin, 6), window=WINDOW)
        self.flagged[rank] = record
        finding = self.findings.stragglers.get(rank)
        held = (finding.held_steps or 0) if finding is not None else 0
        if finding is None or (record.excess or 0.0) > (finding.excess or 0.0):
            finding = replace(record, message=message)  # the worst naming is the one the summary keeps
        self.findings.stragglers[rank] = replace(finding, held_steps=held)
        self._named_since[rank] = since_step
        self.hub.add_event(EventKind.STRAGGLER, rank, message, **record.event_fields())

    def _clear(self, rank: int, until_step: int | None) -> None:
        """Withdraw a named rank: its excess stayed under half the margin since ``until_step``."""
        self.flagged.pop(rank, None)
        held = self._close_finding(rank, until_step)
        withdrawn = StragglerWithdrawn(
            rank, self.windows.ranks[rank].last_step, held, f"rank {rank} is no longer a straggler: since step "
            f"{until_step} its excess over the other ranks stayed under half the noise margin")
        self.hub.add_event(EventKind.STRAGGLER, rank, withdrawn.message, **withdrawn.event_fields())

    def _close_finding(self, rank: int, until_step: int | None) -> int | None:
        """Add the steps since the rank was named (from the window where it began) to its finding's count."""
        finding = self.findings.stragglers.get(rank)
        since = self._named_since.pop(rank, None)
        if finding is None:
            return None
        if since is not None and until_step is not None:
            finding = self.findings.stragglers[rank] = replace(
                finding, held_steps=(finding.held_steps or 0) + max(0, until_step - since))
        return finding.held_steps

    def conclude(self) -> None:
        """The run's stragglers: those named for at least ``SUMMARY_SHARE`` of their steps (module docstring)."""
        self._judge(finished_too=True)
        for rank in list(self.findings.stragglers):
            steps = self.windows.ranks.get(rank)
            if rank in self.flagged:
                self._close_finding(rank, None if steps is None or steps.last_step is None else steps.last_step + 1)
            finding = self.findings.stragglers[rank]
            total = steps.step_count if steps is not None else 0
            held = min(finding.held_steps or 0, total)
            if total <= 0 or held / total < SUMMARY_SHARE:
                del self.findings.stragglers[rank]
                continue
            self.findings.stragglers[rank] = replace(finding, held_steps=held, steps=total, share=round(held / total, 3),
                                                     message=f"{finding.message}; for {held} of its {total} steps")


def _window(items: list, end: int | None, earlier: bool) -> list:
    """The last ``WINDOW`` of ``items`` (steps, oldest first) up to step ``end``, or the ``WINDOW`` before them."""
    upto = [item for item in items if end is None or item.step <= end]
    return upto[-2 * WINDOW:-WINDOW] if earlier else upto[-WINDOW:]


def _judged_pairs(live: dict[int, RankSteps], measured_end: int | None, steps_end: int
                  ) -> dict[int, tuple[StepSummary, StragglerVerdict | None, bool]]:
    """Per rank whose two windows (ending at these steps) are both there: its later window, the verdict
    both windows give (None unless both show it, in the same cause) and whether both look recovered."""
    later = {rank: summarise(steps, measured_end, steps_end) for rank, steps in live.items()}
    earlier = {rank: summarise(steps, measured_end, steps_end, earlier=True) for rank, steps in live.items()}
    later_windows = {rank: value for rank, value in later.items() if value is not None}
    earlier_windows = {rank: value for rank, value in earlier.items() if value is not None}
    now, before = Cohort(list(later_windows.values())), Cohort(list(earlier_windows.values()))
    now_index = {rank: index for index, rank in enumerate(later_windows)}
    before_index = {rank: index for index, rank in enumerate(earlier_windows)}
    judged = {}
    for rank in live:
        mine = later[rank]
        if mine is None or earlier[rank] is None:
            continue
        verdict = now.verdict(now_index[rank])
        verdict_before = before.verdict(before_index[rank])
        both = (verdict if verdict is not None and verdict_before is not None
                and verdict_before.cause == verdict.cause else None)
        judged[rank] = (mine, both, now.below_half_margin(now_index[rank])
                        and before.below_half_margin(before_index[rank]))
    return judged


def _ends_before(live: dict[int, RankSteps], measured_end: int | None, steps_end: int) -> tuple[int | None, int] | None:
    """The ends of windows ``HOLD_SECONDS`` (of each rank's steps) before these, the earliest over the ranks;
    None when the history does not reach back so far."""
    found: list[tuple[int | None, int]] = []
    for steps in live.values():
        timed = _before(list(steps.step_history), steps_end)
        measured = _before(list(steps.history), measured_end) if steps.history and measured_end is not None else None
        if timed is None or (steps.history and measured_end is not None and measured is None):
            return None
        found.append((measured, timed))
    measured_ends = [end for end, _timed in found if end is not None]
    return (min(measured_ends) if measured_ends else None), min(timed for _end, timed in found)


def _before(items: list, end: int | None) -> int | None:
    """The last step among ``items`` that ran ``HOLD_SECONDS`` before step ``end`` ended."""
    upto = [item for item in items if end is None or item.step <= end]
    if not upto:
        return None
    until = upto[-1].elapsed - HOLD_SECONDS + 1e-9
    earlier = [item.step for item in upto if item.elapsed <= until]
    return earlier[-1] if earlier else None


def window_span(steps: RankSteps, measured_end: int | None, steps_end: int) -> tuple[int | None, float]:
    """The first step of the rank's earlier window, and its step times added up to the end of the later one."""
    history: list[MeasuredStep] | list[TimedStep] = list(steps.history) if steps.history else list(steps.step_history)
    end = measured_end if steps.history else steps_end
    later = _window(history, end, False)
    earlier = _window(history, end, True) or later
    if not later:
        return None, steps.elapsed
    return earlier[0].step, later[-1].elapsed


def summarise(steps: RankSteps, measured_end: int | None = None, steps_end: int | None = None,
              earlier: bool = False) -> StepSummary | None:
    """Medians and spreads over one of a rank's two windows (the later one, or ``earlier``) of the steps up
    to ``measured_end`` (measured steps) and ``steps_end`` (step times); None with fewer than ``MIN_STEPS``
    step times there. A value measured fewer than ``MIN_STEPS`` times is not measured."""
    timed = _window(list(steps.step_history), steps_end, earlier)
    if len(timed) < MIN_STEPS:
        return None
    measured: list[MeasuredStep] = _window(list(steps.history), measured_end, earlier)
    step_times = [item.step_time for item in timed]
    phases = tuple(_window_median([step.phases[index] for step in measured]) for index in range(len(protocol.PHASES)))
    computes = [step.compute_time for step in measured]
    compute = _window_median(computes)
    waits = [step.cpu_wait for step in measured if step.cpu_wait is not None and step.clock == protocol.CLOCK_CPU]
    contention = None
    if compute is not None and len(waits) >= MIN_STEPS:
        queued = statistics.median(waits)
        contention = queued / (compute + queued) if compute + queued > 0 else 0.0
    return StepSummary(statistics.median(step_times), phases[0], compute,
                       phases if any(value is not None for value in phases) else None, contention,
                       _deviations(step_times), _deviations([step.phases[0] for step in measured]),
                       _deviations(computes))


def _window_median(values: list[float | None]) -> float | None:
    measured = [value for value in values if value is not None]
    return statistics.median(measured) if len(measured) >= MIN_STEPS else None


def _deviations(values: Sequence[float | None]) -> tuple[float, ...]:
    """Each measured value's distance from their median; none when fewer than ``MIN_STEPS`` were measured."""
    measured = [value for value in values if value is not None]
    if len(measured) < MIN_STEPS:
        return ()
    middle = statistics.median(measured)
    return tuple(abs(value - middle) for value in measured)


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 6)


def _ms(seconds: float | None) -> str:
    return "not measured" if seconds is None else f"{seconds * 1000:.0f} ms"
