"""The straggler judgement of a whole cohort at once equals judging each rank against the others
one by one (the definition), and a thousand ranks are judged in a few hundredths of a second."""

from __future__ import annotations

import math
import random
import statistics

from runner.diagnosis import stragglers
from runner.diagnosis.stragglers import Cohort, StepSummary


def others_median(values: list[float | None]) -> float | None:
    measured = [value for value in values if value is not None]
    return statistics.median(measured) if measured else None


def excess_by_definition(me: StepSummary, others: list[StepSummary]) -> tuple[float | None, float | None]:
    """(data excess, compute excess) of ``me`` over the others' medians, each rank compared one by one."""
    wait = others_median([other.data_wait for other in others])
    compute = others_median([other.compute_time for other in others])
    data_excess = me.data_wait - wait if me.data_wait is not None and wait is not None else None
    if me.compute_time is not None and compute is not None:
        return data_excess, me.compute_time - compute
    if me.compute_time is None and compute is None:
        return data_excess, me.step_time - statistics.median(other.step_time for other in others)
    return data_excess, None


def random_summary(rng: random.Random) -> StepSummary:
    def deviations() -> tuple[float, ...]:
        return tuple(abs(rng.gauss(0, 0.003)) for _ in range(rng.choice([0, 5, 6])))
    compute = rng.choice([None, rng.uniform(0.04, 0.15)])
    phases = tuple(rng.choice([None, rng.uniform(0, 0.05)]) for _ in range(7)) if compute else None
    return StepSummary(rng.uniform(0.05, 0.2), rng.choice([None, rng.uniform(0, 0.05)]), compute, phases,
                       rng.choice([None, rng.uniform(0, 0.3)]), deviations(), deviations(), deviations())


def test_a_cohort_judges_every_rank_as_comparing_it_with_the_others_one_by_one():
    rng = random.Random(7)
    for _trial in range(400):
        summaries = [random_summary(rng) for _ in range(rng.randint(2, 9))]
        cohort = Cohort(summaries)
        for index, me in enumerate(summaries):
            others = summaries[:index] + summaries[index + 1:]
            excess, _base = cohort._excesses(me)
            expected = excess_by_definition(me, others)
            for got, want in zip(excess, expected, strict=True):
                assert (got is None) == (want is None) and (got is None or math.isclose(got, want, abs_tol=1e-15))
            assert cohort.verdict(index) == stragglers.straggler_verdict(me, others)


def test_a_thousand_ranks_are_judged_at_once_and_the_slow_one_named_by_its_slowest_phase():
    rng = random.Random(3)
    phases = (0.01, 0.0, 0.03, 0.04, 0.008, 0.005, 0.002)
    summaries = [StepSummary(0.1 + rng.gauss(0, 0.001), 0.01, 0.08 + rng.gauss(0, 0.001), phases, 0.0,
                             (0.001,) * 6, (0.001,) * 6, (0.001,) * 6) for _ in range(1024)]
    slow = list(phases)
    slow[3] = 0.09  # backward
    summaries[700] = summaries[700]._replace(compute_time=0.14, phases=tuple(slow))
    cohort = Cohort(summaries)
    verdicts = {index: verdict for index in range(1024) if (verdict := cohort.verdict(index)) is not None}
    assert list(verdicts) == [700] and verdicts[700].cause == "compute" and verdicts[700].phase == "backward"
