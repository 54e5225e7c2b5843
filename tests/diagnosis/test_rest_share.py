"""On the CPU's clock a step that is mostly outside the timed phases gets no compute-bound
("healthy") verdict: a script that sleeps or logs between steps (the hang example: 95 % of its
step outside them) was called compute-bound with its computing at 2 %."""

from __future__ import annotations

from rankwatch import protocol
from rankwatch.protocol import Bottleneck
from runner.diagnosis.bottleneck import judge


def shares(rest: float) -> dict[str, float | None]:
    computing = 1.0 - rest - 0.02
    return {"data": None, "h2d": None, "forward": computing * 0.4, "backward": computing * 0.5,
            "comm": 0.02, "optimizer": computing * 0.1, "rest": rest}


def test_a_cpu_step_mostly_outside_the_timed_phases_is_not_called_compute_bound():
    verdict = judge(shares(0.95), protocol.CLOCK_CPU, None, steps=40)
    assert verdict.kind is None
    assert verdict.evidence.startswith("not determined: 95% of the step is outside the timed phases")


def test_a_cpu_step_mostly_timed_is_still_compute_bound():
    verdict = judge(shares(0.10), protocol.CLOCK_CPU, None, steps=40)
    assert verdict.kind == Bottleneck.COMPUTE
