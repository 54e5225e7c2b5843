"""Printed metrics (``--parse-stdout``) at the step the rank was at when it printed them.

A rank's output reaches the runner through a pipe at once; its measured steps come in
its reporter's batches, up to the reporter's flush latency later (40 ms, longer while
nobody watches live). Reading a printed ``loss`` against the newest step the hub had
heard of when the line came put the point at a stale step, and two prints a few steps
apart at the same step, where the second was dropped as a repeat (a Hugging Face Trainer
logging every 3 steps lost a third of its curve that way).

So a line is read once the rank's telemetry has caught up with the moment it was
printed, and its step is the one the rank was at then:

* **a step timeline per rank**: ``(t, step)`` each time a record of the rank shows a
  newer step (records carry the time they were made, from the same host clock as the
  line's; the rank's reporter sends them in the order they were made);
* a line printed at ``t`` waits until the rank has **sent a record made after** ``t``, or
  a **heartbeat made after** ``t`` that names no step newer than the timeline's (so no
  step change is still on its way), or the rank has **ended** (its ``exit`` is its last
  message; a lost connection sends nothing more), or **``HOLD_SECONDS``** passed (then
  the timeline as it stands: a reporter that cannot send loses its steps anyway);
* its step is the timeline's last step made at or before ``t`` (none before the rank's
  first step: ``StdoutMetrics`` then counts points).

Lines of one rank are read in the order they were printed. Without zero-code
instrumentation no rank ever reports a step, and lines are read at once.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from rankwatch import protocol
from rankwatch.protocol import LogLine, Message
from runner.hub.observer import HubObserver
from runner.telemetry.stdout_parser import StdoutMetrics

HOLD_SECONDS = 4.0
"""The longest a printed line waits for its rank's telemetry: above the slowest reporter
pace (``MAX_FLUSH_LATENCY``, 2 s) plus a heartbeat period (1 s)."""
TIMELINE_SECONDS = 60.0
"""Step changes older than this (before the newest) are forgotten: no line waits that long."""

Point = tuple[int, float, int, str, float]
"""``(rank, t, step, name, value)``: one parsed point, ready for the hub."""


@dataclass
class _RankSteps:
    times: list[float] = field(default_factory=list)
    steps: list[int] = field(default_factory=list)
    heard_until: float = float("-inf")
    """Every step change the rank made up to this time is in the timeline."""
    ended: bool = False
    waiting: deque[tuple[float, str]] = field(default_factory=deque)
    """Lines ``(t, text)`` not read yet, oldest first."""

    @property
    def newest_step(self) -> int | None:
        return self.steps[-1] if self.steps else None

    def note_step(self, t: float, step: int) -> None:
        if self.steps and step <= self.steps[-1]:
            return
        self.times.append(t)
        self.steps.append(step)
        if len(self.times) > 1024 and self.times[1] < t - TIMELINE_SECONDS:
            keep = max(1, bisect_right(self.times, t - TIMELINE_SECONDS)) - 1
            del self.times[:keep], self.steps[:keep]

    def step_at(self, t: float) -> int | None:
        index = bisect_right(self.times, t) - 1
        return self.steps[index] if index >= 0 else None


class PrintedMetrics(HubObserver):
    """Parsed points from every rank's printed lines, each at the step of the moment it was printed.

    A hub observer (it sees the lines and the step records as the hub takes them in);
    ``tick(now)`` reads lines that waited ``HOLD_SECONDS`` (the run calls it with its
    monitors), ``finish()`` reads every line left (the end of the run)."""

    def __init__(self, parser: StdoutMetrics, emit: Callable[[list[Point]], None],
                 ranks_report_steps: bool = True) -> None:
        """``emit`` takes the points of one line. ``ranks_report_steps``: False without zero-code
        instrumentation (nothing to wait for: every line is read at once)."""
        self.parser = parser
        self.emit = emit
        self.wait_for_steps = ranks_report_steps
        self._ranks: dict[int, _RankSteps] = {}

    def _rank(self, rank: int) -> _RankSteps:
        found = self._ranks.get(rank)
        if found is None:
            found = self._ranks[rank] = _RankSteps()
        return found

    # ---- what the hub tells it -----------------------------------------------------------

    def on_log(self, line: LogLine) -> None:
        rank = line.rank
        if rank is None:
            return
        steps = self._rank(rank)
        steps.waiting.append((line.t, line.line))
        if not self.wait_for_steps or steps.ended:
            self._read(rank, steps, until=float("inf"))
        else:
            self._read(rank, steps, until=steps.heard_until)

    def on_message(self, message: Message) -> None:
        if isinstance(message, protocol.Metrics):
            self._on_records(message.rank, message.records)
        elif isinstance(message, protocol.Heartbeat):
            steps = self._rank(message.rank)
            if message.t is not None and message.step == steps.newest_step:
                self._heard(message.rank, steps, message.t)
        elif isinstance(message, protocol.Exit):
            self._ended(message.rank)

    def on_worker_lost(self, rank: int, t: float) -> None:
        self._ended(rank)

    def on_hello(self, hello: protocol.Hello) -> None:
        """A restarted rank (``--max-restarts``) counts its steps afresh."""
        steps = self._ranks.get(hello.rank)
        if steps is not None and steps.ended:
            self._read(hello.rank, steps, until=float("inf"))
            self._ranks[hello.rank] = _RankSteps()

    # ---- reading -------------------------------------------------------------------------

    def tick(self, now: float) -> None:
        """Read the lines that waited ``HOLD_SECONDS`` for their rank's telemetry."""
        for rank, steps in self._ranks.items():
            if steps.waiting and steps.waiting[0][0] < now - HOLD_SECONDS:
                self._read(rank, steps, until=now - HOLD_SECONDS)

    def finish(self) -> None:
        """The run ended: read every line still waiting; from now on lines are read at once."""
        self.wait_for_steps = False
        for rank, steps in self._ranks.items():
            self._read(rank, steps, until=float("inf"))

    def _on_records(self, rank: int, records: list[protocol.MetricRow]) -> None:
        if not records:
            return
        steps = self._rank(rank)
        newest = steps.newest_step
        made_until = steps.heard_until
        for record in records:
            t, step = record[1], record[2]
            if step is not None and (newest is None or step > newest):
                steps.note_step(t, step)
                newest = step
            if t > made_until:
                made_until = t
        self._heard(rank, steps, made_until)

    def _heard(self, rank: int, steps: _RankSteps, until: float) -> None:
        if until > steps.heard_until:
            steps.heard_until = until
            if steps.waiting and steps.waiting[0][0] <= until:
                self._read(rank, steps, until)

    def _ended(self, rank: int) -> None:
        steps = self._rank(rank)
        steps.ended = True
        self._read(rank, steps, until=float("inf"))

    def _read(self, rank: int, steps: _RankSteps, until: float) -> None:
        """Read the waiting lines printed up to ``until``, oldest first."""
        waiting = steps.waiting
        while waiting and waiting[0][0] <= until:
            t, text = waiting.popleft()
            points = self.parser.points(rank, text, steps.step_at(t))
            if points:
                self.emit([(rank, t, step, name, value) for step, name, value in points])
