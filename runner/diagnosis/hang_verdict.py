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
from typing import Any

from runner.diagnosis.stack_places import Place, frame_text, plural
from runner.format import ranks_text

CULPRIT, MISMATCH, HELD_UP, ALL_WAITING, NO_COLLECTIVE, SAME_PLACE, PROGRESSING, EMPTY = (
    "culprit", "mismatch", "held_up", "all_waiting", "no_collective", "same_place", "progressing", "empty")
ERROR, WARNING, INFO = "error", "warning", "info"


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


def judge(places: dict[int, Place], progress: dict[int, dict[str, Any]] | None,
          missing: list[int] | None = None) -> dict[str, Any]:
    """The verdict for one capture (see the module docstring); ``places``: rank -> where it is."""
    missing = sorted(missing or [])
    progress = progress or {}
    progress_known = any(progress.get(rank, {}).get("progressing") is not None for rank in places)
    moving = sorted(rank for rank in places if progress.get(rank, {}).get("progressing") is True)
    stuck = sorted(rank for rank in places if rank not in moving)
    verdict: dict[str, Any] = {"culprits": [], "waiting": [], "collective": None, "progressing": moving,
                               "details": [], "progress_known": progress_known}
    if not places:
        return {**verdict, "kind": EMPTY, "level": INFO, "message": "no rank's stack could be read"}
    if not stuck:
        parts = [f"{ranks_text(ranks)} {place.what if len(ranks) == 1 else plural(place.what)} at "
                 f"{where_text(place, full=False)}" for ranks, place in _group_by_place(moving, places)]
        return {**verdict, "kind": PROGRESSING, "level": INFO,
                "message": f"all {len(places)} ranks are progressing (none stalled); a snapshot of where each was",
                "details": parts}
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
    verdict.update(details=details, collective=collective)
    found = _blame(places, waiting, elsewhere, ops, collective, missing, verdict)
    if not progress_known and found["level"] == ERROR:
        found.update(level=WARNING, message="if the ranks are stuck (no step telemetry to tell), " + found["message"])
    return found


def _blame(places: dict[int, Place], waiting: list[int], elsewhere: list[int], ops: Counter, collective: str | None,
           missing: list[int], verdict: dict[str, Any]) -> dict[str, Any]:
    if waiting and elsewhere:
        waiters = [rank for rank in waiting if places[rank].op == collective]
        what = places[waiters[0]].what if len(waiters) == 1 else plural(places[waiters[0]].what)
        message = (f"{ranks_text(elsewhere)} {_is(elsewhere, 'is the culprit', 'are the culprits')}: "
                   f"{ranks_text(waiters)} {what}, {ranks_text(elsewhere)} {_is(elsewhere, 'is', 'are')} "
                   "in no collective")
        if len(elsewhere) == 1:
            place = places[elsewhere[0]]
            message += f" (at {frame_text(place.frame or place.innermost, full=False)})"
        return {**verdict, "kind": CULPRIT, "level": ERROR, "message": message, "culprits": elsewhere,
                "waiting": waiting}
    if waiting and len(ops) > 1:
        counts = sorted(ops.values())
        odd = ([rank for rank in waiting if ops[places[rank].op] == counts[0]]
               if counts[0] < counts[-1] else [])
        parts = "; ".join(f"{ranks_text(ranks)} in {place.op}" for ranks, place in
                          _group_by_place(waiting, places))
        message = f"the stalled ranks wait in different collectives ({parts}): they took different code paths"
        if odd:
            message = f"{ranks_text(odd)} {_is(odd, 'is', 'are')} the odd one out: " + message
        return {**verdict, "kind": MISMATCH, "level": ERROR, "message": message, "culprits": odd,
                "waiting": waiting}
    working = [rank for rank in verdict["progressing"] if not places[rank].waiting]
    if waiting and working:
        waiters = [rank for rank in waiting if places[rank].op == collective]
        what = places[waiters[0]].what if len(waiters) == 1 else plural(places[waiters[0]].what)
        message = (f"{ranks_text(waiters)} {what} for {ranks_text(working)}, which "
                   f"{_is(working, 'is', 'are')} working outside any collective")
        if len(working) == 1:
            place = places[working[0]]
            message += f" (at {frame_text(place.frame or place.innermost, full=False)})"
        message += ": work on some ranks only (an evaluation, a checkpoint) holds up the others"
        return {**verdict, "kind": HELD_UP, "level": WARNING, "message": message, "culprits": working,
                "waiting": waiting}
    if waiting:
        every = "every stalled rank" if verdict["progress_known"] else "every rank"
        message = f"{every if len(waiting) > 1 else ranks_text(waiting)} {places[waiting[0]].what}: "
        message += (f"{ranks_text(missing)} gave no stack and may be the one missing" if missing else
                    "no rank is missing from it by its stack (a rank on another path, the network, or "
                    "mismatched shapes or groups)")
        return {**verdict, "kind": ALL_WAITING, "level": WARNING, "message": message, "waiting": waiting}
    groups = _group_by_place(elsewhere, places)
    if len(groups) == 1:
        ranks, place = groups[0]
        stalled = "stalled ranks" if verdict["progress_known"] else "ranks"
        message = (f"{f'all {len(ranks)} {stalled} are' if len(ranks) > 1 else ranks_text(ranks) + ' is'}"
                   f" at the same place, in no collective: {where_text(place, full=False)}")
        if place.kind != "user":
            message += f", where {'they ' + plural(place.what) if len(ranks) > 1 else 'it ' + place.what}"
        return {**verdict, "kind": SAME_PLACE, "level": WARNING, "message": message}
    return {**verdict, "kind": NO_COLLECTIVE, "level": WARNING,
            "message": f"no {'stalled ' if verdict['progress_known'] else ''}rank is in a collective: " + "; ".join(
                f"{ranks_text(ranks)} at {where_text(place, full=False)}" for ranks, place in groups)}
