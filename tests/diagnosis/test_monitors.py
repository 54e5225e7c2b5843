"""The live monitors against the real LiveModel: stalls, stragglers, parameter consistency."""

from __future__ import annotations

import time

import pytest

from rankwatch import protocol
from runner.diagnosis.consistency import ConsistencyMonitor, compare_digests
from runner.diagnosis.findings import Findings
from runner.diagnosis.progress import RankProgress
from runner.diagnosis.stalls import (
    AUTO_FLOOR_SECONDS,
    REARM_SECONDS,
    STARTUP_ALLOWANCE_SECONDS,
    RunnerClock,
    StallMonitor,
    stall_threshold,
)
from runner.diagnosis.step_windows import StepWindows
from runner.diagnosis.stragglers import (
    HOLD_SECONDS,
    WINDOW,
    StepSummary,
    StragglerMonitor,
    straggler_verdict,
)
from runner.rows import RunInfo
from runner.state import RankState
from tests.diagnosis.fakes import FakeHub

# ---- stall thresholds -------------------------------------------------------------------


def test_the_setting_is_the_threshold_once_a_rank_has_stepped():
    assert stall_threshold(5.0, [0.1] * 10, has_stepped=True) == (5.0, "setting")


def test_auto_is_ten_step_times_with_a_floor():
    assert stall_threshold(None, [0.2] * 10, has_stepped=True) == (AUTO_FLOOR_SECONDS, "auto")
    assert stall_threshold(None, [1.0, 9.0, 10.0, 11.0, 500.0], has_stepped=True) == (100.0, "auto")


def test_before_the_first_step_startup_gets_a_generous_allowance():
    assert stall_threshold(5.0, [], has_stepped=False) == (STARTUP_ALLOWANCE_SECONDS, "startup")
    assert stall_threshold(None, [], has_stepped=False) == (STARTUP_ALLOWANCE_SECONDS, "startup")
    assert stall_threshold(600.0, [], has_stepped=False) == (600.0, "setting")


# ---- the stall monitor ------------------------------------------------------------------


class FakeCapture:
    def __init__(self):
        self.reasons = []

    def capture_stacks(self, reason: str) -> bool:
        self.reasons.append(reason)
        return True


def stepping_hub(ranks: int = 2) -> FakeHub:
    hub = FakeHub()
    for rank in range(ranks):
        hub.hello(rank, pid=1000 + rank)
        step(hub, rank, 0)
    return hub


def step(hub: FakeHub, rank: int, number: int, when: float | None = None) -> None:
    hub.model.on_metric(rank, time.time(), number, protocol.STEP_TIME, 0.1, protocol.SOURCE_AUTO)
    if when is not None:
        hub.model.ranks[rank].last_progress = when


def test_a_rank_without_progress_is_flagged_once_with_its_step_and_stacks_are_captured_once():
    hub, capture, findings = stepping_hub(3), FakeCapture(), Findings()
    monitor = StallMonitor(hub, 5.0, capture=capture, findings=findings)
    now = time.time()
    for rank in range(3):
        step(hub, rank, 7, when=now - (6.0 if rank < 2 else 1.0))  # rank 2 is still fine
    monitor.tick(now)
    stalled = hub.of_kind("stalled")
    assert [e["rank"] for e in stalled] == [0, 1]
    event = stalled[0]
    assert event["step"] == 7 and event["threshold"] == 5.0 and event["threshold_source"] == "setting"
    assert 5.9 <= event["seconds"] <= 6.1
    assert event["message"].startswith("rank 0 stalled at step 7: no progress for 6 s (threshold 5 s")
    assert hub.model.ranks[0].state == RankState.STALLED.value
    assert hub.model.ranks[2].state == RankState.RUNNING.value
    assert capture.reasons == ["stalled"]
    monitor.tick(now + 1.0)  # rank 2 stalls too: same episode, no second capture, no repeated events
    assert [e["rank"] for e in hub.of_kind("stalled")] == [0, 1]
    monitor.tick(now + 4.1)
    assert [e["rank"] for e in hub.of_kind("stalled")] == [0, 1, 2] and capture.reasons == ["stalled"]
    assert [s.rank for s in findings.stalls] == [0, 1, 2]


def test_progress_after_a_stall_resumes_the_rank_and_a_new_episode_captures_again():
    hub, capture = stepping_hub(1), FakeCapture()
    monitor = StallMonitor(hub, 5.0, capture=capture)
    now = time.time()
    step(hub, 0, 3, when=now - 10)
    monitor.tick(now)
    step(hub, 0, 4)  # the model flips STALLED back to RUNNING on progress
    monitor.tick(now + 0.5)
    [resumed] = hub.of_kind("resumed")
    assert resumed["rank"] == 0 and resumed["step"] == 4 and resumed["stalled_seconds"] >= 10
    resumed_after = monitor.findings.stalls[0].resumed_after
    assert resumed_after is not None and resumed_after >= 10
    step(hub, 0, 5, when=now - 20)
    hub.model.ranks[0].last_progress = now - 6  # no progress again after step 5
    monitor.tick(now + 1)
    assert len(hub.of_kind("stalled")) == 2 and capture.reasons == ["stalled", "stalled"]


def test_a_rank_that_works_without_steps_is_not_stalled_until_its_work_stops():
    """Evaluation after the last step (PyTorch's word language model example: over a minute) is not a hang."""
    hub, capture = stepping_hub(1), FakeCapture()
    monitor = StallMonitor(hub, 5.0, capture=capture)
    now = time.time()
    step(hub, 0, 310, when=now - 60)
    row = hub.model.ranks[0]
    hub.model.on_heartbeat(protocol.Heartbeat(0, now, 310, 0, 0, working=True))  # "working" since its last step
    assert row.working_since == row.last_progress == pytest.approx(now - 60)  # the rank table shows it
    monitor.tick(time.time())
    assert hub.of_kind("stalled") == [] and capture.reasons == []
    hub.model.on_heartbeat(protocol.Heartbeat(0, now, 310, 0, 0, working=False))  # blocked: no newer work
    assert row.working_since is None
    hub.model.on_heartbeat(protocol.Heartbeat(0, now, 310, 0, 0, working=None))
    monitor.tick(time.time() + 4.0)
    assert hub.of_kind("stalled") == []  # 4 s since its last work: under the 5 s threshold
    monitor.tick(time.time() + 6.0)
    [stalled] = hub.of_kind("stalled")
    assert stalled["message"].startswith("rank 0 stalled at step 310: no progress for 6 s")
    hub.model.on_heartbeat(protocol.Heartbeat(0, now, 310, 0, 0, working=True))  # works again, no step yet
    monitor.tick(time.time() + 6.5)
    [resumed] = hub.of_kind("resumed")
    assert resumed["message"].startswith("rank 0 is working again (still at step 310) after ")
    assert hub.model.ranks[0].state == RankState.RUNNING.value
    assert row.working_since is not None
    step(hub, 0, 311)  # a step again: working with steps, nothing to say
    assert row.working_since is None


def test_a_silent_heartbeat_is_mentioned():
    hub = stepping_hub(1)
    monitor = StallMonitor(hub, 5.0)
    now = time.time()
    step(hub, 0, 2, when=now - 30)
    hub.model.ranks[0].last_seen = now - 30
    monitor.tick(now)
    [event] = hub.of_kind("stalled")
    assert event["heartbeat_age"] >= 29 and "no heartbeat for 30 s" in event["message"]


def test_finished_ranks_and_stopping_runs_are_not_flagged():
    hub = stepping_hub(2)
    monitor = StallMonitor(hub, 5.0)
    now = time.time()
    step(hub, 0, 1, when=now - 60)
    hub.model.on_exit(0, 0, RankState.EXITED)
    monitor.tick(now)
    assert hub.of_kind("stalled") == []
    step(hub, 1, 1, when=now - 60)
    hub.run_row = RunInfo(status="stopping")
    monitor.tick(now)
    assert hub.of_kind("stalled") == []


def test_a_rank_that_never_stepped_gets_the_startup_allowance():
    hub = FakeHub()
    hub.hello(0, pid=10)
    monitor = StallMonitor(hub, 5.0)
    now = time.time()
    hub.model.ranks[0].last_progress = now - 60
    monitor.tick(now)
    assert hub.of_kind("stalled") == []
    hub.model.ranks[0].last_progress = now - STARTUP_ALLOWANCE_SECONDS - 1
    monitor.tick(now)
    [event] = hub.of_kind("stalled")
    assert event["threshold_source"] == "startup" and "before its first step" in event["message"]


class PausableClock(RunnerClock):
    """The runner's clocks, with a pause added: what SIGSTOP/SIGCONT (or a suspended laptop) looks like."""

    def __init__(self):
        self.paused = 0.0

    def read(self) -> tuple[float, float]:
        monotonic, wall = super().read()
        return monotonic + self.paused, wall + self.paused

    def pause(self, seconds: float) -> None:
        self.paused += seconds


def test_time_the_runner_was_paused_is_not_time_without_progress():
    hub, clock = stepping_hub(2), PausableClock()
    monitor = StallMonitor(hub, 5.0, clock=clock)
    now = time.time()
    for rank in range(2):
        step(hub, rank, 3, when=now - 1.0)
    monitor.tick(now)
    clock.pause(30.0)  # the runner was stopped for 30 s; the ranks went on, their messages are not read yet
    monitor.tick(now + 30.5)
    assert hub.of_kind("stalled") == []
    assert monitor.idle_seconds(hub.model.ranks[0], now + 30.5) == pytest.approx(1.0)  # the gap is left out
    step(hub, 0, 40, when=now + 30.8)  # the queued messages are read: rank 0 progressed, rank 1 did not
    monitor.tick(now + 31.0)
    assert now + 30.5 + REARM_SECONDS < now + 35.0
    monitor.tick(now + 35.0)
    flagged = hub.of_kind("stalled")
    assert [event["rank"] for event in flagged] == [1]  # watched: 1 s before the pause, 4.5 s after
    assert flagged[0]["seconds"] == pytest.approx(5.5)


def test_a_rank_stuck_before_the_pause_is_still_flagged_once_the_runner_watches_again():
    hub, clock = stepping_hub(1), PausableClock()
    monitor = StallMonitor(hub, 5.0, clock=clock)
    now = time.time()
    step(hub, 0, 3, when=now - 4.0)
    monitor.tick(now)
    clock.pause(60.0)
    monitor.tick(now + 60.0)
    monitor.tick(now + 60.5)  # re-arming: the messages sent meanwhile are being read
    assert hub.of_kind("stalled") == []
    monitor.tick(now + 60.0 + REARM_SECONDS + 0.5)
    [event] = hub.of_kind("stalled")
    assert event["rank"] == 0 and event["seconds"] >= 5.0


def _two_ranks_at_step_9(idle_0: float, idle_1: float) -> tuple[FakeHub, StallMonitor, float]:
    """Two ranks whose step 9 ended ``idle_0`` and ``idle_1`` seconds ago; a 5 s monitor has ticked."""
    hub = stepping_hub(2)
    monitor = StallMonitor(hub, 5.0)
    now = time.time()
    step(hub, 0, 9, when=now - idle_0)
    step(hub, 1, 9, when=now - idle_1)
    monitor.tick(now)
    return hub, monitor, now


def test_progress_of_a_rank_for_a_stack_capture():
    hub, monitor, now = _two_ranks_at_step_9(0.2, 8.0)
    moving, stuck = (monitor.progress_of(hub.model.ranks[rank], now) for rank in (0, 1))
    assert moving == RankProgress(step=9, idle_seconds=0.2, stalled=False, progressing=True)
    assert stuck.stalled and stuck.progressing is False
    fresh = FakeHub()
    fresh.hello(0, pid=5)
    assert StallMonitor(fresh, 5.0).progress_of(fresh.model.ranks[0], now).progressing is None  # no step yet


def test_a_rank_that_stopped_a_moment_after_the_stalled_one_is_not_called_progressing():
    """The ranks of a hang stop together; the first one flagged starts the capture while the
    other is just under the threshold (seen: a remote rank's last step read 0.4 s later through
    its node's relay was called "progressing", and the hang's culprit went unnamed)."""
    hub, monitor, now = _two_ranks_at_step_9(5.1, 4.7)
    assert [event["rank"] for event in hub.of_kind("stalled")] == [0]
    late = monitor.progress_of(hub.model.ranks[1], now)
    assert late.stalled is False and late.progressing is False
    step(hub, 1, 10, when=now - 0.3)  # a rank that really moves is idle for about a step
    assert monitor.progress_of(hub.model.ranks[1], now).progressing is True


# ---- stragglers -------------------------------------------------------------------------


def step_message(rank: int, number: int, step_time: float, compute: float | None = None,
                 data_wait: float | None = None, timed: bool = True, cpu_wait: float | None = None) -> protocol.Metrics:
    """One step as the bootstrap reports it, a step row: its phases on the CPU clock when ``timed``, the
    compute in ``forward``, a data phase only where a DataLoader was waited for, the rest of the step in
    ``comm`` (the others' wait in the all-reduce) when ``compute`` is given, else in ``rest``; ``cpu_wait``
    the run-queue wait (compute time leaves it out, as the hub derives it)."""
    t = time.time()
    phases = None
    if timed:
        if compute is None:
            phases = ["cpu", data_wait, None, None, None, None, None, step_time - (data_wait or 0.0)]
        else:
            phases = ["cpu", data_wait, None, compute + (cpu_wait or 0.0), None,
                      step_time - compute - (cpu_wait or 0.0) - (data_wait or 0.0), None, None]
    row = [t, number, 0.5, step_time, data_wait, 0, cpu_wait, False, phases]
    return protocol.Metrics.from_wire({"type": "metrics", "rank": rank, "items": [row]})


def straggler_monitor(hub, findings: Findings | None = None) -> tuple[StragglerMonitor, StepWindows]:
    windows = StepWindows()
    return StragglerMonitor(hub, windows, findings), windows


def run_steps(monitor: StragglerMonitor, windows: StepWindows, numbers, step_of) -> None:
    """Each step of every rank of the hub (``step_of(rank, number)`` -> its step message), one tick per step."""
    for number in numbers:
        for rank in sorted(monitor.hub.model.ranks):
            windows.on_message(step_of(rank, number))
        monitor.tick(time.time())


def test_under_ddp_the_rank_that_waits_for_data_is_the_straggler_not_the_others():
    """All-reduce evens out step time: only the data phase tells the ranks apart."""
    slow = (0.205, 0.200)
    fast = (0.205, 0.001)
    verdict = straggler_verdict(slow, [fast, fast])
    assert verdict.cause == "data" and verdict.phase == "data" and verdict.excess == pytest.approx(0.199)
    assert straggler_verdict(fast, [slow, fast]) is None


def test_a_rank_whose_steps_take_longer_without_waiting_for_data_computes():
    verdict = straggler_verdict((0.300, 0.002), [(0.200, 0.002), (0.205, 0.001)])
    assert verdict.cause == "compute" and verdict.excess == pytest.approx(0.0975)


def test_small_differences_are_noise():
    assert straggler_verdict((0.105, 0.005), [(0.100, 0.001)]) is None


def test_the_margin_grows_with_the_ranks_own_spread():
    """30 ms more compute beats a steady machine's margin, not one whose steps jump by 20 ms."""
    steady = [0.001] * 8
    jumpy = [0.0, 0.02, 0.005, 0.015, 0.02, 0.0, 0.01, 0.02]
    mine = StepSummary(0.2, None, 0.13, compute_deviations=tuple(steady))
    assert straggler_verdict(mine, [StepSummary(0.2, None, 0.10, compute_deviations=tuple(steady))]).cause == "compute"
    noisy = StepSummary(0.2, None, 0.13, compute_deviations=tuple(jumpy))
    assert straggler_verdict(noisy, [StepSummary(0.2, None, 0.10, compute_deviations=tuple(jumpy))]) is None


def test_a_data_phase_on_a_machine_whose_ranks_wait_for_a_cpu_must_beat_that_wait_too():
    """Half the time outside waits on the run queue: up to half the others' data phase is the machine's."""
    quiet = StepSummary(0.1, 0.030, 0.02, contention=0.0)
    busy = StepSummary(0.1, 0.030, 0.02, contention=0.5)
    assert straggler_verdict(StepSummary(0.1, 0.050, 0.02, contention=0.0), [quiet]).cause == "data"
    assert straggler_verdict(StepSummary(0.1, 0.050, 0.02, contention=0.5), [busy]) is None
    assert straggler_verdict(StepSummary(0.1, 0.080, 0.02, contention=0.5), [busy]).cause == "data"


def test_a_straggler_is_named_once_two_windows_showed_it_and_it_held_and_is_withdrawn_with_an_event():
    """200 ms steps, windows of 6: at step 11 both windows (1-5, 6-11) show rank 1 waiting for data; it still
    does ``HOLD_SECONDS`` (2 steps) later, so it is named at step 13."""
    assert (WINDOW, HOLD_SECONDS) == (6, 0.4)
    hub, findings = stepping_hub(3), Findings()
    monitor, windows = straggler_monitor(hub, findings)

    def slow_data(rank, number):
        return step_message(rank, number, 0.2, 0.015, data_wait=0.18 if rank == 1 and number <= 40 else 0.002)

    run_steps(monitor, windows, range(1, 13), slow_data)
    assert hub.of_kind("straggler") == []  # seen, not yet held
    run_steps(monitor, windows, range(13, 41), slow_data)
    [event] = hub.of_kind("straggler")
    assert event["rank"] == 1 and event["active"] and event["cause"] == "data"
    assert event["step"] == 13 and event["since_step"] == 1 and event["window"] == WINDOW
    assert event["phase"] == "data" and 0 < event["margin"] < event["excess"]
    assert event["data_wait"] == pytest.approx(0.18) and event["others_data_wait"] == pytest.approx(0.002)
    assert "rank 1 is a straggler: it waits for data (180 ms of its 200 ms step" in event["message"]
    assert findings.stragglers[1].cause == "data"
    run_steps(monitor, windows, range(41, 80), slow_data)
    events = hub.of_kind("straggler")
    assert [(e["rank"], e["active"]) for e in events] == [(1, True), (1, False)]
    # both windows are fast again at step 50 (39..44 has 4 fast steps of 6), still at 52: withdrawn,
    # named for steps 1..38
    withdrawn = events[1]
    assert withdrawn["step"] == 52 and withdrawn["held_steps"] == 38
    assert withdrawn["message"] == ("rank 1 is no longer a straggler: since step 39 its excess over the other "
                                    "ranks stayed under half the noise margin")
    monitor.conclude()
    assert findings.stragglers[1].share == pytest.approx(38 / 79, abs=0.001)
    assert findings.stragglers[1].message.endswith("; for 38 of its 79 steps")


def test_steps_that_arrive_in_one_batch_are_judged_as_if_they_had_come_one_by_one():
    """Nobody watches: the workers send every 2 s. 40 steps of 50 ms at once: rank 1, computing three times
    longer since the start, is named in that one evaluation (its windows held 0.4 s earlier too); a rank
    slowed in the last 14 steps only is not (0.4 s earlier its windows did not show it)."""
    hub = stepping_hub(3)
    monitor, windows = straggler_monitor(hub)
    for rank in range(3):
        for number in range(1, 41):
            slow = rank == 1 or (rank == 2 and number > 26)
            windows.on_message(step_message(rank, number, 0.050, 0.030 if slow else 0.010))
    monitor.tick(time.time())
    [event] = hub.of_kind("straggler")
    assert event["rank"] == 1 and event["step"] == 40 and event["cause"] == "compute"


def test_a_rank_slowed_for_a_few_steps_is_never_named():
    """A neighbour's burst: rank 1 waits 150 ms for data for 8 steps (1.6 s), then rank 0 does; nobody is named."""
    hub = stepping_hub(2)
    monitor, windows = straggler_monitor(hub)

    def burst(rank, number):
        slowed = (rank == 1 and 10 <= number < 18) or (rank == 0 and 25 <= number < 33)
        return step_message(rank, number, 0.2, 0.015, data_wait=0.15 if slowed else 0.002)

    run_steps(monitor, windows, range(1, 60), burst)
    assert hub.of_kind("straggler") == []


def test_a_straggler_of_a_moment_is_in_the_events_not_in_the_summary():
    """Named for 18 of 199 steps: under ``SUMMARY_SHARE``, so the summary does not keep it."""
    hub, findings = stepping_hub(2), Findings()
    monitor, windows = straggler_monitor(hub, findings)
    run_steps(monitor, windows, range(1, 201),
              lambda rank, number: step_message(rank, number, 0.2, 0.015,
                                                data_wait=0.18 if rank == 1 and number <= 20 else 0.002))
    assert [e["active"] for e in hub.of_kind("straggler")] == [True, False]
    monitor.conclude()
    assert findings.stragglers == {}


def test_under_ddp_the_rank_that_computes_longest_is_named_with_its_phase_though_every_step_time_is_equal():
    """No DataLoader (no data phase): the fast ranks wait 60 ms in the all-reduce, rank 1 does not."""
    hub, findings = stepping_hub(3), Findings()
    monitor, windows = straggler_monitor(hub, findings)
    run_steps(monitor, windows, range(1, 20),
              lambda rank, number: step_message(rank, number, 0.100, 0.090 if rank == 1 else 0.030))
    [event] = hub.of_kind("straggler")
    assert event["rank"] == 1 and event["cause"] == "compute" and event["data_wait"] is None
    assert event["phase"] == "forward"
    assert event["compute_time"] == pytest.approx(0.090) and event["others_compute_time"] == pytest.approx(0.030)
    assert "rank 1 is a straggler: it computes longer (90 ms of its 100 ms step vs 30 ms" in event["message"]
    assert "most in forward: 90 ms" in event["message"]


def test_a_rank_waiting_for_a_cpu_longer_than_the_others_is_not_computing_longer():
    """Rank 1 waits 60 ms per step on the run queue (its compute time leaves it out): no straggler."""
    hub = stepping_hub(3)
    monitor, windows = straggler_monitor(hub)
    run_steps(monitor, windows, range(1, 30),
              lambda rank, number: step_message(rank, number, 0.100, 0.030, cpu_wait=0.060 if rank == 1 else 0.001))
    assert hub.of_kind("straggler") == []


def test_phases_on_every_few_steps_only_still_name_the_rank_that_computes_longest():
    """Steps faster than 10 ms are timed every few steps (``split_every``): the measured window is its own
    last timed steps, not the last steps'."""
    hub, findings = stepping_hub(2), Findings()
    monitor, windows = straggler_monitor(hub, findings)
    run_steps(monitor, windows, range(1, 81),
              lambda rank, number: step_message(rank, number, 0.100, 0.090 if rank == 1 else 0.030,
                                                timed=number % 4 == 0))
    [event] = hub.of_kind("straggler")
    assert event["rank"] == 1 and event["cause"] == "compute"
    assert event["compute_time"] == pytest.approx(0.090) and event["others_compute_time"] == pytest.approx(0.030)


def test_a_data_phase_measured_on_some_ranks_only_is_never_compared_with_zero():
    """Ranks 0 and 1 wait 100 ms for their DataLoader, rank 2 has none (and waits for them in the all-reduce)."""
    hub = stepping_hub(3)
    monitor, windows = straggler_monitor(hub)
    run_steps(monitor, windows, range(1, 30),
              lambda rank, number: step_message(rank, number, 0.2, 0.05, 0.1 if rank != 2 else None))
    assert hub.of_kind("straggler") == []


def test_balanced_ranks_without_data_or_process_group_are_not_stragglers():
    hub = stepping_hub(2)
    monitor, windows = straggler_monitor(hub)
    run_steps(monitor, windows, range(1, 30),
              lambda rank, number: step_message(rank, number, 0.050 + 0.001 * (number % 3) if rank == 0 else 0.051))
    assert hub.of_kind("straggler") == []


def test_steps_stretched_by_waiting_for_a_cpu_do_not_hide_a_rank_computing_three_times_longer():
    """The margin follows the others' compute time, not their 250 ms steps (mostly CPU wait)."""
    verdict = straggler_verdict((0.250, None, 0.038), [(0.250, None, 0.013)])
    assert verdict.cause == "compute" and verdict.excess == pytest.approx(0.025)
    assert straggler_verdict((0.250, None, 0.014), [(0.250, None, 0.013)]) is None


def test_compute_time_measured_on_one_rank_only_names_nobody():
    assert straggler_verdict((0.1, None, 0.09), [(0.1, None, None)]) is None
    assert straggler_verdict((0.1, None, None), [(0.1, None, 0.02)]) is None


def test_no_verdict_before_enough_steps_or_with_one_rank():
    hub = stepping_hub(2)
    monitor, windows = straggler_monitor(hub)
    for number in range(1, 4):
        windows.on_message(step_message(0, number, 0.2, data_wait=0.19))
        windows.on_message(step_message(1, number, 0.2, data_wait=0.001))
    monitor.tick(time.time())
    assert hub.of_kind("straggler") == []


# ---- consistency --------------------------------------------------------------------------


def test_the_majority_is_the_reference_and_rank_zero_breaks_ties():
    assert compare_digests({0: "a", 1: "b", 2: "b"}) == ([1, 2], [0])
    assert compare_digests({0: "a", 1: "b"}) == ([0], [1])
    assert compare_digests({0: "a", 1: "a"}) == ([0, 1], [])


def param_hash(rank: int, number: int, digest: str) -> protocol.ParamHash:
    return protocol.ParamHash.from_wire({"type": "param_hash", "rank": rank, "step": number, "digest": digest})


def test_a_divergence_is_flagged_with_step_and_rank_once_per_change():
    hub, findings = stepping_hub(2), Findings()
    monitor = ConsistencyMonitor(hub, findings)
    monitor.on_message(param_hash(0, 4, "same"))
    monitor.on_message(param_hash(1, 4, "same"))
    assert findings.consistency_checks == 1 and hub.of_kind("divergence") == []
    for number in (9, 14):
        monitor.on_message(param_hash(0, number, f"a{number}"))
        monitor.on_message(param_hash(1, number, f"b{number}"))
    [event] = hub.of_kind("divergence")
    assert event["rank"] == 1 and event["step"] == 9 and event["ranks"] == [1] and event["reference"] == [0]
    assert event["digests"] == {"0": "a9", "1": "b9"}
    assert event["message"] == ("parameters differ after step 9: rank 1 disagrees with rank 0 "
                                "(DDP replicas should be identical)")
    assert findings.divergences[0].step == 9


def test_a_step_missing_a_rank_is_compared_after_settling():
    clock = [0.0]
    hub = stepping_hub(3)
    monitor = ConsistencyMonitor(hub, clock=lambda: clock[0])
    monitor.on_message(param_hash(0, 4, "x"))
    monitor.on_message(param_hash(1, 4, "y"))
    monitor.tick(0.0)
    assert hub.of_kind("divergence") == []  # still waiting for rank 2
    clock[0] = 6.0
    monitor.tick(0.0)
    [event] = hub.of_kind("divergence")
    assert event["ranks"] == [1] and event["reference"] == [0]
