"""Who holds up the others: the verdict of one stack capture, from where each rank is and whether it progresses.

The answer to a hang is the rank that is *not* in the collective the others wait
in (allenai/OLMo#709: "py-spy every process and find the one that differs"; the
one that differs is not enough, because with two ranks both differ). So:

1. Ranks that progress (their step moved within the stall window) are never
   blamed: a capture of a healthy run is a snapshot, not a disagreement.
2. Of the ranks that do not progress, those waiting for other ranks
   (``stack_places.WAITING_KINDS``) name the collective; the most common one is
   *the* collective they wait in.
3. Every stuck rank that is in no collective is a culprit: its deepest frame of
   the user's own code, with the source line, is where it is stuck.
4. When every stuck rank waits, but in different collectives, the ranks took
   different code paths (the odd ones out are named). When they wait in the same
   one while other ranks progress outside any collective, those are who they wait
   for: work on some ranks only (rank 0 evaluating while the others wait in the
   barrier after it) holds up the rest, a warning that names them. When all wait
   in the same one and nobody works elsewhere, no rank is missing from it by its
   stack (the culprit may be a rank whose stack could not be read, or the
   collective itself: network, shapes, groups).

Progress comes with the capture (``stack_capture``): per rank whether it is
stalled, its step and how long since it last moved. Without step telemetry
(``--no-instrument``) progress is unknown: a capture taken on request then
judges from the stacks alone and says so.

The verdict (``judge``) is JSON, stored in the ``stacks`` event::

    {"kind": "culprit" | "mismatch" | "held_up" | "all_waiting" | "no_collective" | "same_place"
             | "progressing" | "empty",
     "level": "error" | "warning" | "info",   # error: a culprit (or mismatch) is named
     "message": "rank 1 is the culprit: rank 0 waits in barrier, rank 1 is in no collective",
     "culprits": [1], "waiting": [0], "collective": "barrier", "progressing": [],
     "details": ["rank 1 is at /abs/x.py:33 in helper (<module> → helper): time.sleep(0.2)", ...],
     "progress_known": true}
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any

from runner.diagnosis.progress import RankProgress
from runner.diagnosis.stack_places import Place, frame_text, plural
from runner.format import ranks_text
from runner.runstate.messages import JsonObject


class VerdictKind(str, Enum):
    """What one capture shows (module docstring); ``culprit`` and ``mismatch`` name ranks to blame."""

    CULPRIT = "culprit"
    MISMATCH = "mismatch"
    HELD_UP = "held_up"
    ALL_WAITING = "all_waiting"
    NO_COLLECTIVE = "no_collective"
    SAME_PLACE = "same_place"
    PROGRESSING = "progressing"
    EMPTY = "empty"


class VerdictLevel(str, Enum):
    """``error``: a culprit (or a mismatch) is named; ``warning``: a hang without one; ``info``: nothing wrong."""

    ERROR = "error"
    WARNING = "warning"
    INFO = "info"


@dataclass(frozen=True)
class HangVerdict:
    """``judge``'s answer for one capture; ``to_json`` is what the ``stacks`` event carries."""

    kind: VerdictKind
    level: VerdictLevel
    message: str
    culprits: list[int] = field(default_factory=list)
    waiting: list[int] = field(default_factory=list)
    collective: str | None = None
    progressing: list[int] = field(default_factory=list)
    details: list[str] = field(default_factory=list)
    progress_known: bool = False

    def to_json(self) -> JsonObject:
        return {"culprits": self.culprits, "waiting": self.waiting, "collective": self.collective,
                "progressing": self.progressing, "details": self.details, "progress_known": self.progress_known,
                "kind": self.kind.value, "level": self.level.value, "message": self.message}

    @classmethod
    def from_wire(cls, data: Mapping[str, Any]) -> HangVerdict:
        """As a capture or a summary keeps it (``to_json``). A kind or level this version does not know
        reads as ``empty`` and ``info``: nothing is blamed on words it cannot read."""
        try:
            kind = VerdictKind(data.get("kind"))
        except ValueError:
            kind = VerdictKind.EMPTY
        try:
            level = VerdictLevel(data.get("level"))
        except ValueError:
            level = VerdictLevel.INFO

        def ranks(key: str) -> list[int]:
            found = data.get(key)
            return [rank for rank in found if type(rank) is int] if isinstance(found, list) else []

        details = data.get("details")
        collective = data.get("collective")
        return cls(kind=kind, level=level, message=str(data.get("message") or ""), culprits=ranks("culprits"),
                   waiting=ranks("waiting"), collective=collective if isinstance(collective, str) else None,
                   progressing=ranks("progressing"),
                   details=[str(detail) for detail in details] if isinstance(details, list) else [],
                   progress_known=bool(data.get("progress_known")))


@dataclass(frozen=True)
class _Facts:
    """What every verdict of one capture shares, before the kind is decided."""

    progressing: list[int]
    progress_known: bool
    details: list[str] = field(default_factory=list)
    collective: str | None = None

    def verdict(self, kind: VerdictKind, level: VerdictLevel, message: str, culprits: list[int] | None = None,
                waiting: list[int] | None = None) -> HangVerdict:
        return HangVerdict(kind, level, message, culprits=culprits or [], waiting=waiting or [],
                           collective=self.collective, progressing=self.progressing, details=self.details,
                           progress_known=self.progress_known)


def _is(ranks: list[int], one: str, many: str) -> str:
    return one if len(ranks) == 1 else many


def where_text(place: Place, full: bool = True) -> str:
    """``/abs/x.py:33 in helper (<module> → helper): time.sleep(0.2)`` -- the user's frame, its chain and line."""
    if place.frame is None:
        return frame_text(place.innermost, full)
    text = frame_text(place.frame, full)
    if len(place.chain) > 1:
        text += f" ({' → '.join(place.chain)})"
    if place.code:
        text += f": {place.code}"
    return text


def _group_by_place(ranks: list[int], places: dict[int, Place]) -> list[tuple[list[int], Place]]:
    groups: dict[tuple, list[int]] = {}
    for rank in sorted(ranks):
        place = places[rank]
        groups.setdefault((place.kind, place.op, place.frame), []).append(rank)
    return [(members, places[members[0]]) for members in groups.values()]


def _detail(ranks: list[int], place: Place) -> str:
    who = ranks_text(ranks)
    if place.waiting:
        called = f", called at {where_text(place)}" if place.frame is not None else ""
        return f"{who} {place.what if len(ranks) == 1 else plural(place.what)}{called}"
    return f"{who} {_is(ranks, 'is', 'are')} at {where_text(place)}" + (
        "" if place.kind == "user" else f" ({place.what if len(ranks) == 1 else plural(place.what)})")


def _progressing(progress: dict[int, RankProgress], rank: int) -> bool | None:
    known = progress.get(rank)
    return None if known is None else known.progressing


def judge(places: dict[int, Place], progress: dict[int, RankProgress] | None,
          missing: list[int] | None = None) -> HangVerdict:
    """The verdict for one capture (see the module docstring); ``places``: rank -> where it is."""
    missing = sorted(missing or [])
    progress = progress or {}
    progress_known = any(_progressing(progress, rank) is not None for rank in places)
    moving = sorted(rank for rank in places if _progressing(progress, rank) is True)
    stuck = sorted(rank for rank in places if rank not in moving)
    facts = _Facts(progressing=moving, progress_known=progress_known)
    if not places:
        return facts.verdict(VerdictKind.EMPTY, VerdictLevel.INFO, "no rank's stack could be read")
    if not stuck:
        parts = [f"{ranks_text(ranks)} {place.what if len(ranks) == 1 else plural(place.what)} at "
                 f"{where_text(place, full=False)}" for ranks, place in _group_by_place(moving, places)]
        return replace(facts, details=parts).verdict(
            VerdictKind.PROGRESSING, VerdictLevel.INFO, f"all {len(places)} ranks are progressing (none stalled); a snapshot of where each was")
    waiting = [rank for rank in stuck if places[rank].waiting]
    elsewhere = [rank for rank in stuck if not places[rank].waiting]
    ops = Counter(places[rank].op for rank in waiting)
    collective = None
    if ops:
        top = max(ops.values())
        collective = next(places[rank].op for rank in waiting if ops[places[rank].op] == top)
    details = [_detail(ranks, place) for ranks, place in _group_by_place(elsewhere, places)]
    details += [_detail(ranks, place) for ranks, place in _group_by_place(waiting, places)]
    if moving:
        details.append(f"{ranks_text(moving)} {_is(moving, 'is', 'are')} progressing, not held up")
    if not progress_known:
        details.append("progress unknown (no step telemetry): judged from the stacks alone")
    facts = replace(facts, details=details, collective=collective)
    found = _blame(places, waiting, elsewhere, ops, collective, missing, facts)
    if not progress_known and found.level == VerdictLevel.ERROR:
        found = replace(found, level=VerdictLevel.WARNING,
                        message="if the ranks are stuck (no step telemetry to tell), " + found.message)
    return found


def _blame(places: dict[int, Place], waiting: list[int], elsewhere: list[int], ops: Counter[str | None],
           collective: str | None, missing: list[int], facts: _Facts) -> HangVerdict:
    if waiting and elsewhere:
        waiters = [rank for rank in waiting if places[rank].op == collective]
        what = places[waiters[0]].what if len(waiters) == 1 else plural(places[waiters[0]].what)
        message = (f"{ranks_text(elsewhere)} {_is(elsewhere, 'is the culprit', 'are the culprits')}: "
                   f"{ranks_text(waiters)} {what}, {ranks_text(elsewhere)} {_is(elsewhere, 'is', 'are')} "
                   "in no collective")
        if len(elsewhere) == 1:
            place = places[elsewhere[0]]
            message += f" (at {frame_text(place.frame or place.innermost, full=False)})"
        return facts.verdict(VerdictKind.CULPRIT, VerdictLevel.ERROR, message, culprits=elsewhere, waiting=waiting)
    if waiting and len(ops) > 1:
        counts = sorted(ops.values())
        odd = ([rank for rank in waiting if ops[places[rank].op] == counts[0]]
               if counts[0] < counts[-1] else [])
        parts = "; ".join(f"{ranks_text(ranks)} in {place.op}" for ranks, place in
                          _group_by_place(waiting, places))
        message = f"the stalled ranks wait in different collectives ({parts}): they took different code paths"
        if odd:
            message = f"{ranks_text(odd)} {_is(odd, 'is', 'are')} the odd one out: " + message
        return facts.verdict(VerdictKind.MISMATCH, VerdictLevel.ERROR, message, culprits=odd, waiting=waiting)
    working = [rank for rank in facts.progressing if not places[rank].waiting]
    if waiting and working:
        waiters = [rank for rank in waiting if places[rank].op == collective]
        what = places[waiters[0]].what if len(waiters) == 1 else plural(places[waiters[0]].what)
        message = (f"{ranks_text(waiters)} {what} for {ranks_text(working)}, which "
                   f"{_is(working, 'is', 'are')} working outside any collective")
        if len(working) == 1:
            place = places[working[0]]
            message += f" (at {frame_text(place.frame or place.innermost, full=False)})"
        message += ": work on some ranks only (an evaluation, a checkpoint) holds up the others"
        return facts.verdict(VerdictKind.HELD_UP, VerdictLevel.WARNING, message, culprits=working, waiting=waiting)
    if waiting:
        every = "every stalled rank" if facts.progress_known else "every rank"
        message = f"{every if len(waiting) > 1 else ranks_text(waiting)} {places[waiting[0]].what}: "
        message += (f"{ranks_text(missing)} gave no stack and may be the one missing" if missing else
                    "no rank is missing from it by its stack (a rank on another path, the network, or "
                    "mismatched shapes or groups)")
        return facts.verdict(VerdictKind.ALL_WAITING, VerdictLevel.WARNING, message, waiting=waiting)
    groups = _group_by_place(elsewhere, places)
    if len(groups) == 1:
        ranks, place = groups[0]
        stalled = "stalled ranks" if facts.progress_known else "ranks"
        message = (f"{f'all {len(ranks)} {stalled} are' if len(ranks) > 1 else ranks_text(ranks) + ' is'}"
                   f" at the same place, in no collective: {where_text(place, full=False)}")
        if place.kind != "user":
            message += f", where {'they ' + plural(place.what) if len(ranks) > 1 else 'it ' + place.what}"
        return facts.verdict(VerdictKind.SAME_PLACE, VerdictLevel.WARNING, message)
    return facts.verdict(VerdictKind.NO_COLLECTIVE, VerdictLevel.WARNING,
                         f"no {'stalled ' if facts.progress_known else ''}rank is in a collective: " + "; ".join(
                             f"{ranks_text(ranks)} at {where_text(place, full=False)}" for ranks, place in groups))
