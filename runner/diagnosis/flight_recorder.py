"""Read every rank's Flight Recorder side by side and name the rank whose collectives are out of step.

Each rank numbers the collectives of a process group 1, 2, 3... in the order it
calls them (``collective_seq_id``). In a healthy job, collective #N is the same op
with the same sizes on every rank. A hang shows as:

* ranks that entered #N (still pending: past the group's ``last_completed_collective``)
  while another rank's last is below N: that rank *never entered* #N -- it is
  stuck elsewhere (user code, data loading, another group);
* ranks whose #N is a different op or different sizes: the ranks called
  different collectives (one skipped or added one earlier); the minority is named.

Input: ``{rank: record}``, each record as ``rankwatch._flight_recorder.snapshot``
makes it (torch's dump: ``pg_config``, ``pg_status``, ``entries``) or ``{"error": ...}``.
NCCL's own dump-on-timeout files (``TORCH_FR_DUMP_TEMP_FILE<rank>``, a pickle of the
same dict) are read with ``read_dump_file``.

The records are read by each rank when its stack file grew, so at slightly different
moments: in a job that progresses, rank 0 may already be in #1599 when rank 1's record,
read a moment earlier, ends at #1598. Such a snapshot says nothing about who is missing
from what, so ``analyse`` compares collectives only when ranks are stuck (``stuck``: the
ranks that made no progress, as the stall monitor saw them; None when progress is
unknown, e.g. without step telemetry): when every rank progresses it says so and names
nobody.

Output (``analyse``)::

    {message: str | None, culprits: [rank], seq: int | None, group: str | None,
     ranks: {rank: {group: {entered: {...}, completed: int | None}}}, errors: {rank: why},
     lines: [str]}   # one line per rank for the CLI/GUI
"""

from __future__ import annotations

import pickle
from collections import Counter
from collections.abc import Collection
from pathlib import Path
from typing import Any

from runner.format import ranks_text

MAX_DUMP_BYTES = 64 << 20


def analyse(records: dict[int, dict[str, Any]], stuck: Collection[int] | None = None) -> dict[str, Any]:
    """Compare the ranks' Flight Recorders (module docstring); ``stuck``: the ranks that made no progress
    (None: not known), an empty one: every rank progresses, so nothing is compared."""
    errors = {rank: str(record["error"]) for rank, record in records.items() if record.get("error")}
    groups: dict[str, dict[int, dict[str, Any]]] = {}
    for rank, record in sorted(records.items()):
        if rank in errors:
            continue
        for group, state in group_states(record).items():
            groups.setdefault(group, {})[rank] = state
    result: dict[str, Any] = {"message": None, "culprits": [], "seq": None, "group": None,
                              "ranks": {}, "errors": errors, "lines": []}
    progressing = stuck is not None and not stuck and bool(groups)
    if progressing:
        result["message"] = (f"all {len(records) - len(errors)} ranks are progressing: their records were read "
                             "one after another while they trained, so their collectives are not compared")
    for group, states in sorted(groups.items()):
        for rank, state in states.items():
            result["ranks"].setdefault(rank, {})[group] = {
                "entered": state["entered"], "completed": state["completed"]}
        if result["message"] is None:
            found = _first_mismatch(group, states)
            if found is not None:
                result.update(found)
    if result["message"] is None and groups:
        result["message"] = _all_in_step(groups)
    result["lines"] = describe_ranks(groups, errors, pending=not progressing)
    return result


def group_states(record: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per process group (its name): {by_seq: {seq: entry}, entered: entry | None, completed: seq | None}."""
    status = record.get("pg_status") or {}
    states: dict[str, dict[str, Any]] = {}
    for entry in record.get("entries") or []:
        if not isinstance(entry, dict) or entry.get("is_p2p"):
            continue
        seq = entry.get("collective_seq_id")
        if not isinstance(seq, int) or seq <= 0:
            continue
        group, pg_id = _group_of(entry)
        state = states.setdefault(group, {"by_seq": {}, "entered": None, "completed": _completed(status, pg_id)})
        state["by_seq"][seq] = _short(entry)
    for state in states.values():
        if state["by_seq"]:
            state["entered"] = state["by_seq"][max(state["by_seq"])]
    return states


def read_dump_file(path: Path) -> dict[str, Any]:
    """One of NCCL's dump-on-timeout files (``TORCH_FR_DUMP_TEMP_FILE``): the pickled dump.

    The file is written by torch in the user's own job; still, it is read only
    from the run's own folder, and whatever it holds becomes a plain record.

    Raises:
        OSError: the file cannot be read. ValueError: it is not a Flight Recorder dump.
    """
    from rankwatch._flight_recorder import from_trace

    if path.stat().st_size > MAX_DUMP_BYTES:
        raise ValueError(f"{path} is larger than {MAX_DUMP_BYTES >> 20} MiB")
    try:
        trace = pickle.loads(path.read_bytes())
    except Exception as exc:
        raise ValueError(f"{path} is not a Flight Recorder dump ({type(exc).__name__})") from exc
    record = from_trace(trace)
    if record.get("error"):
        raise ValueError(f"{path}: {record['error']}")
    return record


def format_flight_record(event: dict[str, Any]) -> str:
    """The CLI's lines for a ``flight_recorder`` event (its fields, flat as subscribers get them)."""
    lines = [f"collectives (Flight Recorder): {event.get('message') or 'no collective recorded'}"]
    lines += [f"  {line}" for line in event.get("lines") or []]
    if event.get("path"):
        lines.append(f"every rank's Flight Recorder: {event['path']}")
    return "\n".join(lines) + "\n"


def describe_ranks(groups: dict[str, dict[int, dict[str, Any]]], errors: dict[int, str],
                   pending: bool = True) -> list[str]:
    """One line per rank and group; ``pending``: mark a collective entered and not completed "(waiting)"
    (not for ranks that progress: they were only passing through it)."""
    lines = []
    for group, states in sorted(groups.items()):
        for rank, state in sorted(states.items()):
            entered = state["entered"]
            completed = state["completed"]
            where = "nothing" if entered is None else f"#{entered['seq']} {_op(entered)}"
            if pending and entered is not None and completed is not None and entered["seq"] > completed:
                where += " (waiting)"
            done = "–" if completed is None else f"#{completed}"
            lines.append(f"rank {rank} [{_group_name(group)}]: last entered {where}, last completed {done}")
    lines += [f"rank {rank}: no Flight Recorder ({why})" for rank, why in sorted(errors.items())]
    return lines


def _first_mismatch(group: str, states: dict[int, dict[str, Any]]) -> dict[str, Any] | None:
    completed = [state["completed"] for state in states.values() if state["completed"] is not None]
    last = [state["entered"]["seq"] for state in states.values() if state["entered"] is not None]
    if not last:
        return None
    start = (min(completed) if completed else 0) + 1
    for seq in range(start, max(last) + 1):
        present = {rank: state["by_seq"].get(seq) for rank, state in states.items()}
        entered = {rank: entry for rank, entry in present.items() if entry is not None}
        missing = [rank for rank, entry in present.items() if entry is None
                   and (states[rank]["entered"] is None or states[rank]["entered"]["seq"] < seq)]
        if not entered:
            continue
        if missing:
            ops = Counter(_op(entry) for entry in entered.values())
            op = ops.most_common(1)[0][0]
            return {"culprits": missing, "seq": seq, "group": group,
                    "message": _never_entered(missing, seq, op, sorted(entered), states, group)}
        kinds = Counter(_signature(entry) for entry in entered.values())
        if len(kinds) > 1:
            return _different(group, seq, entered, kinds)
    return None


def _never_entered(missing: list[int], seq: int, op: str, waiting: list[int],
                   states: dict[int, dict[str, Any]], group: str) -> str:
    who = ranks_text(missing)
    lasts = []
    for rank in missing:
        entered = states[rank]["entered"]
        last = "none" if entered is None else f"#{entered['seq']} {_op(entered)}"
        lasts.append(last if len(missing) == 1 else f"rank {rank}: {last}")
    return (f"{who} never entered collective #{seq} ({op}{_in_group(group)}) that {ranks_text(waiting)} "
            f"{'is' if len(waiting) == 1 else 'are'} waiting in; "
            f"{'its last was' if len(missing) == 1 else 'their last:'} {', '.join(lasts)}")


def _different(group: str, seq: int, entered: dict[int, dict[str, Any]], kinds: Counter) -> dict[str, Any]:
    (majority, _count), *_rest = sorted(kinds.items(), key=lambda item: (-item[1], min(
        rank for rank, entry in entered.items() if _signature(entry) == item[0])))
    odd = sorted(rank for rank, entry in entered.items() if _signature(entry) != majority)
    usual = sorted(rank for rank in entered if rank not in odd)
    reference = entered[usual[0]]
    theirs = "; ".join(f"rank {rank}: {_op(entered[rank])} {_sizes(entered[rank])}" for rank in odd)
    message = (f"{ranks_text(odd)} called a different collective #{seq}{_in_group(group)} than {ranks_text(usual)} "
               f"({_op(reference)} {_sizes(reference)}; {theirs}): the ranks' collectives are out of step, "
               f"{'it' if len(odd) == 1 else 'they'} skipped or added one before")
    return {"culprits": odd, "seq": seq, "group": group, "message": message}


def _all_in_step(groups: dict[str, dict[int, dict[str, Any]]]) -> str:
    for group, states in sorted(groups.items()):
        pending = {rank: state["entered"] for rank, state in states.items() if state["entered"] is not None
                   and (state["completed"] is None or state["entered"]["seq"] > state["completed"])}
        if pending and len(pending) == len(states):
            seqs = {entry["seq"] for entry in pending.values()}
            if len(seqs) == 1:
                entry = next(iter(pending.values()))
                return (f"every rank is in collective #{entry['seq']} ({_op(entry)}{_in_group(group)}): "
                        "none is missing; the collective itself does not finish (network, a peer process gone)")
    return "the ranks' collectives are in step: no rank is missing from a collective"


def _short(entry: dict[str, Any]) -> dict[str, Any]:
    return {"seq": entry.get("collective_seq_id"), "op": entry.get("profiling_name"),
            "input_sizes": entry.get("input_sizes"), "state": entry.get("state"),
            "record_id": entry.get("record_id")}


def _group_of(entry: dict[str, Any]) -> tuple[str, Any]:
    group = entry.get("process_group")
    name = group[0] if isinstance(group, list) and group else entry.get("pg_id")
    pg_id = entry.get("pg_id")
    return str(name), pg_id


def _completed(status: dict[str, Any], pg_id: Any) -> int | None:
    entry = status.get(str(pg_id))
    value = entry.get("last_completed_collective") if isinstance(entry, dict) else None
    return value if isinstance(value, int) and value >= 0 else None


def _signature(entry: dict[str, Any]) -> tuple[str, str]:
    return str(entry.get("op")), repr(entry.get("input_sizes"))


def _op(entry: dict[str, Any]) -> str:
    return str(entry.get("op") or "unknown op")


def _sizes(entry: dict[str, Any]) -> str:
    sizes = entry.get("input_sizes")
    return f"sizes {sizes}" if sizes else "no tensors"


def _group_name(group: str) -> str:
    return "default group" if group in ("0", "") else f"group {group}"


def _in_group(group: str) -> str:
    return "" if group in ("0", "") else f", group {group}"


