"""The run's summary as one typed value: what triage concluded, stored with the run as JSON.

:func:`runner.diagnosis.triage.conclude` returns a :class:`RunSummary`, whole: the outcome,
the headline (with who stopped the run and how, and a store that could not hold everything,
already in it), the failures, hints and findings. Nothing edits it afterwards; ``to_wire`` is
what the store, the hub's ``run_finished`` event and every reader get, in the same shape as
before this type (a failed run's summary always has ``first_failure``, ``other_failures`` and
``hints``; the other keys only when they say something). Keys other producers add to the
stored summary (Slurm's record) travel untouched in ``extra``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from rankwatch.protocol import as_float, as_int, as_text
from runner.diagnosis.findings import StoredDiagnostics
from runner.diagnosis.hints import Hint
from runner.rank_failure import RankFailure, RankLosses
from runner.runstate.messages import JsonObject
from runner.state import Outcome

FIELDS = ("outcome", "headline", "exit_code", "first_failure", "other_failures", "hints", "finished", "diagnostics",
          "stopped_by", "losses", "store_incomplete", "runner_lost")


def _extra(data: Mapping[str, object], known: frozenset[str]) -> JsonObject:
    return {key: value for key, value in data.items() if key not in known}


@dataclass(frozen=True)
class FinishedRank:
    """A rank of a failed run whose script ran to its end (``summary["finished"]``)."""

    rank: int | None
    before: float | None
    """Seconds before the first failure it ended (negative: after it); None: not known."""
    extra: JsonObject = field(default_factory=dict, compare=False, repr=False)
    """Keys a newer Rankwatch adds, kept as stored."""

    KEYS = frozenset({"rank", "before"})

    def to_wire(self) -> JsonObject:
        return {"rank": self.rank, "before": self.before, **self.extra}

    @classmethod
    def from_wire(cls, data: Mapping[str, object]) -> FinishedRank:
        """Lenient: a rank or time that is missing or not a number is unknown."""
        return cls(rank=as_int(data.get("rank")), before=as_float(data.get("before")),
                   extra=_extra(data, cls.KEYS))


@dataclass(frozen=True)
class LostRunner:
    """What the watchdog found when the run's runner died without recording the end
    (``summary["runner_lost"]``, written by ``runner.store.lost_run``)."""

    runner_pid: int | None = None
    died: float | None = None
    """When the watchdog saw it gone (seconds since 1970)."""
    processes_killed: int | None = None
    """Processes of the job the watchdog had to SIGKILL."""
    stored_metrics: int | None = None
    """Metric records the store holds of the run (``stored.metrics``); None: not counted."""
    stored_logs: int | None = None
    """Log lines the store holds of the run (``stored.logs``)."""
    newest_record_t: float | None = None
    """When the newest stored record was made; None: nothing stored."""
    not_stored: str | None = None
    """What cannot be counted, in words."""
    extra: JsonObject = field(default_factory=dict, compare=False, repr=False)
    """Keys a newer Rankwatch adds, kept as stored."""

    KEYS = frozenset({"runner_pid", "died", "processes_killed", "stored", "newest_record_t", "not_stored"})

    def to_wire(self) -> JsonObject:
        return {"runner_pid": self.runner_pid, "died": self.died, "processes_killed": self.processes_killed,
                "stored": {"metrics": self.stored_metrics, "logs": self.stored_logs},
                "newest_record_t": self.newest_record_t, "not_stored": self.not_stored, **self.extra}

    @classmethod
    def from_wire(cls, data: Mapping[str, object]) -> LostRunner:
        """Lenient: what is missing or of the wrong type is unknown."""
        stored = data.get("stored")
        stored = stored if isinstance(stored, Mapping) else {}
        return cls(runner_pid=as_int(data.get("runner_pid")), died=as_float(data.get("died")),
                   processes_killed=as_int(data.get("processes_killed")),
                   stored_metrics=as_int(stored.get("metrics")), stored_logs=as_int(stored.get("logs")),
                   newest_record_t=as_float(data.get("newest_record_t")), not_stored=as_text(data.get("not_stored")),
                   extra=_extra(data, cls.KEYS))


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
    finished: tuple[FinishedRank, ...] = ()
    """Ranks of a failed run whose script ran to its end."""
    diagnostics: StoredDiagnostics | None = None
    """What the monitors found (``Findings.stored``)."""
    stopped_by: str | None = None
    losses: tuple[RankLosses, ...] = ()
    """Each rank that lost records (``Hub.losses``)."""
    store_incomplete: str | None = None
    runner_lost: LostRunner | None = None
    """The runner died without recording the end (``runner.store.lost_run``)."""
    extra: JsonObject = field(default_factory=dict, compare=False)
    """Keys other producers add to the stored summary (Slurm's record), untouched."""

    def to_wire(self) -> JsonObject:
        wire: JsonObject = {"outcome": self.outcome.value, "headline": self.headline, "exit_code": self.exit_code}
        if self.outcome == Outcome.FAILED or self.first_failure is not None or self.other_failures:
            wire["first_failure"] = self.first_failure.to_wire() if self.first_failure is not None else None
            wire["other_failures"] = [failure.to_wire() for failure in self.other_failures]
            wire["hints"] = [hint.to_json() for hint in self.hints]
        elif self.hints:
            wire["hints"] = [hint.to_json() for hint in self.hints]
        optional = {"finished": [item.to_wire() for item in self.finished],
                    "diagnostics": None if self.diagnostics is None else self.diagnostics.to_wire(),
                    "stopped_by": self.stopped_by, "losses": [row.to_wire() for row in self.losses],
                    "store_incomplete": self.store_incomplete,
                    "runner_lost": None if self.runner_lost is None else self.runner_lost.to_wire()}
        wire.update({key: value for key, value in optional.items() if value})
        wire.update(self.extra)
        return wire

    @classmethod
    def from_wire(cls, data: Mapping[str, object]) -> RunSummary:
        """Lenient, as every stored summary is read: an unknown outcome is ``failed`` only when a
        failure is named, else ``stopped``; what is missing or malformed is left out."""
        try:
            outcome = Outcome(str(data.get("outcome")))
        except ValueError:
            outcome = Outcome.FAILED if isinstance(data.get("first_failure"), dict) else Outcome.STOPPED
        first, diagnostics, lost = data.get("first_failure"), data.get("diagnostics"), data.get("runner_lost")
        stopped_by, store_incomplete = data.get("stopped_by"), data.get("store_incomplete")
        return cls(
            outcome=outcome, headline=str(data.get("headline") or ""), exit_code=as_int(data.get("exit_code")),
            first_failure=RankFailure.from_wire(first) if isinstance(first, dict) else None,
            other_failures=tuple(RankFailure.from_wire(o) for o in _list(data.get("other_failures"))
                                 if isinstance(o, dict)),
            hints=tuple(Hint.from_json(h) for h in _list(data.get("hints")) if isinstance(h, dict)),
            finished=tuple(FinishedRank.from_wire(item) for item in _list(data.get("finished")) if isinstance(item, dict)),
            diagnostics=StoredDiagnostics.from_wire(diagnostics) if isinstance(diagnostics, dict) else None,
            stopped_by=stopped_by if isinstance(stopped_by, str) else None,
            losses=tuple(RankLosses.from_wire(row) for row in _list(data.get("losses")) if isinstance(row, dict)),
            store_incomplete=store_incomplete if isinstance(store_incomplete, str) else None,
            runner_lost=LostRunner.from_wire(lost) if isinstance(lost, dict) else None,
            extra={key: value for key, value in data.items() if key not in FIELDS})


def _list(value: object) -> list[object]:
    return value if isinstance(value, list) else []
