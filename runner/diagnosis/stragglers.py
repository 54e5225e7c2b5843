"""Stragglers: the rank that makes every step slower, and in which phase.

With DDP every step ends in an all-reduce, so every rank's *step time* is the
slowest rank's: the fast ranks simply wait inside the collective. Step time alone
therefore cannot name the straggler (pytorch/pytorch#71303, traceopt-ai/traceml#252).
What still differs is where a rank spends its step: its **phases**, on the step's own
clock (``rankwatch._phases``; the GPU's on a GPU). Over each rank's last measured steps
(``step_windows``: medians, one slow step is not a straggler):

* **waiting for data**: its ``data`` phase exceeds the other ranks' median by the
  margin -- the others wait for it in the all-reduce;
* **computing**: its compute time (the step less its waits for data, for communication
  and, on the CPU clock, for a CPU) exceeds the other ranks' median by the margin: the
  others wait for it in the collectives while every step time is equal. The phase named
  is the one of forward, backward, optimizer, host-to-device and rest whose excess over
  the others' median is largest. Without exposed communication on any rank (no process
  group: the steps are not synchronised), its step time exceeding the others' by the
  margin, when data does not explain it.

A value that was not measured is never read as 0: data is compared only among ranks that
measured it (``MIN_STEPS`` of the window), compute time likewise.

The margin is ``max(ABSOLUTE_MARGIN_SECONDS, RELATIVE_MARGIN x the others' median)``
of the quantity compared for compute time, of the step time otherwise (a step
stretched by waits, for a CPU included, must not hide a rank computing twice as
long); a flagged rank is cleared when its excess falls under half of it.

Events (``rank`` is the straggler)::

    straggler {message, active: true, cause: "data"|"compute", phase, step, step_time, data_wait,
               compute_time, others_step_time, others_data_wait, others_compute_time,
               excess (s per step), window (steps)}      # data_wait, compute_time: null if not measured
    straggler {message, active: false, step}       # no longer a straggler
"""

from __future__ import annotations

import statistics
from typing import Any, NamedTuple

from rankwatch import _protocol as protocol
from rankwatch._protocol import EventKind
from runner.diagnosis.findings import Findings
from runner.diagnosis.step_windows import RankSteps, StepWindows
from runner.state import RankState

MIN_STEPS = 5
RELATIVE_MARGIN = 0.15
ABSOLUTE_MARGIN_SECONDS = 0.010
COMPUTE_PHASES = (*protocol.COMPUTING_PHASES, "rest")
"""The phases a rank works in, one of which names a compute straggler (the loop's own work too)."""


class StepSummary(NamedTuple):
    """One rank's medians over its window, in seconds; None where not measured."""

    step_time: float
    data_wait: float | None = None
    """The ``data`` phase (the step's clock)."""
    compute_time: float | None = None
    phases: tuple[float | None, ...] | None = None
    """Each phase's median (``PHASES`` order), for naming the phase a straggler computes longer in."""


def straggler_verdict(mine: StepSummary | tuple, others: list[StepSummary] | list[tuple]) -> dict[str, Any] | None:
    """Whether the rank summarised by ``mine`` holds the ``others`` up (module docstring).

    Returns {cause, phase, excess, margin, others_step_time, others_data_wait,
    others_compute_time} when it is a straggler, else None.
    """
    if not others:
        return None
    me = StepSummary(*mine)
    summaries = [StepSummary(*other) for other in others]
    excess, base = _excesses(me, summaries)
    margins = base.pop("margins")
    if excess["data"] is not None and excess["data"] >= margins["data"]:
        return {"cause": "data", "phase": "data", "excess": excess["data"], "margin": margins["data"], **base}
    if excess["compute"] is not None and excess["compute"] >= margins["compute"]:
        return {"cause": "compute", "phase": _slowest_phase(me, summaries), "excess": excess["compute"],
                "margin": margins["compute"], **base}
    return None


def _slowest_phase(me: StepSummary, others: list[StepSummary]) -> str | None:
    """The compute phase in which ``me`` exceeds the others' median most; None without phases."""
    if me.phases is None:
        return None
    best, best_excess = None, 0.0
    for phase in COMPUTE_PHASES:
        index = protocol.PHASES.index(phase)
        mine = me.phases[index]
        theirs = _median_of([other.phases[index] if other.phases else None for other in others])
        if mine is None or theirs is None:
            continue
        if mine - theirs > best_excess:
            best, best_excess = phase, mine - theirs
    return best


def below_half_margin(mine: StepSummary | tuple, others: list[StepSummary] | list[tuple]) -> bool:
    """Whether a flagged rank has recovered (hysteresis: its excess is under half the margin)."""
    if not others:
        return True
    excess, base = _excesses(StepSummary(*mine), [StepSummary(*other) for other in others])
    margins = base["margins"]
    return all(value is None or value < margins[cause] / 2 for cause, value in excess.items())


def _excesses(me: StepSummary, others: list[StepSummary]) -> tuple[dict[str, float | None], dict[str, Any]]:
    """Per cause, how much longer ``me`` takes than the others' median (None: not comparable)."""
    others_step = statistics.median(other.step_time for other in others)
    others_wait = _median_of([other.data_wait for other in others])
    others_compute = _median_of([other.compute_time for other in others])
    margin = max(ABSOLUTE_MARGIN_SECONDS, RELATIVE_MARGIN * others_step)
    compute_margin = margin
    data = None if me.data_wait is None or others_wait is None else me.data_wait - others_wait
    if me.compute_time is not None and others_compute is not None:
        compute: float | None = me.compute_time - others_compute
        compute_margin = max(ABSOLUTE_MARGIN_SECONDS, RELATIVE_MARGIN * others_compute)
    elif me.compute_time is None and others_compute is None:
        compute = me.step_time - others_step  # steps not synchronised: step time is the compute
    else:
        compute = None  # measured on some ranks only: not comparable
    return ({"data": data, "compute": compute},
            {"margins": {"data": margin, "compute": compute_margin}, "others_step_time": others_step, "others_data_wait": others_wait,
             "others_compute_time": others_compute})


def _median_of(values: list[float | None]) -> float | None:
    measured = [value for value in values if value is not None]
    return statistics.median(measured) if measured else None


class StragglerMonitor:
    """Judges each rank against the others on ``tick``, from the shared step windows."""

    def __init__(self, hub, windows: StepWindows, findings: Findings | None = None):
        self.hub = hub
        self.windows = windows
        self.findings = findings if findings is not None else Findings()
        self.flagged: dict[int, dict[str, Any]] = {}

    def tick(self, now: float) -> None:
        if not self.windows.take_changed():
            return
        summaries = {}
        for rank, steps in self.windows.ranks.items():
            row = self.hub.model.ranks.get(rank)
            if row is not None and RankState(row.state).finished:
                continue
            if len(steps.step_times) >= MIN_STEPS:
                summaries[rank] = summarise(steps)
        if len(summaries) < 2:
            return
        for rank, mine in summaries.items():
            others = [value for other, value in summaries.items() if other != rank]
            if rank in self.flagged:
                if below_half_margin(mine, others):
                    self._clear(rank)
                continue
            verdict = straggler_verdict(mine, others)
            if verdict is not None:
                self._flag(rank, mine, verdict, len(self.windows.ranks[rank].step_times))

    def _flag(self, rank: int, mine: StepSummary, verdict: dict[str, Any], window: int) -> None:
        step_time, data_wait, compute, _phases = mine
        others_step, others_wait = verdict["others_step_time"], verdict["others_data_wait"]
        others_compute = verdict["others_compute_time"]
        phase = verdict.get("phase")
        if verdict["cause"] == "data":
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
        record = {"rank": rank, "cause": verdict["cause"], "phase": phase, "step": steps.last_step,
                  "step_time": round(step_time, 6), "data_wait": _rounded(data_wait),
                  "compute_time": _rounded(compute), "others_step_time": round(others_step, 6),
                  "others_data_wait": _rounded(others_wait), "others_compute_time": _rounded(others_compute),
                  "excess": round(verdict["excess"], 6), "window": window}
        self.flagged[rank] = record
        worst = self.findings.stragglers.get(rank)
        if worst is None or record["excess"] > worst["excess"]:
            self.findings.stragglers[rank] = {**record, "message": message}
        self.hub.add_event(EventKind.STRAGGLER, rank, message, active=True, **{k: v for k, v in record.items() if k != "rank"})

    def _clear(self, rank: int) -> None:
        self.flagged.pop(rank, None)
        self.hub.add_event(EventKind.STRAGGLER, rank, f"rank {rank} is no longer a straggler", active=False,
                           step=self.windows.ranks[rank].last_step)


def summarise(steps: RankSteps) -> StepSummary:
    """Medians over a rank's windows; a value measured fewer than ``MIN_STEPS`` times is not measured."""
    measured = list(steps.measured)
    phases = tuple(_window_median([step.phases[index] for step in measured]) for index in range(len(protocol.PHASES)))
    return StepSummary(statistics.median(steps.step_times), phases[0],
                       _window_median([step.compute_time for step in measured]),
                       phases if any(value is not None for value in phases) else None)


def _window_median(values: list[float | None]) -> float | None:
    measured = [value for value in values if value is not None]
    return statistics.median(measured) if len(measured) >= MIN_STEPS else None


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 6)


def _ms(seconds: float | None) -> str:
    return "not measured" if seconds is None else f"{seconds * 1000:.0f} ms"
