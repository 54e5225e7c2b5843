"""The running window of phase shares gives what summing its steps afresh gives."""

from __future__ import annotations

import math
import random

from rankwatch.protocol import PHASES, PhaseWindow, phase_shares


def test_the_running_totals_equal_the_shares_of_the_last_steps_summed_afresh():
    chooser = random.Random(7)
    window, steps = PhaseWindow(limit=20), []
    for _ in range(2_000):
        phases = [chooser.choice([None, math.inf, math.nan, chooser.uniform(0, 0.5), chooser.uniform(0, 1e-4)])
                  for _ in PHASES]
        if chooser.random() < 0.1:
            phases = [None] * len(PHASES)  # a step with no phase measured
        window.add(phases)
        steps.append(phases)
        expected, got = phase_shares(steps[-20:]), window.shares()
        if expected is None:
            assert got is None
            continue
        assert got is not None and got.keys() == expected.keys()
        for phase, share in expected.items():
            assert (got[phase] is None) == (share is None), phase
            if share is not None:
                assert math.isclose(got[phase], share, rel_tol=1e-9, abs_tol=1e-12), (phase, got[phase], share)


def test_a_window_without_a_measured_step_has_no_shares():
    window = PhaseWindow(limit=3)
    assert window.shares() is None
    window.add([None] * len(PHASES))
    assert window.shares() is None
    window.add([0.1] + [None] * (len(PHASES) - 1))
    assert window.shares() == {phase: (1.0 if index == 0 else None) for index, phase in enumerate(PHASES)}
