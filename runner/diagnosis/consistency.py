"""DDP consistency: do all replicas hold the same parameters?

DDP keeps replicas identical by construction (parameters broadcast from rank 0,
identical averaged gradients). When they drift anyway -- a rank-dependent code
path that touches the weights, a non-deterministic op applied outside DDP, an
optimizer state loaded on one rank only -- nothing fails: the model just trains
worse. With ``telemetry.hash_every = N`` every worker sends a fingerprint of its
parameters after every N-th optimizer step (``param_hash``); this monitor
compares them across ranks.

A step is compared once every live rank sent its fingerprint, or after
``SETTLE_SECONDS`` with whatever arrived (a rank that died or restarted). The
reference is the largest group of equal fingerprints; on a tie the group that
holds rank 0 (DDP's source of truth). Sharded models (FSDP, tensor parallel)
differ per rank by design: leave ``hash_every`` at 0 for them.

Event (``rank`` is the first diverged rank)::

    divergence {message, step, ranks: [diverged ranks], reference: [ranks that agree],
                digests: {"rank": digest}}

Only a change in who diverges makes a new event (a divergence persists, and
would otherwise repeat every N steps).
"""

from __future__ import annotations

import time

from rankwatch.protocol import EventKind, Message, ParamHash
from runner.diagnosis.findings import Divergence, Findings
from runner.format import rank_ranges, ranks_text
from runner.hub.observer import HubObserver
from runner.state import RankState

SETTLE_SECONDS = 5.0
MAX_PENDING_STEPS = 64


def compare_digests(digests: dict[int, str]) -> tuple[list[int], list[int]]:
    """(reference ranks, diverged ranks) for one step's fingerprints."""
    groups: dict[str, list[int]] = {}
    for rank in sorted(digests):
        groups.setdefault(digests[rank], []).append(rank)
    ordered = sorted(groups.values(), key=lambda ranks: (-len(ranks), 0 not in ranks, ranks[0]))
    reference = ordered[0]
    diverged = sorted(rank for ranks in ordered[1:] for rank in ranks)
    return reference, diverged


class ConsistencyMonitor(HubObserver):
    def __init__(self, hub, findings: Findings | None = None, clock=time.monotonic):
        self.hub = hub
        self.findings = findings if findings is not None else Findings()
        self.clock = clock
        self.pending: dict[int, dict[int, str]] = {}
        self.first_seen: dict[int, float] = {}
        self.last_diverged: list[int] = []

    def on_message(self, message: Message) -> None:
        """Hub observer: collect ``param_hash`` fingerprints by step."""
        if not isinstance(message, ParamHash):
            return
        rank, step, digest = message.rank, message.step, message.digest
        if step is None or digest is None:
            return
        self.pending.setdefault(step, {})[rank] = digest
        self.first_seen.setdefault(step, self.clock())
        if len(self.pending[step]) >= len(self._live_ranks()):
            self._compare(step)
        while len(self.pending) > MAX_PENDING_STEPS:
            self._compare(min(self.pending))

    def tick(self, now: float) -> None:
        for step in sorted(self.pending):
            if self.clock() - self.first_seen.get(step, 0.0) >= SETTLE_SECONDS:
                self._compare(step)

    def _live_ranks(self) -> list[int]:
        return [row.rank for row in self.hub.model.ranks.values()
                if row.pid and not RankState(row.state).finished]

    def _compare(self, step: int) -> None:
        digests = self.pending.pop(step, {})
        self.first_seen.pop(step, None)
        if len(digests) < 2:
            return
        reference, diverged = compare_digests(digests)
        if not diverged:
            self.findings.consistency_checks += 1
            self.last_diverged = []
            return
        if diverged == self.last_diverged:
            return
        self.last_diverged = diverged
        who = ranks_text(diverged)
        agree = rank_ranges(reference)
        message = (f"parameters differ after step {step}: {who} disagree{'s' if len(diverged) == 1 else ''} "
                   f"with rank{'s' if len(reference) > 1 else ''} {agree} (DDP replicas should be identical)")
        self.findings.add_divergence(Divergence(step, diverged, reference, message))
        self.hub.add_event(EventKind.DIVERGENCE, diverged[0], message, step=step, ranks=diverged, reference=reference,
                           digests={str(rank): digest for rank, digest in sorted(digests.items())})
