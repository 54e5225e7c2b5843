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

Output (``analyse``): a ``FlightAnalysis``, whose ``to_json`` is what the run keeps::

    {message: str | None, culprits: [rank], seq: int | None, group: str | None,
     ranks: {rank: {group: {entered: {...}, completed: int | None}}}, errors: {rank: why},
     lines: [str]}   # one line per rank for the CLI/GUI
"""

from __future__ import annotations

import pickle
from collections import Counter
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from rankwatch.protocol import as_int
from runner.format import ranks_text
from runner.runstate.messages import JsonObject

MAX_DUMP_BYTES = 64 << 20

TorchRecord = JsonObject
"""One rank's Flight Recorder as torch dumps it (``pg_config``, ``pg_status``, ``entries``) or
``{"error": why}``: torch's own open JSON, read with ``.get`` and never trusted to have a key."""


@dataclass(frozen=True)
class CollectiveEntry:
    """One collective of a rank's record, short: what the comparison and the lines need."""

    seq: int
    op: str | None
    input_sizes: list[list[int]] | None
    state: str | None
    record_id: int | None

    @classmethod
    def from_torch(cls, seq: int, entry: Mapping[str, object]) -> CollectiveEntry:
        """Collective number ``seq`` (its ``collective_seq_id``, checked by the caller) from torch's entry;
        a field of another type than torch writes reads as absent."""
        op, state, record_id = entry.get("profiling_name"), entry.get("state"), entry.get("record_id")
        return cls(seq=seq, op=op if isinstance(op, str) else None, input_sizes=_input_sizes(entry.get("input_sizes")),
                   state=state if isinstance(state, str) else None,
                   record_id=record_id if isinstance(record_id, int) else None)

    def to_json(self) -> JsonObject:
        return {"seq": self.seq, "op": self.op, "input_sizes": self.input_sizes, "state": self.state,
                "record_id": self.record_id}


@dataclass
class GroupState:
    """One rank in one process group: its collectives by number, the last it entered and completed."""

    completed: int | None
    by_seq: dict[int, CollectiveEntry] = field(default_factory=dict)
    entered: CollectiveEntry | None = None

    def to_json(self) -> JsonObject:
        """What the analysis keeps per rank and group (``ranks``)."""
        return {"entered": None if self.entered is None else self.entered.to_json(), "completed": self.completed}


GroupsByRank = dict[str, dict[int, GroupState]]
"""group name -> rank -> its state in that group."""


@dataclass(frozen=True)
class Mismatch:
    """The first collective the ranks of a group disagree on, and the ranks to blame."""

    culprits: list[int]
    seq: int
    group: str
    message: str


@dataclass
class FlightAnalysis:
    """``analyse``'s answer (module docstring); ``path``/``not_stored`` once ``publish`` tried to store it."""

    message: str | None = None
    culprits: list[int] = field(default_factory=list)
    seq: int | None = None
    group: str | None = None
    ranks: dict[int, dict[str, GroupState]] = field(default_factory=dict)
    errors: dict[int, str] = field(default_factory=dict)
    lines: list[str] = field(default_factory=list)
    path: str | None = None
    stored: bool | None = None
    """None: not yet stored; False: storing failed (``not_stored`` says why)."""
    not_stored: str | None = None

    def to_json(self) -> JsonObject:
        """The analysis as the run's ``flight-recorder-<n>.json`` keeps it (with ``path`` once stored)."""
        data: JsonObject = {
            "message": self.message, "culprits": list(self.culprits), "seq": self.seq, "group": self.group,
            "ranks": {rank: {group: state.to_json() for group, state in groups.items()}
                      for rank, groups in self.ranks.items()},
            "errors": dict(self.errors), "lines": list(self.lines)}
        if self.stored is not None:
            data["path"] = self.path
        if self.not_stored is not None:
            data["not_stored"] = self.not_stored
        return data


@dataclass(frozen=True)
class FlightRecorderFinding:
    """The last comparison of stuck ranks, as the run's summary keeps it (``diagnostics.flight_recorder``)."""

    message: str | None
    culprits: list[int]
    seq: int | None
    group: str | None
    lines: list[str]
    path: str | None

    @classmethod
    def of(cls, analysis: FlightAnalysis) -> FlightRecorderFinding:
        return cls(message=analysis.message, culprits=analysis.culprits, seq=analysis.seq, group=analysis.group,
                   lines=analysis.lines, path=analysis.path)

    def to_json(self) -> JsonObject:
        return {"message": self.message, "culprits": self.culprits, "seq": self.seq, "group": self.group,
                "lines": self.lines, "path": self.path}

    @classmethod
    def from_wire(cls, data: Mapping[str, object]) -> FlightRecorderFinding:
        """As the summary keeps it, or a ``flight_recorder`` event's fields with its message."""
        culprits, lines, group, path = data.get("culprits"), data.get("lines"), data.get("group"), data.get("path")
        return cls(message=str(data["message"]) if data.get("message") else None,
                   culprits=[rank for rank in culprits if type(rank) is int] if isinstance(culprits, list) else [],
                   seq=as_int(data.get("seq")), group=group if isinstance(group, str) else None,
                   lines=[str(line) for line in lines] if isinstance(lines, list) else [],
                   path=path if isinstance(path, str) else None)


def analyse(records: dict[int, TorchRecord], stuck: Collection[int] | None = None) -> FlightAnalysis:
    """Compare the ranks' Flight Recorders (module docstring); ``stuck``: the ranks that made no progress
    (None: not known), an empty one: every rank progresses, so nothing is compared."""
    errors = {rank: str(record["error"]) for rank, record in records.items() if record.get("error")}
    groups: GroupsByRank = {}
    for rank, record in sorted(records.items()):
        if rank in errors:
            continue
        for group, state in group_states(record).items():
            groups.setdefault(group, {})[rank] = state
    result = FlightAnalysis(errors=errors)
    progressing = stuck is not None and not stuck and bool(groups)
    if progressing:
        result.message = (f"all {len(records) - len(errors)} ranks are progressing: their records were read "
                          "one after another while they trained, so their collectives are not compared")
    for group, states in sorted(groups.items()):
        for rank, state in states.items():
            result.ranks.setdefault(rank, {})[group] = state
        if result.message is None:
            found = _first_mismatch(group, states)
            if found is not None:
                result.culprits, result.seq, result.group, result.message = (
                    found.culprits, found.seq, found.group, found.message)
    if result.message is None and groups:
        result.message = _all_in_step(groups)
    result.lines = describe_ranks(groups, errors, pending=not progressing)
    return result


def group_states(record: TorchRecord) -> dict[str, GroupState]:
    """Per process group (its name): the rank's collectives by number, the last entered and completed."""
    status = record.get("pg_status")
    status = status if isinstance(status, dict) else {}
    entries = record.get("entries")
    states: dict[str, GroupState] = {}
    for entry in entries if isinstance(entries, list) else []:
        if not isinstance(entry, dict) or entry.get("is_p2p"):
            continue
        seq = entry.get("collective_seq_id")
        if not isinstance(seq, int) or seq <= 0:
            continue
        group, pg_id = _group_of(entry)
        state = states.setdefault(group, GroupState(completed=_completed(status, pg_id)))
        state.by_seq[seq] = CollectiveEntry.from_torch(seq, entry)
    for state in states.values():
        if state.by_seq:
            state.entered = state.by_seq[max(state.by_seq)]
    return states


def read_dump_file(path: Path) -> TorchRecord:
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


def format_flight_record(event: JsonObject) -> str:
    """The CLI's lines for a ``flight_recorder`` event (its fields, flat as subscribers get them)."""
    lines = [f"collectives (Flight Recorder): {event.get('message') or 'no collective recorded'}"]
    described = event.get("lines")
    lines += [f"  {line}" for line in (described if isinstance(described, (list, tuple)) else [])]
    if event.get("path"):
        lines.append(f"every rank's Flight Recorder: {event['path']}")
    return "\n".join(lines) + "\n"


def describe_ranks(groups: GroupsByRank, errors: dict[int, str], pending: bool = True) -> list[str]:
    """One line per rank and group; ``pending``: mark a collective entered and not completed "(waiting)"
    (not for ranks that progress: they were only passing through it)."""
    lines = []
    for group, states in sorted(groups.items()):
        for rank, state in sorted(states.items()):
            entered = state.entered
            completed = state.completed
            where = "nothing" if entered is None else f"#{entered.seq} {_op(entered)}"
            if pending and entered is not None and completed is not None and entered.seq > completed:
                where += " (waiting)"
            done = "–" if completed is None else f"#{completed}"
            lines.append(f"rank {rank} [{_group_name(group)}]: last entered {where}, last completed {done}")
    lines += [f"rank {rank}: no Flight Recorder ({why})" for rank, why in sorted(errors.items())]
    return lines


def _first_mismatch(group: str, states: dict[int, GroupState]) -> Mismatch | None:
    completed = [state.completed for state in states.values() if state.completed is not None]
    last = [state.entered.seq for state in states.values() if state.entered is not None]
    if not last:
        return None
    start = (min(completed) if completed else 0) + 1
    for seq in range(start, max(last) + 1):
        present = {rank: state.by_seq.get(seq) for rank, state in states.items()}
        entered = {rank: entry for rank, entry in present.items() if entry is not None}
        missing = [rank for rank, entry in present.items() if entry is None and _last_entered(states[rank]) < seq]
        if not entered:
            continue
        if missing:
            ops = Counter(_op(entry) for entry in entered.values())
            op = ops.most_common(1)[0][0]
            return Mismatch(culprits=missing, seq=seq, group=group,
                            message=_never_entered(missing, seq, op, sorted(entered), states, group))
        kinds = Counter(_signature(entry) for entry in entered.values())
        if len(kinds) > 1:
            return _different(group, seq, entered, kinds)
    return None


def _last_entered(state: GroupState) -> int:
    """The number of the last collective the rank entered; 0: none (they count from 1)."""
    return 0 if state.entered is None else state.entered.seq


def _never_entered(missing: list[int], seq: int, op: str, waiting: list[int],
                   states: dict[int, GroupState], group: str) -> str:
    who = ranks_text(missing)
    by_last: dict[str, list[int]] = {}  # ranks alike go together: 1,023 ranks are one phrase, not 1,023
    for rank in missing:
        entered = states[rank].entered
        by_last.setdefault("none" if entered is None else f"#{entered.seq} {_op(entered)}", []).append(rank)
    if len(by_last) == 1:
        lasts = f"{'its' if len(missing) == 1 else 'their'} last was {next(iter(by_last))}"
    else:
        lasts = "their last: " + ", ".join(f"{ranks_text(ranks)}: {last}" for last, ranks in by_last.items())
    return (f"{who} never entered collective #{seq} ({op}{_in_group(group)}) that {ranks_text(waiting)} "
            f"{'is' if len(waiting) == 1 else 'are'} waiting in; {lasts}")


def _different(group: str, seq: int, entered: dict[int, CollectiveEntry],
               kinds: Counter[tuple[str, str]]) -> Mismatch:
    (majority, _count), *_rest = sorted(kinds.items(), key=lambda item: (-item[1], min(
        rank for rank, entry in entered.items() if _signature(entry) == item[0])))
    odd = sorted(rank for rank, entry in entered.items() if _signature(entry) != majority)
    usual = sorted(rank for rank in entered if rank not in odd)
    reference = entered[usual[0]]
    theirs = "; ".join(f"rank {rank}: {_op(entered[rank])} {_sizes(entered[rank])}" for rank in odd)
    message = (f"{ranks_text(odd)} called a different collective #{seq}{_in_group(group)} than {ranks_text(usual)} "
               f"({_op(reference)} {_sizes(reference)}; {theirs}): the ranks' collectives are out of step, "
               f"{'it' if len(odd) == 1 else 'they'} skipped or added one before")
    return Mismatch(culprits=odd, seq=seq, group=group, message=message)


def _all_in_step(groups: GroupsByRank) -> str:
    for group, states in sorted(groups.items()):
        pending = {rank: entered for rank, state in states.items() if (entered := state.entered) is not None
                   and (state.completed is None or entered.seq > state.completed)}
        if pending and len(pending) == len(states):
            seqs = {entry.seq for entry in pending.values()}
            if len(seqs) == 1:
                entry = next(iter(pending.values()))
                return (f"every rank is in collective #{entry.seq} ({_op(entry)}{_in_group(group)}): "
                        "none is missing; the collective itself does not finish (network, a peer process gone)")
    return "the ranks' collectives are in step: no rank is missing from a collective"


def _input_sizes(value: object) -> list[list[int]] | None:
    """An entry's ``input_sizes`` (one shape per tensor), or None when it is not a list of shapes."""
    if not isinstance(value, list) or not all(
            isinstance(shape, list) and all(isinstance(size, int) for size in shape) for shape in value):
        return None
    return value


def _group_of(entry: JsonObject) -> tuple[str, object]:
    group = entry.get("process_group")
    name = group[0] if isinstance(group, list) and group else entry.get("pg_id")
    pg_id = entry.get("pg_id")
    return str(name), pg_id


def _completed(status: JsonObject, pg_id: object) -> int | None:
    entry = status.get(str(pg_id))
    value = entry.get("last_completed_collective") if isinstance(entry, dict) else None
    return value if isinstance(value, int) and value >= 0 else None


def _signature(entry: CollectiveEntry) -> tuple[str, str]:
    return str(entry.op), repr(entry.input_sizes)


def _op(entry: CollectiveEntry) -> str:
    return str(entry.op or "unknown op")


def _sizes(entry: CollectiveEntry) -> str:
    sizes = entry.input_sizes
    return f"sizes {sizes}" if sizes else "no tensors"


def _group_name(group: str) -> str:
    return "default group" if group in ("0", "") else f"group {group}"


def _in_group(group: str) -> str:
    return "" if group in ("0", "") else f", group {group}"
