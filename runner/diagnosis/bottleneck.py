"""The bottleneck verdict: what limits each rank and the run, its evidence, and one thing to do.

Read from the step phases (``rankwatch._phases``: the device's own clock), as shares of the
measured steps' span, and on a GPU from the GPU's utilisation (NVML, sampled by the runner):

==========================  ===============================================================
verdict                     when
==========================  ===============================================================
``straggler``               (the run) one rank's data or compute phases hold the others up:
                            ``stragglers`` named it (the one straggler rule: beyond the
                            machine's noise, held), named with the phase; at the end, one
                            the run's summary keeps (named for a share of its steps)
``input-bound``             ``data`` is at least ``INPUT_SHARE`` of the span (and no less
                            than ``comm``): the device waits for batches
``communication-bound``     ``comm`` (exposed communication) is at least
                            ``COMMUNICATION_SHARE`` of the span
``launch-bound``            on a GPU, neither: the GPU was busy under ``BUSY_GPU`` of the
                            time while the training thread waited for nothing: it cannot
                            launch work fast enough
``compute-bound``           neither, and on a GPU the GPU was busy (healthy); on the CPU's
                            clock, only while the timed phases hold most of the step: when
                            ``rest`` (what runs between the optimizer and the next batch:
                            logging, evaluation, checkpoints, sleeps) is at least
                            ``REST_SHARE``, the step is mostly outside what is timed, and
                            the verdict is "not determined", naming that share
==========================  ===============================================================

Never a verdict from values that were not measured: fewer than ``MIN_MEASURED_STEPS`` timed
steps, or a GPU job whose utilisation NVML did not give (compute- and launch-bound cannot be
told apart then), is "not determined", with the reason.

The live verdict (``BottleneckMonitor``, an event of kind ``bottleneck`` whenever the run's
verdict changes and holds for ``SETTLE_TICKS`` ticks) reads each rank's last measured steps;
the verdict at the end (``summary["diagnostics"]["bottleneck"]``) reads the whole run.
"""

from __future__ import annotations

import statistics

from rankwatch import protocol
from rankwatch.protocol import Bottleneck, EventKind
from runner.diagnosis.bottleneck_record import BottleneckRecord, BottleneckVerdict
from runner.diagnosis.findings import Findings
from runner.diagnosis.step_windows import MIN_GPU_READINGS, RankSteps, StepWindows
from runner.diagnosis.straggler_record import StragglerCause, StragglerRecord
from runner.diagnosis.stragglers import StragglerMonitor
from runner.state import RankState

INPUT_SHARE = 0.30
COMMUNICATION_SHARE = 0.30
BUSY_GPU = 0.70
"""NVML's utilisation (share of time a kernel ran) under which a GPU that waits for nothing is
starved by its host."""
REST_SHARE = 0.50
"""On the CPU's clock, a ``rest`` share from which the timed phases no longer say what limits the step."""
MIN_MEASURED_STEPS = 5
SETTLE_TICKS = 3
"""A new live verdict must hold this many monitor ticks before it is announced (no flapping)."""


ACTIONS = {
    Bottleneck.INPUT: "feed it faster: more DataLoader workers (num_workers), pin_memory=True, a larger "
                      "prefetch_factor, persistent_workers=True, or lighter per-sample work",
    Bottleneck.COMMUNICATION: "hide or shrink the communication: accumulate gradients (DDP no_sync) to "
                              "all-reduce less often, tune DDP's bucket_cap_mb, or compute more per step "
                              "(a larger batch)",
    Bottleneck.LAUNCH: "give the GPU more work per launch: a larger batch, torch.compile, or CUDA graphs; "
                       "and keep the host loop free of syncs such as .item()",
    Bottleneck.COMPUTE: "healthy: the device computes; to go faster, compute less (mixed precision, "
                        "torch.compile) or add devices",
}
STRAGGLER_ACTIONS = {
    StragglerCause.DATA: "look at that rank's data: its DataLoader workers, its disk or its shard",
    StragglerCause.COMPUTE: "look at that rank's device: another process on it, its clocks or temperature, or a rank that "
               "does extra work (a larger shard, logging or evaluation on one rank only)",
}


def judge(shares: dict[str, float | None] | None, clock: str | None, gpu_busy: float | None,
          steps: int) -> BottleneckVerdict:
    """The verdict of one rank's (or the run's) phase shares (module docstring)."""

    def verdict(kind: Bottleneck | None, evidence: str, phase: str | None = None) -> BottleneckVerdict:
        return BottleneckVerdict(kind, evidence, None if kind is None else ACTIONS[kind], phase=phase, shares=shares,
                       clock=clock, gpu_busy=gpu_busy, steps=steps)

    if shares is None or steps < MIN_MEASURED_STEPS:
        return verdict(None, f"not measured: {steps} step(s) had their phases timed, {MIN_MEASURED_STEPS} are needed")
    on = "of the GPU's time" if clock == protocol.CLOCK_GPU else "of the step"
    data, comm = shares.get("data"), shares.get("comm")
    waits = f"data {_percent(data)}, communication {_percent(comm)}"
    computing = sum(shares.get(phase) or 0.0 for phase in protocol.COMPUTING_PHASES)
    if (data or 0.0) >= INPUT_SHARE and (data or 0.0) >= (comm or 0.0):
        return verdict(Bottleneck.INPUT, f"waiting for data {_percent(data)} {on} (communication {_percent(comm)})",
                       "data")
    if (comm or 0.0) >= COMMUNICATION_SHARE:
        return verdict(Bottleneck.COMMUNICATION, f"exposed communication {_percent(comm)} {on} (data "
                       f"{_percent(data)}, computing {_percent(computing)})", "comm")
    if clock == protocol.CLOCK_GPU:
        if gpu_busy is None:
            return verdict(None, f"not determined: NVML read the GPU's utilisation fewer than {MIN_GPU_READINGS} "
                                 f"times while the steps ran, so a GPU that computes cannot be told from one that "
                                 f"waits for the host ({waits})")
        if gpu_busy < BUSY_GPU:
            return verdict(Bottleneck.LAUNCH, f"the GPU was busy {_percent(gpu_busy)} of the time (NVML) while the "
                           f"training thread waited for neither data nor communication ({waits})", _dominant(shares))
        return verdict(Bottleneck.COMPUTE, f"the GPU was busy {_percent(gpu_busy)} of the time; forward, backward "
                       f"and optimizer {_percent(computing)} {on} ({waits})", _dominant(shares))
    rest = shares.get("rest")
    if (rest or 0.0) >= REST_SHARE:
        return verdict(None, f"not determined: {_percent(rest)} {on} is outside the timed phases (between the "
                             f"optimizer and the next batch: logging, evaluation, checkpoints, sleeps); forward, "
                             f"backward and optimizer {_percent(computing)} ({waits})")
    return verdict(Bottleneck.COMPUTE, f"forward, backward and optimizer {_percent(computing)} {on}, the rest "
                   f"{_percent(rest)} ({waits})", _dominant(shares))


def judge_straggler(finding: StragglerRecord) -> BottleneckVerdict:
    """The run's verdict when ``stragglers`` flagged a rank (its finding, with its message)."""
    cause = finding.cause or StragglerCause.COMPUTE
    return BottleneckVerdict(Bottleneck.STRAGGLER, finding.message or f"rank {finding.rank} holds the others up",
                   STRAGGLER_ACTIONS[cause], rank=finding.rank,
                   phase=finding.phase or ("data" if cause == StragglerCause.DATA else None))


def _dominant(shares: dict[str, float | None]) -> str | None:
    measured = {phase: share for phase, share in shares.items() if share is not None}
    return max(measured, key=lambda phase: measured[phase]) if measured else None


def _percent(share: float | None) -> str:
    return "–" if share is None else f"{share * 100:.0f}%"


def run_shares(per_rank: list[dict[str, float | None] | None]) -> dict[str, float | None] | None:
    """The run's shares: each phase's mean share over the ranks that measured steps."""
    measured = [shares for shares in per_rank if shares]
    if not measured:
        return None
    result: dict[str, float | None] = {}
    for phase in protocol.PHASES:
        values = [shares[phase] for shares in measured if shares.get(phase) is not None]
        result[phase] = sum(values) / len(measured) if values else None  # type: ignore[arg-type]
    return result


def _median(values: list[float]) -> float | None:
    return statistics.median_high(values) if values else None


class BottleneckMonitor:
    """The live verdict (events) and the verdict at the end (``Findings.bottleneck``)."""

    def __init__(self, hub, windows: StepWindows, stragglers: StragglerMonitor, findings: Findings | None = None):
        self.hub = hub
        self.windows = windows
        self.stragglers = stragglers
        """The one straggler mechanism: its live flags make the run's verdict ``straggler``."""
        self.findings = findings if findings is not None else stragglers.findings
        self.announced: tuple[str, int | None] | None = None
        """(verdict, straggler rank) last announced in an event."""
        self._candidate: tuple[str, int | None] | None = None
        self._candidate_ticks = 0

    def tick(self, now: float) -> None:
        self._sample_gpus()
        ranks = {rank: self._judge_rank(steps, live=True) for rank, steps in self.windows.ranks.items()}
        verdict = self._judge_run(ranks, live=True)
        if verdict.kind is None:
            return
        key = (verdict.kind.value, verdict.rank)
        if key == self.announced:
            self._candidate, self._candidate_ticks = None, 0
            return
        if key != self._candidate:
            self._candidate, self._candidate_ticks = key, 0
        self._candidate_ticks += 1
        if self._candidate_ticks < SETTLE_TICKS:
            return
        self.announced, self._candidate = key, None
        record = BottleneckRecord(verdict, _message(verdict), ranks)
        self.hub.add_event(EventKind.BOTTLENECK, verdict.rank, _message(verdict), **record.event_fields())

    def conclude(self) -> None:
        """The verdict over the whole run, into the findings (the end-of-run summary)."""
        ranks = {rank: self._judge_rank(steps, live=False) for rank, steps in self.windows.ranks.items()}
        if not ranks:
            return
        verdict = self._judge_run(ranks, live=False)
        self.findings.bottleneck = BottleneckRecord(verdict, _message(verdict), ranks)

    def _sample_gpus(self) -> None:
        """Each stepping GPU rank's utilisation now, into its window (the evidence for launch-bound)."""
        for rank, steps in self.windows.ranks.items():
            row = self.hub.model.ranks.get(rank)
            if row is None or RankState(row.state).finished or steps.clock != protocol.CLOCK_GPU:
                continue
            self.windows.sample_gpu_busy(rank, row.gpu_util, self.hub.model.gpu_read_at.get(rank))

    @staticmethod
    def _judge_rank(steps: RankSteps, live: bool) -> BottleneckVerdict:
        if live:
            return judge(steps.window_shares(), steps.clock, steps.recent_gpu_busy(), len(steps.measured))
        return judge(steps.run_shares(), steps.clock, steps.run_gpu_busy(), steps.measured_steps)

    def _judge_run(self, ranks: dict[int, BottleneckVerdict], live: bool) -> BottleneckVerdict:
        """A straggler (named now, live; kept by ``StragglerMonitor.conclude``, which runs first, at the
        end) is the run's verdict; otherwise the ranks' mean shares judged as one."""
        flagged = (self.stragglers.flagged if live else self.findings.stragglers).values()
        if flagged:
            worst = max(flagged, key=lambda record: record.excess or 0.0)
            return judge_straggler(self.findings.stragglers.get(worst.rank, worst) if worst.rank is not None else worst)
        verdicts = list(ranks.values())
        clocks = {verdict.clock for verdict in verdicts if verdict.clock is not None}
        clock = clocks.pop() if len(clocks) == 1 else None
        busy = [verdict.gpu_busy for verdict in verdicts if verdict.gpu_busy is not None]
        steps = min((verdict.steps for verdict in verdicts), default=0)
        return judge(run_shares([verdict.shares for verdict in verdicts]), clock, _median(busy), steps)


def _message(verdict: BottleneckVerdict) -> str:
    if verdict.kind is None:
        return f"bottleneck {verdict.evidence}"  # "not measured: ..." or "not determined: ..."
    if verdict.kind is Bottleneck.STRAGGLER:
        return verdict.evidence
    return f"{verdict.kind.value}: {verdict.evidence}"
