"""Lines many ranks send at once: the first few, then one count line with the ranks as ranges."""

from __future__ import annotations

from rankwatch.protocol import EventKind
from runner.view.bursts import BurstLine, Bursts, burst_of


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_first_lines_of_a_burst_are_shown_and_the_rest_said_once_it_is_quiet():
    clock = Clock()
    bursts = Bursts(shown=2, quiet_seconds=1.0, clock=clock)
    shown = [rank for rank in range(10) if bursts.admit(BurstLine("stop", rank, "stopped after rank 1 failed"))]
    assert shown == [0, 1]
    clock.now = 0.5
    assert bursts.ended() == []  # still going on
    assert not bursts.admit(BurstLine("stop", 10, "stopped after rank 1 failed"))
    clock.now = 1.4
    assert bursts.ended() == []  # quiet for 0.9 s only
    clock.now = 1.5
    assert bursts.ended() == ["9 more: ranks 2-10 stopped after rank 1 failed"]
    assert bursts.ended() == [] and bursts.flush() == []  # said once
    assert bursts.admit(BurstLine("stop", 11, "stopped after rank 1 failed"))  # a new burst


def test_kinds_are_counted_apart_and_the_end_says_every_burst_still_held():
    bursts = Bursts(shown=1, quiet_seconds=60.0, clock=Clock())
    for rank in (0, 2, 5, 4):
        bursts.admit(BurstLine("stalled", rank, "stalled"))
    for rank in (7, 8):
        bursts.admit(BurstLine("lost", rank, "disconnected"))
    assert bursts.flush() == ["3 more: ranks 2, 4, 5 stalled", "1 more: rank 8 disconnected"]


def test_lines_that_say_the_same_after_the_rank_group_and_others_are_always_shown():
    stopped = burst_of(EventKind.RANK_STOPPED, 7, "rank 7 stopped after rank 1 failed")
    assert stopped == BurstLine((EventKind.RANK_STOPPED, "stopped after rank 1 failed"), 7,
                                "stopped after rank 1 failed")
    assert burst_of(EventKind.RANK_STOPPED, 8, "rank 8 stopped after rank 1 failed").key == stopped.key
    assert burst_of(EventKind.RANK_STOPPED, 8, "rank 8 stopped after rank 3 failed").key != stopped.key
    # figures differ from rank to rank: grouped by kind
    assert burst_of(EventKind.STALLED, 3, "rank 3 stalled at step 9: no progress for 31 s").key == \
        burst_of(EventKind.STALLED, 4, "rank 4 stalled at step 9: no progress for 33 s").key
    assert burst_of(EventKind.WARNING, None, "the store is 90 % full") is None  # no rank: always shown
    assert burst_of(EventKind.RECORDS_REJECTED, 2, "rank 2: 3 records dropped").key == \
        burst_of(EventKind.RECORDS_REJECTED, 9, "rank 9: 1 record dropped").key  # figures apart, one kind
    assert burst_of(EventKind.LAUNCH_MISMATCH, 2, "rank 2's own words") is None  # not "rank 2 ...": always shown

