"""The run's summary as one typed value: what triage concluded, stored with the run as JSON.

:func:`runner.diagnosis.triage.conclude` returns a :class:`RunSummary`, whole: the outcome,
the headline (with who stopped the run and how, and a store that could not hold everything,
already in it), the failures, hints and findings. Nothing edits it afterwards; ``to_wire`` is
what the store, the hub's ``run_finished`` event and every reader get, in the same shape as
before this type (a failed run's summary always has ``first_failure``, ``other_failures`` and
``hints``; the other keys only when they say something). Keys other producers add to the
stored summary (Slurm's record, a lost runner's) travel untouched in ``extra``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rankwatch.protocol import as_int
from runner.diagnosis.hints import Hint
from runner.rank_failure import RankFailure
from runner.runstate.messages import JsonObject
from runner.state import Outcome

FinishedRankJson = JsonObject
"""A rank of a failed run whose script ran to its end: ``{rank, before}`` (seconds before the failure);
kept as stored, whatever version wrote it."""
RankLossesJson = JsonObject
"""``{rank, dropped, rejected, not_received}`` for a rank that lost records (``Hub.losses``), as stored."""
DiagnosticsJson = JsonObject
"""What the monitors found (``Findings.to_json``), as stored: readers take it with ``.get``."""

FIELDS = ("outcome", "headline", "exit_code", "first_failure", "other_failures", "hints", "finished", "diagnostics",
          "stopped_by", "losses", "store_incomplete")


@dataclass(frozen=True)
class StopRequest:
    """A run stopped on request: who asked (``describe_stop_reason``) and whether it had to be killed."""

    who: str
    killed: bool

    @property
    def how(self) -> str:
        return "killed (SIGKILL)" if self.killed else "ended with SIGTERM"


@dataclass(frozen=True)
class RunSummary:
    outcome: Outcome
    headline: str
    exit_code: int | None
    first_failure: RankFailure | None = None
    other_failures: tuple[RankFailure, ...] = ()
    hints: tuple[Hint, ...] = ()
    finished: tuple[FinishedRankJson, ...] = ()
    """Ranks of a failed run whose script ran to its end: ``{rank, before}`` (seconds before the failure)."""
    diagnostics: DiagnosticsJson | None = None
    """What the monitors found (``Findings.to_json``)."""
    stopped_by: str | None = None
    losses: tuple[RankLossesJson, ...] = ()
    """``{rank, dropped, rejected, not_received}`` per rank that lost records (``Hub.losses``)."""
    store_incomplete: str | None = None
    extra: JsonObject = field(default_factory=dict, compare=False)
    """Keys other producers add to the stored summary (Slurm's record, a lost runner's), untouched."""

    def to_wire(self) -> JsonObject:
        wire: JsonObject = {"outcome": self.outcome.value, "headline": self.headline, "exit_code": self.exit_code}
        if self.outcome == Outcome.FAILED or self.first_failure is not None or self.other_failures:
            wire["first_failure"] = self.first_failure.to_wire() if self.first_failure is not None else None
            wire["other_failures"] = [failure.to_wire() for failure in self.other_failures]
            wire["hints"] = [hint.to_json() for hint in self.hints]
        elif self.hints:
            wire["hints"] = [hint.to_json() for hint in self.hints]
        optional = {"finished": [dict(item) for item in self.finished], "diagnostics": self.diagnostics,
                    "stopped_by": self.stopped_by, "losses": [dict(row) for row in self.losses],
                    "store_incomplete": self.store_incomplete}
        wire.update({key: value for key, value in optional.items() if value})
        wire.update(self.extra)
        return wire

    @classmethod
    def from_wire(cls, data: JsonObject) -> RunSummary:
        """Lenient, as every stored summary is read: an unknown outcome is ``failed`` only when a
        failure is named, else ``stopped``; what is missing or malformed is left out."""
        try:
            outcome = Outcome(str(data.get("outcome")))
        except ValueError:
            outcome = Outcome.FAILED if isinstance(data.get("first_failure"), dict) else Outcome.STOPPED
        first = data.get("first_failure")
        return cls(
            outcome=outcome, headline=str(data.get("headline") or ""), exit_code=as_int(data.get("exit_code")),
            first_failure=RankFailure.from_wire(first) if isinstance(first, dict) else None,
            other_failures=tuple(RankFailure.from_wire(o) for o in data.get("other_failures") or []
                                 if isinstance(o, dict)),
            hints=tuple(Hint.from_json(h) for h in data.get("hints") or [] if isinstance(h, dict)),
            finished=tuple(item for item in data.get("finished") or [] if isinstance(item, dict)),
            diagnostics=data.get("diagnostics") if isinstance(data.get("diagnostics"), dict) else None,
            stopped_by=data.get("stopped_by") if isinstance(data.get("stopped_by"), str) else None,
            losses=tuple(row for row in data.get("losses") or [] if isinstance(row, dict)),
            store_incomplete=data.get("store_incomplete") if isinstance(data.get("store_incomplete"), str) else None,
            extra={key: value for key, value in data.items() if key not in FIELDS})
