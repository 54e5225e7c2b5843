"""Stragglers: the rank that makes every step slower, and whether it waits for data or computes.

With DDP every step ends in an all-reduce, so every rank's *step time* is the
slowest rank's: the fast ranks simply wait inside the collective. Step time alone
therefore cannot name the straggler (pytorch/pytorch#71303, traceopt-ai/traceml#252).
What still differs is where a rank spends its step before the collective: the
workers report, per optimizer step, ``step_time`` and ``data_wait`` (time spent in
the DataLoader iterator). So, over the last ``WINDOW_STEPS`` steps of each rank
(medians: one slow step is not a straggler):

* **waiting for data**: its data wait exceeds the other ranks' median data wait
  by the margin -- the others wait for it in the all-reduce;
* **computing**: its step time exceeds the other ranks' median step time by the
  margin and data wait does not explain it. This shows where steps are not
  synchronised (no DDP, ``no_sync`` gradient accumulation, a rank doing extra
  work between collectives); under DDP a slow *forward/backward* shows up on
  every rank's step time alike, and cannot be told apart from this telemetry.

The margin is ``max(ABSOLUTE_MARGIN_SECONDS, RELATIVE_MARGIN x the others' median
step time)``; a flagged rank is cleared when its excess falls under half of it.

Events (``rank`` is the straggler)::

    straggler {message, active: true, cause: "data"|"compute", step, step_time, data_wait,
               others_step_time, others_data_wait, excess (s per step), window (steps)}
    straggler {message, active: false, step}       # no longer a straggler
"""

from __future__ import annotations

import statistics
from collections import deque
from typing import Any

from rankwatch import _protocol as protocol
from rankwatch._protocol import EventKind, Message, Metrics
from runner.diagnosis.findings import Findings
from runner.hub.observer import HubObserver
from runner.state import RankState

WINDOW_STEPS = 10
MIN_STEPS = 5
RELATIVE_MARGIN = 0.15
ABSOLUTE_MARGIN_SECONDS = 0.010


def straggler_verdict(mine: tuple[float, float], others: list[tuple[float, float]]) -> dict[str, Any] | None:
    """``mine`` and each of ``others`` is (median step time, median data wait) in seconds.

    Returns {cause, excess, margin, others_step_time, others_data_wait} when this rank
    is a straggler, else None.
    """
    if not others:
        return None
    step_time, data_wait = mine
    others_step = statistics.median(o[0] for o in others)
    others_wait = statistics.median(o[1] for o in others)
    margin = max(ABSOLUTE_MARGIN_SECONDS, RELATIVE_MARGIN * others_step)
    data_excess = data_wait - others_wait
    step_excess = step_time - others_step
    base = {"margin": margin, "others_step_time": others_step, "others_data_wait": others_wait}
    if data_excess >= margin:
        return {"cause": "data", "excess": data_excess, **base}
    if step_excess >= margin:
        return {"cause": "compute", "excess": step_excess, **base}
    return None


def below_half_margin(mine: tuple[float, float], others: list[tuple[float, float]]) -> bool:
    """Whether a flagged rank has recovered (hysteresis: its excess is under half the margin)."""
    if not others:
        return True
    others_step = statistics.median(o[0] for o in others)
    others_wait = statistics.median(o[1] for o in others)
    half = max(ABSOLUTE_MARGIN_SECONDS, RELATIVE_MARGIN * others_step) / 2
    return mine[1] - others_wait < half and mine[0] - others_step < half


class StragglerMonitor(HubObserver):
    """Collects per-step (step_time, data_wait) from the workers' metrics; judges on ``tick``."""

    def __init__(self, hub, findings: Findings | None = None):
        self.hub = hub
        self.findings = findings if findings is not None else Findings()
        self.samples: dict[int, deque] = {}
        self.last_step: dict[int, int] = {}
        self.flagged: dict[int, dict[str, Any]] = {}
        self._new_data = False

    def on_message(self, message: Message) -> None:
        """Hub observer: pairs each step's step_time and data_wait (both measured by the bootstrap)."""
        if not isinstance(message, Metrics):
            return
        steps: dict[int, dict[str, float]] = {}
        for _rank, _t, step, name, value, source in message.records:
            if source != protocol.SOURCE_AUTO or name not in (protocol.STEP_TIME, protocol.DATA_WAIT):
                continue
            if step is not None and value is not None:
                steps.setdefault(step, {})[name] = float(value)
        rank = message.rank
        for step in sorted(steps):
            values = steps[step]
            if protocol.STEP_TIME in values and protocol.DATA_WAIT in values:
                self.add_sample(rank, step, values[protocol.STEP_TIME], values[protocol.DATA_WAIT])

    def add_sample(self, rank: int, step: int, step_time: float, data_wait: float) -> None:
        window = self.samples.get(rank)
        if window is None:
            window = self.samples[rank] = deque(maxlen=WINDOW_STEPS)
        window.append((step_time, data_wait))
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
                summaries[rank] = (statistics.median(s for s, _ in window), statistics.median(w for _, w in window))
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

    def _flag(self, rank: int, mine: tuple[float, float], verdict: dict[str, Any], window: int) -> None:
        step_time, data_wait = mine
        others_step, others_wait = verdict["others_step_time"], verdict["others_data_wait"]
        if verdict["cause"] == "data":
            message = (f"rank {rank} is a straggler: it waits for data ({_ms(data_wait)} of its {_ms(step_time)} "
                       f"step in the data loader; the other ranks wait {_ms(others_wait)})")
        else:
            message = (f"rank {rank} is a straggler: it computes longer (step {_ms(step_time)} vs {_ms(others_step)} "
                       f"on the other ranks; data wait {_ms(data_wait)})")
        record = {"rank": rank, "cause": verdict["cause"], "step": self.last_step.get(rank),
                  "step_time": round(step_time, 6), "data_wait": round(data_wait, 6),
                  "others_step_time": round(others_step, 6), "others_data_wait": round(others_wait, 6),
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


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms"
