"""The GPU's utilisation as evidence for the bottleneck verdict: only readings taken while the steps ran.

Seen on an H200: ``rankwatch run --example -- --epochs 1`` made its 128 steps in 0.9 s and ended
"launch-bound: the GPU was busy 0% of the time (NVML)". The readings it judged from were taken
before the first step (the GPU idle while the script started) and counted once per monitor
tick, not once per reading.
"""

from rankwatch import protocol
from runner.diagnosis.bottleneck import BottleneckMonitor
from runner.diagnosis.bottleneck_record import BottleneckRecord
from runner.diagnosis.report import bottleneck_lines
from runner.diagnosis.step_windows import MIN_GPU_READINGS, NVML_PERIOD_SECONDS, StepWindows
from runner.hub.live_model import LiveModel

STEP_TIME = 0.022
SHARES = {"phase_data": 0.0001, "phase_h2d": 0.0003, "phase_forward": 0.0077, "phase_backward": 0.0127,
          "phase_comm": 0.00004, "phase_optimizer": 0.0011, "phase_rest": 0.0004}


def gpu_steps(first: int, count: int) -> dict[int, dict[str, float | None]]:
    """``count`` steps measured on the GPU's clock, as the worker's records give them."""
    return {step: {protocol.STEP_TIME: STEP_TIME, protocol.PHASE_CLOCK: 1.0, **SHARES}
            for step in range(first, first + count)}


def verdict_after(readings: list[tuple[float, float]], ticks_per_reading: int = 1):
    """The run's verdict for one rank whose first step reached the hub at t=100, after NVML's
    ``(taken at, utilisation %)`` readings, each seen by ``ticks_per_reading`` monitor ticks."""
    windows, model = StepWindows(), LiveModel()
    windows.add_steps(0, gpu_steps(0, 40))
    windows.rank(0).first_step_at = 100.0
    for taken_at, utilisation in readings:
        model.on_gpu_use(0, 0, utilisation, 3 << 30, taken_at)
        for _ in range(ticks_per_reading):  # what BottleneckMonitor._sample_gpus does at each tick
            windows.sample_gpu_busy(0, model.ranks[0].gpu_util, model.gpu_read_at.get(0))
    return BottleneckMonitor._judge_rank(windows.rank(0), live=False)


def test_readings_from_before_the_first_step_are_no_evidence_and_the_verdict_says_so():
    early = [(98.0, 0.0), (99.0, 0.0), (100.0 + NVML_PERIOD_SECONDS / 2, 0.0)]
    verdict = verdict_after(early)
    assert verdict.kind is None and verdict.gpu_busy is None
    assert f"fewer than {MIN_GPU_READINGS} times while the steps ran" in verdict.evidence


def test_one_reading_seen_by_many_ticks_counts_once():
    verdict = verdict_after([(102.0, 30.0), (103.0, 30.0)], ticks_per_reading=5)
    assert verdict.kind is None, "two readings are fewer than the three a verdict needs, however often seen"


def test_readings_taken_while_the_steps_ran_decide_launch_from_compute_bound():
    low = verdict_after([(100.5, 0.0), *((100.0 + second, 34.0) for second in range(2, 8))])
    assert low.kind is protocol.Bottleneck.LAUNCH and round(low.gpu_busy, 2) == 0.34, low.evidence
    high = verdict_after([(100.0 + second, 93.0) for second in range(2, 8)])
    assert high.kind is protocol.Bottleneck.COMPUTE and round(high.gpu_busy, 2) == 0.93, high.evidence


def test_the_live_verdict_needs_the_same_evidence():
    windows, model = StepWindows(), LiveModel()
    windows.add_steps(0, gpu_steps(0, 12))
    first = windows.rank(0).first_step_at
    for offset in (2.0, 3.0):
        model.on_gpu_use(0, 0, 20.0, 1 << 30, first + offset)
        windows.sample_gpu_busy(0, model.ranks[0].gpu_util, model.gpu_read_at.get(0))
    assert BottleneckMonitor._judge_rank(windows.rank(0), live=True).kind is None
    model.on_gpu_use(0, 0, 20.0, 1 << 30, first + 4.0)
    windows.sample_gpu_busy(0, model.ranks[0].gpu_util, model.gpu_read_at.get(0))
    assert BottleneckMonitor._judge_rank(windows.rank(0), live=True).kind is protocol.Bottleneck.LAUNCH


def test_a_verdict_not_determined_says_so_once_where_it_is_printed():
    """Seen on an H200: the end of the example printed "bottleneck: not determined: not determined: NVML ..."."""
    verdict = verdict_after([(98.0, 0.0)])
    line, = bottleneck_lines(BottleneckRecord(verdict, None))
    assert line.split() == ["bottleneck:", "not", "determined:", "NVML", *line.split()[4:]], line
    assert line.count("not determined") == 1 and line.count("not measured") == 0, line
    too_few = BottleneckMonitor._judge_rank(StepWindows().rank(0), live=False)
    line, = bottleneck_lines(BottleneckRecord(too_few, None))
    assert "not measured: 0 step(s) had their phases timed" in line and "determined" not in line, line
