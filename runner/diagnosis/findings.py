"""What the live monitors found during a run, kept for the end-of-run summary.

The monitors (stalls, stragglers, consistency, stack captures) publish events as
they find things; this is the short record of the same findings that triage puts
in the run's summary (``summary["diagnostics"]``), so that ``rankwatch run`` and
``runs show`` can say "rank 0 hung in train.py:36" after the run ended.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

KEEP_STALLS = 20
KEEP_DIVERGENCES = 10


@dataclass
class StallFinding:
    """One stall of a rank, as the summary keeps it (``diagnostics.stalls``)."""

    rank: int
    step: int | None
    since: float
    """When the rank last made progress (seconds since 1970)."""
    seconds: float
    """How long without progress when it was flagged."""
    threshold: float
    resumed_after: float | None = None
    """Seconds from ``since`` to its next progress; None: it never resumed."""
    finished_after: float | None = None
    """Seconds from ``since`` to its exit 0, when it ended still stalled: it was not hung."""

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"rank": self.rank, "step": self.step, "since": self.since, "seconds": self.seconds,
                                "threshold": self.threshold, "resumed_after": self.resumed_after}
        if self.finished_after is not None:
            data["finished_after"] = self.finished_after
        return data


@dataclass(frozen=True)
class Divergence:
    """Parameters that differed across replicas after an optimizer step (``diagnostics.divergences``)."""

    step: int
    ranks: list[int]
    """The ranks whose fingerprint differed from the reference's."""
    reference: list[int]
    """The ranks that agreed (the majority)."""
    message: str

    def to_json(self) -> dict[str, Any]:
        return {"step": self.step, "ranks": list(self.ranks), "reference": list(self.reference),
                "message": self.message}


@dataclass
class Findings:
    stalls: list[StallFinding] = field(default_factory=list)
    """One per stall of a rank, the newest ``KEEP_STALLS``."""
    stragglers: dict[int, dict[str, Any]] = field(default_factory=dict)
    """rank -> its worst straggler finding: {rank, cause, step, step_time, data_wait, others_..., excess, margin,
    held_steps}; after ``StragglerMonitor.conclude`` only the ranks named for a share of their steps (``share``)."""
    divergences: list[Divergence] = field(default_factory=list)
    """The first ``KEEP_DIVERGENCES`` times parameters differed across replicas."""
    consistency_checks: int = 0
    """Steps whose parameter fingerprints were compared on every rank."""
    stacks: dict[str, Any] | None = None
    """The last stack capture, short: {reason, t, ranks, verdict, places, missing, path, json_path}."""
    flight_recorder: dict[str, Any] | None = None
    """The last Flight Recorder comparison: {message, culprits, seq, group, lines, path}."""
    launcher: dict[str, dict[str, Any]] = field(default_factory=dict)
    """key -> a launcher mismatch: {key, level, ranks, cause, advice} (``runner.diagnosis.launcher``)."""
    bottleneck: dict[str, Any] | None = None
    """The whole run's bottleneck verdict: {verdict, evidence, action, rank, phase, shares, clock, gpu_busy,
    steps, message, ranks: {rank: the same}} (``runner.diagnosis.bottleneck``)."""

    def add_stall(self, record: StallFinding) -> None:
        self.stalls.append(record)
        del self.stalls[:-KEEP_STALLS]

    def add_divergence(self, record: Divergence) -> None:
        if len(self.divergences) < KEEP_DIVERGENCES:
            self.divergences.append(record)

    def set_stacks(self, result: dict[str, Any]) -> None:
        self.stacks = {
            "reason": result.get("reason"), "t": result.get("t"), "ranks": result.get("ranks") or [],
            "verdict": result.get("verdict"),
            "places": [{key: place.get(key) for key in ("rank", "kind", "op", "what", "frame")}
                       for place in result.get("places") or []],
            "missing": result.get("missing") or [],
            "path": result.get("text_path") or result.get("path"), "json_path": result.get("path"),
        }

    def set_launcher(self, key: str, record: dict[str, Any]) -> None:
        self.launcher[key] = record

    def to_json(self) -> dict[str, Any] | None:
        """The ``diagnostics`` block of the summary, or None when nothing was found or checked."""
        data: dict[str, Any] = {}
        if self.stalls:
            data["stalls"] = [stall.to_json() for stall in self.stalls]
        if self.stacks is not None:
            data["stacks"] = self.stacks
        if self.flight_recorder is not None:
            data["flight_recorder"] = self.flight_recorder
        if self.launcher:
            data["launcher"] = list(self.launcher.values())
        if self.stragglers:
            data["stragglers"] = [self.stragglers[r] for r in sorted(self.stragglers)]
        if self.bottleneck is not None:
            data["bottleneck"] = self.bottleneck
        if self.divergences:
            data["divergences"] = [divergence.to_json() for divergence in self.divergences]
        if self.consistency_checks:
            data["consistency_checks"] = self.consistency_checks
        return data or None
