"""A costly monitor keeps to its share of the event loop; a cheap one ticks every time."""

from __future__ import annotations

from runner.diagnosis.pacing import LOOP_SHARE, PacedTick


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Monitor:
    """Takes ``cost`` seconds of the clock per tick and counts its ticks."""

    def __init__(self, clock: Clock, cost: float) -> None:
        self.clock, self.cost, self.ticks = clock, cost, 0

    def tick(self, now: float) -> None:
        self.ticks += 1
        self.clock.now += self.cost


def run_for(monitor: Monitor, clock: Clock, seconds: float, interval: float = 0.5) -> float:
    """Tick ``monitor`` through PacedTick every ``interval`` for ``seconds``; its share of the time."""
    paced = PacedTick(monitor, clock=clock, cost_clock=clock)
    start, spent = clock.now, 0.0
    while clock.now - start < seconds:
        before = clock.now
        paced.tick(clock.now)
        spent += clock.now - before
        clock.now += interval
    return spent / (clock.now - start)


def test_a_cheap_monitor_ticks_at_every_interval():
    clock = Clock()
    monitor = Monitor(clock, cost=0.0005)
    run_for(monitor, clock, seconds=60)
    assert monitor.ticks == 120


def test_a_monitor_taking_a_third_of_a_second_keeps_to_its_share():
    clock = Clock()
    monitor = Monitor(clock, cost=0.33)  # the straggler judgement at 1,024 ranks, roughly
    share = run_for(monitor, clock, seconds=600)
    assert share <= LOOP_SHARE * 1.1
    assert monitor.ticks >= 600 * LOOP_SHARE / 0.33 * 0.8  # it still runs, every ~7 s


def test_a_tick_that_raises_still_sets_when_it_is_due():
    clock = Clock()

    class Broken:
        def tick(self, now: float) -> None:
            clock.now += 1.0
            raise RuntimeError("broken")

    paced = PacedTick(Broken(), clock=clock, cost_clock=clock)
    try:
        paced.tick(0.0)
    except RuntimeError:
        pass
    assert paced.due == 100.0 + 1.0 / LOOP_SHARE
    assert paced.tick(0.0) is False


def test_a_tick_preempted_on_a_busy_machine_costs_only_its_cpu_time():
    wall, cpu = Clock(), Clock()

    class Preempted:
        def tick(self, now: float) -> None:
            wall.now += 0.2  # descheduled for 200 ms
            cpu.now += 0.001  # of which 1 ms on the CPU

    paced = PacedTick(Preempted(), clock=wall, cost_clock=cpu)
    assert paced.tick(0.0)
    assert abs(paced.due - (100.0 + 0.001 / LOOP_SHARE)) < 1e-9
    wall.now += 0.5
    assert paced.tick(0.0)  # due again at the run's next interval
