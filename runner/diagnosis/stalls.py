"""Hang detection: a rank that makes no step progress for too long is flagged ``stalled``.

Progress is the rank's step count (``RankRow.step``, from its metrics and
heartbeats); ``RankRow.last_progress`` is when it last went up (or when the rank
said hello). Work without steps is progress too: a rank evaluating, writing a
checkpoint or compiling says so in its heartbeats (``working``, judged in the rank
by ``rankwatch._activity``: its training thread computes, a DataLoader gives
batches, or its GPU allocator serves allocations), and ``last_working`` is when
it last did. A rank is stalled when ``now`` minus the later of the two reaches
its threshold:

* ``--stall-timeout S`` / ``telemetry.stall_timeout``: ``S`` seconds;
* ``"auto"``: ``max(AUTO_FLOOR_SECONDS, AUTO_STEP_FACTOR x median of its recent
  step times)`` -- a job with 2 s steps is flagged after 30 s, one with 10 s steps
  after 100 s;
* before a rank's first step (importing torch, loading data, building the model,
  waiting for its peers in ``init_process_group``) the threshold is at least
  ``STARTUP_ALLOWANCE_SECONDS``, whatever was set: startup has no step rhythm to
  judge it by, and a short timeout meant for the training loop would flag every
  slow start. A rank stuck at startup is still flagged, just later.

Without instrumentation there are no steps, so there is no stall detection.

Progress is judged over the time the runner could watch. When the runner itself
was not running -- stopped (SIGSTOP, Ctrl-Z), a suspended machine, an event loop
blocked for seconds -- its ranks went on without it and their messages wait in
the socket; when it runs again, the time it was away must not count as time
without progress. Each tick reads the runner's own clocks (monotonic and wall):
a gap of more than ``BLIND_GAP_SECONDS`` since the previous tick is a *blind*
interval, subtracted from every rank's time without progress, and no rank is
newly flagged for ``REARM_SECONDS`` of watched time after it, while the queued
messages are read.

On a stall: the rank's state becomes ``STALLED``, a ``stalled`` event names the
rank, the seconds without progress and the last step, and -- once per stall
episode (from the first rank stalling until none is) -- every rank's stacks are
captured (``StackCapture``). When the step moves again: ``resumed``.

Events (``EVENT`` in ``rankwatch.protocol``; ``rank`` is the stalled rank)::

    stalled  {message, step, seconds, threshold, threshold_source: "setting"|"auto"|"startup",
              last_progress (time.time()), heartbeat_age (s since its last message, or null)}
    resumed  {message, step, stalled_seconds}
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

from rankwatch.protocol import EventKind
from runner.diagnosis.findings import Findings, StallFinding
from runner.diagnosis.progress import RankProgress
from runner.state import RankState, RunStatus

AUTO_FLOOR_SECONDS = 30.0
AUTO_STEP_FACTOR = 10.0
STARTUP_ALLOWANCE_SECONDS = 180.0
HEARTBEAT_SILENT_SECONDS = 5.0
"""Workers send a heartbeat every second; this much silence means the process itself is stuck."""
BLIND_GAP_SECONDS = 3.0
"""Ticks come every 0.5 s; a longer gap between two means the runner could not watch in between."""
REARM_SECONDS = 3.0
"""After a blind gap, time for the messages the ranks sent meanwhile to be read before judging again."""
MAX_BLIND_INTERVALS = 100
PROGRESS_WINDOW_SECONDS = 5.0
PROGRESS_STEP_FACTOR = 3.0
PROGRESS_THRESHOLD_FRACTION = 0.5
"""A rank whose step moved within max(5 s, 3 step times) -- and within half its stall threshold -- is progressing.

The half keeps a clear gap between "progressing" and "stalled": the ranks of a hang stop
within moments of each other, and the first one flagged triggers the capture while the
others are still just under the threshold (a remote rank's last step is also read a
little later, through its node's relay). Nearly as idle as a stalled rank is not
progressing; a rank that really moves is idle for about one step time."""


def last_progress(row) -> float | None:
    """When ``row`` last made progress: its last step, or its last work without steps (wall clock)."""
    stepped, working = row.last_progress, row.last_working
    if working is None or (stepped is not None and stepped >= working):
        return stepped
    return working


class RunnerClock:
    """The runner's own clocks, read at each tick to see whether it could watch since the last one."""

    def read(self) -> tuple[float, float]:
        """(monotonic, wall) seconds."""
        return time.monotonic(), time.time()


def stall_threshold(setting: float | None, recent_step_times: list[float], has_stepped: bool) -> tuple[float, str]:
    """Seconds without progress before a rank counts as stalled, and where that number comes from."""
    if setting is not None:
        threshold, source = float(setting), "setting"
    else:
        median = statistics.median(recent_step_times) if recent_step_times else 0.0
        threshold, source = max(AUTO_FLOOR_SECONDS, AUTO_STEP_FACTOR * median), "auto"
    if not has_stepped and threshold < STARTUP_ALLOWANCE_SECONDS:
        return STARTUP_ALLOWANCE_SECONDS, "startup"
    return threshold, source


@dataclass
class _Stall:
    since: float
    """``last_progress`` when the stall was flagged: progress after it means resumed."""
    flagged: float
    step: int | None
    record: StallFinding


class StallMonitor:
    def __init__(self, hub, stall_timeout: float | None, capture=None, findings: Findings | None = None,
                 enabled: bool = True, clock: RunnerClock | None = None):
        self.hub = hub
        self.stall_timeout = stall_timeout
        self.capture = capture
        self.findings = findings if findings is not None else Findings()
        self.enabled = enabled
        self.clock = clock or RunnerClock()
        self._stalled: dict[int, _Stall] = {}
        self._episode_captured = False
        self._previous: tuple[float, float, float] | None = None
        """(now, monotonic, wall) of the previous tick."""
        self._blind: list[tuple[float, float]] = []
        """Intervals (in ``now``'s time) when the runner could not watch, oldest first."""
        self._judge_after: float = 0.0
        """``now`` before which no rank is newly flagged (after a blind gap)."""

    def idle_seconds(self, row, now: float) -> float | None:
        """Seconds the runner watched ``row`` make no progress (blind intervals left out)."""
        since = last_progress(row)
        if since is None:
            return None
        blind = sum(max(0.0, min(end, now) - max(start, since)) for start, end in self._blind)
        return max(0.0, now - since - blind)

    def progress_of(self, row, now: float) -> RankProgress:
        """How ``row`` moves, for a stack capture (``progressing`` None: no step yet)."""
        stalled = row.rank in self._stalled or row.state == RankState.STALLED.value
        idle = self.idle_seconds(row, now)
        progressing: bool | None
        if stalled:
            progressing = False
        elif row.step is None or idle is None:
            progressing = None
        else:
            median = statistics.median(row.recent_step_times) if row.recent_step_times else 0.0
            threshold, _source = stall_threshold(self.stall_timeout, row.recent_step_times, True)
            window = max(PROGRESS_WINDOW_SECONDS, PROGRESS_STEP_FACTOR * median)
            progressing = idle < min(PROGRESS_THRESHOLD_FRACTION * threshold, window)
        return RankProgress(step=row.step, idle_seconds=None if idle is None else round(idle, 1), stalled=stalled,
                            progressing=progressing)

    def _note_gap(self, now: float) -> bool:
        """Record a blind interval when the runner's clocks jumped since the last tick; True while re-arming."""
        monotonic, wall = self.clock.read()
        if self._previous is not None:
            previous_now, previous_monotonic, previous_wall = self._previous
            if monotonic - previous_monotonic > BLIND_GAP_SECONDS or wall - previous_wall > BLIND_GAP_SECONDS:
                self._blind.append((previous_now, now))
                del self._blind[:-MAX_BLIND_INTERVALS]
                self._judge_after = now + REARM_SECONDS
        self._previous = (now, monotonic, wall)
        return now < self._judge_after

    def tick(self, now: float) -> None:
        rearming = self._note_gap(now)
        if not self.enabled or not self._run_is_running():
            return
        newly_stalled = False
        for row in list(self.hub.model.ranks.values()):
            state = RankState(row.state)
            stall = self._stalled.get(row.rank)
            if state.finished or state == RankState.WAITING:
                self._stalled.pop(row.rank, None)
                continue
            if stall is not None:
                progress = last_progress(row)
                if progress is not None and progress > stall.since:
                    self._resume(row, stall, now)
                continue
            idle = self.idle_seconds(row, now)
            if idle is None or rearming:
                continue
            threshold, source = stall_threshold(self.stall_timeout, row.recent_step_times, row.step is not None)
            if idle >= threshold:
                self._flag(row, idle, threshold, source, now)
                newly_stalled = True
        if not self._stalled:
            self._episode_captured = False
        elif newly_stalled and not self._episode_captured and self.capture is not None:
            self._episode_captured = True
            self.capture.capture_stacks(reason="stalled")

    def _run_is_running(self) -> bool:
        run = self.hub.run_row
        return run is None or run.status in (None, RunStatus.RUNNING.value)

    def _flag(self, row, idle: float, threshold: float, source: str, now: float) -> None:
        since = last_progress(row) or now - idle  # not None: ``idle`` was measured from it
        heartbeat_age = now - row.last_seen if row.last_seen else None
        where = f"at step {row.step}" if row.step is not None else "before its first step"
        why = {"setting": "the stall timeout", "auto": f"auto: {AUTO_STEP_FACTOR:.0f}x its step time, at least {AUTO_FLOOR_SECONDS:.0f} s",
               "startup": "startup allowance"}[source]
        message = f"rank {row.rank} stalled {where}: no progress for {idle:.0f} s (threshold {threshold:.0f} s, {why})"
        if heartbeat_age is not None and heartbeat_age >= HEARTBEAT_SILENT_SECONDS:
            message += f"; no heartbeat for {heartbeat_age:.0f} s either (the process itself is stuck)"
        self.hub.model.set_state(row.rank, RankState.STALLED)
        self.hub.add_event(EventKind.STALLED, row.rank, message, step=row.step, seconds=round(idle, 2),
                           threshold=threshold, threshold_source=source, last_progress=since,
                           heartbeat_age=None if heartbeat_age is None else round(heartbeat_age, 2))
        record = StallFinding(rank=row.rank, step=row.step, since=since, seconds=round(idle, 2), threshold=threshold)
        self.findings.add_stall(record)
        self._stalled[row.rank] = _Stall(since=since, flagged=now, step=row.step, record=record)

    def _resume(self, row, stall: _Stall, now: float) -> None:
        del self._stalled[row.rank]
        stalled_for = (last_progress(row) or now) - stall.since
        if row.state == RankState.STALLED.value:
            self.hub.model.set_state(row.rank, RankState.RUNNING)
        stall.record.resumed_after = round(stalled_for, 2)
        stepped = row.last_progress is not None and row.last_progress > stall.since
        how = f"resumed at step {row.step}" if stepped else f"is working again (still at step {row.step})"
        self.hub.add_event(EventKind.RESUMED, row.rank, f"rank {row.rank} {how} after {stalled_for:.0f} s",
                           step=row.step, stalled_seconds=round(stalled_for, 2))

    @property
    def stalled_ranks(self) -> list[int]:
        return sorted(self._stalled)
