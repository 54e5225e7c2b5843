"""What the live monitors found during a run, kept for the end-of-run summary.

The monitors (stalls, stragglers, consistency, stack captures) publish events as
they find things; this is the short record of the same findings that triage puts
in the run's summary (``summary["diagnostics"]``), so that ``rankwatch run`` and
``runs show`` can say "rank 0 hung in train.py:36" after the run ended.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from rankwatch.protocol import as_float, as_int
from runner.diagnosis.bottleneck_record import BottleneckRecord
from runner.diagnosis.flight_recorder import FlightRecorderFinding
from runner.diagnosis.hang_verdict import HangVerdict
from runner.diagnosis.stacks import MissingStack, SourceFrame, StackAnalysis, int_list
from runner.diagnosis.straggler_record import StragglerRecord
from runner.runstate.messages import JsonObject

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

    def to_json(self) -> JsonObject:
        data: JsonObject = {"rank": self.rank, "step": self.step, "since": self.since, "seconds": self.seconds,
                                "threshold": self.threshold, "resumed_after": self.resumed_after}
        if self.finished_after is not None:
            data["finished_after"] = self.finished_after
        return data

    @classmethod
    def from_wire(cls, data: Mapping[str, object]) -> StallFinding | None:
        """A stall as a stored summary keeps it; None without a rank. A number that is missing reads as 0."""
        rank = as_int(data.get("rank"))
        if rank is None:
            return None
        return cls(rank=rank, step=as_int(data.get("step")), since=as_float(data.get("since")) or 0.0,
                   seconds=as_float(data.get("seconds")) or 0.0, threshold=as_float(data.get("threshold")) or 0.0,
                   resumed_after=as_float(data.get("resumed_after")),
                   finished_after=as_float(data.get("finished_after")))


@dataclass(frozen=True)
class Divergence:
    """Parameters that differed across replicas after an optimizer step (``diagnostics.divergences``)."""

    step: int | None
    """None only in a record read back without one."""
    ranks: list[int]
    """The ranks whose fingerprint differed from the reference's."""
    reference: list[int]
    """The ranks that agreed (the majority)."""
    message: str

    def to_json(self) -> JsonObject:
        return {"step": self.step, "ranks": list(self.ranks), "reference": list(self.reference),
                "message": self.message}

    @classmethod
    def from_wire(cls, data: Mapping[str, object]) -> Divergence:
        """As the summary keeps it, or a ``divergence`` event's fields with its message; a step that is
        missing reads as None."""
        return cls(step=as_int(data.get("step")), ranks=int_list(data.get("ranks")),
                   reference=int_list(data.get("reference")), message=str(data.get("message") or ""))


NoticeReport = JsonObject
"""One rank's ``notice`` behind a launcher finding: ``t`` and the facts its worker sent (open: each check
sends its own, read with ``.get``)."""


@dataclass(frozen=True)
class LauncherFinding:
    """A script that does not fit the way torchrun starts it (``runner.diagnosis.launcher``,
    ``independent_ranks``): every rank that showed it, worded (``diagnostics.launcher``)."""

    key: str
    """A ``HintKey`` value: ``self_spawn``, ``no_process_group``..."""
    level: str
    """``warning`` or ``info`` (nothing to fix if it is the intent)."""
    ranks: list[int]
    title: str
    cause: str
    advice: str

    def to_json(self) -> JsonObject:
        return {"key": self.key, "level": self.level, "ranks": self.ranks, "title": self.title, "cause": self.cause,
                "advice": self.advice}

    @classmethod
    def from_wire(cls, data: Mapping[str, object]) -> LauncherFinding:
        """As the summary keeps it, or a ``launch_mismatch`` event's fields (the same keys)."""
        return cls(key=str(data.get("key") or ""), level=str(data.get("level") or "warning"),
                   ranks=int_list(data.get("ranks")), title=str(data.get("title") or ""),
                   cause=str(data.get("cause") or ""), advice=str(data.get("advice") or ""))


@dataclass(frozen=True)
class StackPlaceBrief:
    """Where one rank was in a stack capture, short (``diagnostics.stacks.places``)."""

    rank: int
    kind: str
    op: str | None
    what: str
    frame: JsonObject | None
    """The deepest frame of the user's own code, with its source line (``Place.to_json``'s)."""

    def to_json(self) -> JsonObject:
        return {"rank": self.rank, "kind": self.kind, "op": self.op, "what": self.what, "frame": self.frame}

    @classmethod
    def from_wire(cls, data: Mapping[str, object]) -> StackPlaceBrief | None:
        rank = as_int(data.get("rank"))
        if rank is None:
            return None
        frame = data.get("frame")
        return cls(rank=rank, kind=str(data.get("kind") or ""), op=_text(data.get("op")), what=str(data.get("what") or ""),
                   frame=dict(frame) if isinstance(frame, Mapping) else None)


@dataclass(frozen=True)
class StackOutlier:
    """The odd ranks of a capture and where they were, as a summary of an earlier version kept it
    (``diagnostics.stacks.outlier``; this version keeps the ``verdict`` instead)."""

    ranks: list[int]
    frame: SourceFrame | None

    def to_json(self) -> JsonObject:
        frame = None if self.frame is None else {"file": self.frame.file, "line": self.frame.line,
                                                 "function": self.frame.function}
        return {"ranks": self.ranks, "frame": frame}

    @classmethod
    def from_wire(cls, data: Mapping[str, object]) -> StackOutlier:
        frame = data.get("frame")
        return cls(ranks=int_list(data.get("ranks")),
                   frame=SourceFrame.from_wire(frame) if isinstance(frame, Mapping) and frame else None)


@dataclass(frozen=True)
class StacksFinding:
    """The last stack capture, short (``diagnostics.stacks``)."""

    reason: str
    t: float | None
    """When it was taken; None only in a record read back without it."""
    ranks: list[int]
    verdict: HangVerdict
    places: list[StackPlaceBrief]
    missing: list[MissingStack]
    path: str | None
    """The capture's text file (its JSON file when it has none)."""
    json_path: str | None
    outlier: StackOutlier | None = None
    """Only in a summary of an earlier version, which has no verdict (its ``message`` is empty then)."""

    @classmethod
    def of(cls, result: StackAnalysis) -> StacksFinding:
        """From a stack capture (``StackCapture``'s ``on_result``)."""
        places = []
        for rank in sorted(result.places):
            place = result.places[rank]
            frame = None if place.frame is None else {**place.frame.to_json(), "code": place.code}
            places.append(StackPlaceBrief(rank=rank, kind=place.kind, op=place.op, what=place.what, frame=frame))
        files = result.files
        path = files.path if files is not None else None
        return cls(reason=result.reason, t=result.t, ranks=result.ranks, verdict=result.verdict, places=places,
                   missing=result.missing, path=(files.text_path if files is not None else None) or path,
                   json_path=path)

    def to_json(self) -> JsonObject:
        data: JsonObject = {"reason": self.reason, "t": self.t, "ranks": self.ranks, "verdict": self.verdict.to_json(),
                "places": [place.to_json() for place in self.places],
                "missing": [item.to_json() for item in self.missing], "path": self.path, "json_path": self.json_path}
        if self.outlier is not None:
            data["outlier"] = self.outlier.to_json()
        return data

    @classmethod
    def from_wire(cls, data: Mapping[str, object]) -> StacksFinding:
        """As the summary keeps it. One stored by an earlier version has no verdict: an empty one, whose
        message is empty (its capture file, re-judged, says more)."""
        verdict, outlier = data.get("verdict"), data.get("outlier")
        places = [StackPlaceBrief.from_wire(place) for place in _objects(data.get("places"))]
        missing = [MissingStack.from_wire(item) for item in _objects(data.get("missing"))]
        return cls(reason=str(data.get("reason") or ""), t=as_float(data.get("t")),
                   ranks=int_list(data.get("ranks")),
                   verdict=HangVerdict.from_wire(verdict if isinstance(verdict, Mapping) else {}),
                   places=[place for place in places if place is not None],
                   missing=[item for item in missing if item is not None],
                   path=_text(data.get("path")), json_path=_text(data.get("json_path")),
                   outlier=StackOutlier.from_wire(outlier) if isinstance(outlier, Mapping) else None)


@dataclass
class Findings:
    stalls: list[StallFinding] = field(default_factory=list)
    """One per stall of a rank, the newest ``KEEP_STALLS``."""
    stragglers: dict[int, StragglerRecord] = field(default_factory=dict)
    """rank -> its worst straggler finding (``straggler_record``); after ``StragglerMonitor.conclude`` only the
    ranks named for a share of their steps (``share``)."""
    divergences: list[Divergence] = field(default_factory=list)
    """The first ``KEEP_DIVERGENCES`` times parameters differed across replicas."""
    consistency_checks: int = 0
    """Steps whose parameter fingerprints were compared on every rank."""
    stacks: StacksFinding | None = None
    """The last stack capture, short."""
    flight_recorder: FlightRecorderFinding | None = None
    """The last Flight Recorder comparison of stuck ranks."""
    launcher: dict[str, LauncherFinding] = field(default_factory=dict)
    """key -> a launcher mismatch (``runner.diagnosis.launcher``)."""
    bottleneck: BottleneckRecord | None = None
    """The whole run's bottleneck verdict, with each rank's (``runner.diagnosis.bottleneck``)."""

    def add_stall(self, record: StallFinding) -> None:
        self.stalls.append(record)
        del self.stalls[:-KEEP_STALLS]

    def add_divergence(self, record: Divergence) -> None:
        if len(self.divergences) < KEEP_DIVERGENCES:
            self.divergences.append(record)

    def set_stacks(self, result: StackAnalysis) -> None:
        self.stacks = StacksFinding.of(result)

    def set_launcher(self, key: str, record: LauncherFinding) -> None:
        self.launcher[key] = record

    def stored(self) -> StoredDiagnostics | None:
        """The ``diagnostics`` block of the summary, or None when nothing was found or checked."""
        stored = StoredDiagnostics(
            stalls=tuple(self.stalls), stacks=self.stacks, flight_recorder=self.flight_recorder,
            launcher=tuple(self.launcher.values()),
            stragglers=tuple(self.stragglers[rank] for rank in sorted(self.stragglers)),
            bottleneck=self.bottleneck, divergences=tuple(self.divergences), consistency_checks=self.consistency_checks)
        return stored if stored.to_wire() else None

    def to_json(self) -> JsonObject | None:
        """The ``diagnostics`` block as stored (``StoredDiagnostics.to_wire``), or None when empty."""
        stored = self.stored()
        return None if stored is None else stored.to_wire()


@dataclass(frozen=True)
class StoredDiagnostics:
    """A summary's ``diagnostics`` block read back (``Findings.to_json`` wrote it, this version or an
    earlier one): every finding typed, what cannot be read left out."""

    stalls: tuple[StallFinding, ...] = ()
    stacks: StacksFinding | None = None
    flight_recorder: FlightRecorderFinding | None = None
    launcher: tuple[LauncherFinding, ...] = ()
    stragglers: tuple[StragglerRecord, ...] = ()
    bottleneck: BottleneckRecord | None = None
    divergences: tuple[Divergence, ...] = ()
    consistency_checks: int = 0

    def to_wire(self) -> JsonObject:
        """The block as a summary stores it: only what was found or checked, in this order."""
        data: JsonObject = {}
        if self.stalls:
            data["stalls"] = [stall.to_json() for stall in self.stalls]
        if self.stacks is not None:
            data["stacks"] = self.stacks.to_json()
        if self.flight_recorder is not None:
            data["flight_recorder"] = self.flight_recorder.to_json()
        if self.launcher:
            data["launcher"] = [record.to_json() for record in self.launcher]
        if self.stragglers:
            data["stragglers"] = [record.to_wire() for record in self.stragglers]
        if self.bottleneck is not None:
            data["bottleneck"] = self.bottleneck.to_wire()
        if self.divergences:
            data["divergences"] = [divergence.to_json() for divergence in self.divergences]
        if self.consistency_checks:
            data["consistency_checks"] = self.consistency_checks
        return data

    @classmethod
    def from_wire(cls, data: Mapping[str, object] | None) -> StoredDiagnostics:
        if not isinstance(data, Mapping):
            return cls()

        def objects(key: str) -> list[Mapping[str, object]]:
            return _objects(data.get(key))

        def one(key: str) -> Mapping[str, object] | None:
            found = data.get(key)
            return found if isinstance(found, Mapping) and found else None  # an empty block says nothing

        stalls = (StallFinding.from_wire(item) for item in objects("stalls"))
        stacks, flight, bottleneck = one("stacks"), one("flight_recorder"), one("bottleneck")
        return cls(stalls=tuple(stall for stall in stalls if stall is not None),
                   stacks=None if stacks is None else StacksFinding.from_wire(stacks),
                   flight_recorder=None if flight is None else FlightRecorderFinding.from_wire(flight),
                   launcher=tuple(LauncherFinding.from_wire(item) for item in objects("launcher")),
                   stragglers=tuple(StragglerRecord.from_wire(item) for item in objects("stragglers")),
                   bottleneck=None if bottleneck is None else BottleneckRecord.from_wire(bottleneck),
                   divergences=tuple(Divergence.from_wire(item) for item in objects("divergences")),
                   consistency_checks=as_int(data.get("consistency_checks")) or 0)


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _objects(value: object) -> list[Mapping[str, object]]:
    """The objects of a JSON array as a summary keeps it (other items, or a non-array, give none)."""
    return [item for item in value if isinstance(item, Mapping)] if isinstance(value, list) else []
