"""Stragglers: the rank that makes every step slower, and whether it waits for data or computes.

With DDP every step ends in an all-reduce, so every rank's *step time* is the
slowest rank's: the fast ranks simply wait inside the collective. Step time alone
therefore cannot name the straggler (pytorch/pytorch#71303, traceopt-ai/traceml#252).
What still differs is where a rank spends its step. The workers report, per
optimizer step, ``step_time``, ``data_wait`` (time in the DataLoader iterator,
absent without a DataLoader) and ``compute_time`` (the step minus its waits in
collectives and for data, absent without a process group; ``rankwatch._comm_timing``).
So, over the last ``WINDOW_STEPS`` steps of each rank (medians: one slow step is
not a straggler; compute time over its last ``WINDOW_STEPS`` values, as steps
faster than 10 ms have it only every few steps):

* **waiting for data**: its data wait exceeds the other ranks' median data wait
  by the margin -- the others wait for it in the all-reduce;
* **computing**: its compute time exceeds the other ranks' median compute time
  by the margin: the others wait for it in the collectives while every step
  time is equal. Without a compute time (no process group: the steps are not
  synchronised), its step time exceeding the others' by the margin, when data
  wait does not explain it.

A value that was not measured is never read as 0: data wait is compared only
among ranks that measured it (``MIN_STEPS`` of the window), compute time likewise.

The margin is ``max(ABSOLUTE_MARGIN_SECONDS, RELATIVE_MARGIN x the others' median)``
of the quantity compared for compute time, of the step time otherwise (a step
stretched by waits, for a CPU included, must not hide a rank computing twice as
long); a flagged rank is cleared when its excess falls under half of it.

Events (``rank`` is the straggler)::

    straggler {message, active: true, cause: "data"|"compute", step, step_time, data_wait,
               compute_time, others_step_time, others_data_wait, others_compute_time,
               excess (s per step), window (steps)}      # data_wait, compute_time: null if not measured
    straggler {message, active: false, step}       # no longer a straggler
"""

from __future__ import annotations

import statistics
from collections import deque
from typing import Any, NamedTuple

from rankwatch import _protocol as protocol
from rankwatch._protocol import EventKind, Message, Metrics
from runner.diagnosis.findings import Findings
from runner.hub.observer import HubObserver
from runner.state import RankState

WINDOW_STEPS = 10
MIN_STEPS = 5
RELATIVE_MARGIN = 0.15
ABSOLUTE_MARGIN_SECONDS = 0.010


class StepSummary(NamedTuple):
    """One rank's medians over its window, in seconds; None where not measured."""

    step_time: float
    data_wait: float | None = None
    compute_time: float | None = None


def straggler_verdict(mine: StepSummary | tuple, others: list[StepSummary] | list[tuple]) -> dict[str, Any] | None:
    """Whether the rank summarised by ``mine`` holds the ``others`` up (module docstring).

    Returns {cause, excess, margin, others_step_time, others_data_wait,
    others_compute_time} when it is a straggler, else None.
    """
    if not others:
        return None
    me = StepSummary(*mine)
    excess, base = _excesses(me, [StepSummary(*other) for other in others])
    margins = base.pop("margins")
    if excess["data"] is not None and excess["data"] >= margins["data"]:
        return {"cause": "data", "excess": excess["data"], "margin": margins["data"], **base}
    if excess["compute"] is not None and excess["compute"] >= margins["compute"]:
        return {"cause": "compute", "excess": excess["compute"], "margin": margins["compute"], **base}
    return None


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


class StragglerMonitor(HubObserver):
    """Collects per-step (step_time, data_wait) from the workers' metrics; judges on ``tick``."""

    def __init__(self, hub, findings: Findings | None = None):
        self.hub = hub
        self.findings = findings if findings is not None else Findings()
        self.samples: dict[int, deque] = {}
        self.computes: dict[int, deque] = {}
        """Per rank, its last ``WINDOW_STEPS`` compute times: a window of their own, as fast steps time
        only every few steps (``rankwatch._comm_timing.split_every``)."""
        self.last_step: dict[int, int] = {}
        self.flagged: dict[int, dict[str, Any]] = {}
        self._new_data = False

    def on_message(self, message: Message) -> None:
        """Hub observer: gathers each step's step_time, data_wait and compute_time (measured by the bootstrap)."""
        if not isinstance(message, Metrics):
            return
        steps: dict[int, dict[str, float]] = {}
        for _rank, _t, step, name, value, source in message.records:
            if source != protocol.SOURCE_AUTO or name not in _JUDGED:
                continue
            if step is not None and value is not None:
                steps.setdefault(step, {})[name] = float(value)
        rank = message.rank
        for step in sorted(steps):
            values = steps[step]
            if protocol.STEP_TIME in values:
                self.add_sample(rank, step, values[protocol.STEP_TIME], values.get(protocol.DATA_WAIT),
                                values.get(protocol.COMPUTE_TIME))

    def add_sample(self, rank: int, step: int, step_time: float, data_wait: float | None = None,
                   compute_time: float | None = None) -> None:
        window = self.samples.get(rank)
        if window is None:
            window = self.samples[rank] = deque(maxlen=WINDOW_STEPS)
            self.computes[rank] = deque(maxlen=WINDOW_STEPS)
        window.append(StepSummary(step_time, data_wait))
        if compute_time is not None:
            self.computes[rank].append(compute_time)
        self.last_step[rank] = step
        self._new_data = True

    def tick(self, now: float) -> None:
        if not self._new_data:
            return
        self._new_data = False
        summaries = {}
        for rank, window in self.samples.items():
            row = self.hub.model.ranks.get(rank)
            if row is not None and RankState(row.state).finished:
                continue
            if len(window) >= MIN_STEPS:
                summaries[rank] = summarise(window, self.computes[rank])
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
                self._flag(rank, mine, verdict, len(self.samples[rank]))

    def _flag(self, rank: int, mine: StepSummary, verdict: dict[str, Any], window: int) -> None:
        step_time, data_wait, compute = mine
        others_step, others_wait = verdict["others_step_time"], verdict["others_data_wait"]
        others_compute = verdict["others_compute_time"]
        if verdict["cause"] == "data":
            message = (f"rank {rank} is a straggler: it waits for data ({_ms(data_wait)} of its {_ms(step_time)} "
                       f"step in the data loader; the other ranks wait {_ms(others_wait)})")
        elif compute is not None and others_compute is not None:
            message = (f"rank {rank} is a straggler: it computes longer ({_ms(compute)} of its {_ms(step_time)} "
                       f"step vs {_ms(others_compute)} on the other ranks, which wait for it in collectives)")
        else:
            message = (f"rank {rank} is a straggler: it computes longer (step {_ms(step_time)} vs {_ms(others_step)} "
                       f"on the other ranks; data wait {_ms(data_wait)})")
        record = {"rank": rank, "cause": verdict["cause"], "step": self.last_step.get(rank),
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
                           step=self.last_step.get(rank))


_JUDGED = frozenset({protocol.STEP_TIME, protocol.DATA_WAIT, protocol.COMPUTE_TIME})


def summarise(window: deque[StepSummary] | list[StepSummary], computes: deque[float] | list[float]) -> StepSummary:
    """Medians over a rank's window and its compute times; a value measured fewer than ``MIN_STEPS``
    times is not measured."""
    return StepSummary(statistics.median(sample.step_time for sample in window),
                       _window_median([sample.data_wait for sample in window]),
                       _window_median(list(computes)))


def _window_median(values: list[float | None]) -> float | None:
    measured = [value for value in values if value is not None]
    return statistics.median(measured) if len(measured) >= MIN_STEPS else None


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 6)


def _ms(seconds: float | None) -> str:
    return "not measured" if seconds is None else f"{seconds * 1000:.0f} ms"
