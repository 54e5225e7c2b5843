"""What the hub sends its subscribers, built for tests from the typed messages.

Tests build hub messages with ``runner.runstate.messages`` (``SnapshotMessage``, ``RunInfo``,
``RankInfo``, ``UpdateMessage``, ...) and hand the readers ``.to_wire()``, never a dict written by
hand: a field renamed in the contract then fails the test that sets it, instead of turning into
an ignored key. Two things the typed classes do not give a test are here:

* an update's ``ranks``, ``run`` and ``nodes`` are the changed keys only (the keys a row carries
  replace the ones known), so they stay mappings; ``rank_changes``, ``run_changes`` and
  ``node_changes`` build them and check each key and value against the row's typed class;
* ``update`` takes the records as lists and sequences and gives the frozen ``UpdateMessage``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

from runner.runstate.messages import (
    Event,
    GpuSample,
    LogLine,
    MetricRecord,
    NodeInfo,
    ProcessSample,
    RankInfo,
    RunInfo,
    UpdateMessage,
)

_RowT = TypeVar("_RowT", RunInfo, RankInfo, NodeInfo)


def checked_row(row_class: type[_RowT], row: Mapping[str, Any]) -> dict[str, Any]:
    """``row`` as the hub sends it, once every key is a field of ``row_class`` and every value
    reads back as itself (a string where a number belongs would be read as None: not measured).

    Raises:
        TypeError: a key the row does not have, or a value of the wrong type; the message names it.
    """
    decoded = row_class.from_wire(row)
    if decoded.extra:
        raise TypeError(f"{row_class.__name__} has no field {', '.join(sorted(map(str, decoded.extra)))}: "
                        "use the names in runner/runstate/messages.py")
    wrong = {key: value for key, value in row.items() if getattr(decoded, key) != value}
    if wrong:
        raise TypeError(f"{row_class.__name__} fields of the wrong type: {wrong!r} read back as "
                        f"{ {key: getattr(decoded, key) for key in wrong}!r}")
    return dict(row)


def rank_changes(rank: int, **changes: Any) -> dict[str, Any]:
    """The RANK row keys an update carries for ``rank`` (checked against ``RankInfo``)."""
    return checked_row(RankInfo, {"rank": rank, **changes})


def run_changes(**changes: Any) -> dict[str, Any]:
    """The RUN row keys an update carries (checked against ``RunInfo``)."""
    return checked_row(RunInfo, changes)


def node_changes(node_rank: int, **changes: Any) -> dict[str, Any]:
    """The node row keys an update carries for ``node_rank`` (checked against ``NodeInfo``)."""
    return checked_row(NodeInfo, {"node_rank": node_rank, **changes})


def update(*, t: float = 0.0, metrics: Iterable[MetricRecord] = (), logs: Iterable[LogLine] = (),
           events: Iterable[Event] = (), gpus: Iterable[GpuSample] = (), procs: Iterable[ProcessSample] = (),
           ranks: Iterable[Mapping[str, Any]] = (), run: Mapping[str, Any] | None = None,
           nodes: Iterable[Mapping[str, Any]] = (), decimated: bool = False) -> UpdateMessage:
    """An update: records as the contract types them, rows as ``rank_changes`` and friends build them.

    Raises:
        TypeError: a record that is not of its contract type (a list written by hand), or a row
            key or value its typed class does not have (``checked_row``).
    """
    message = UpdateMessage(t, tuple(metrics), tuple(logs), tuple(events), tuple(gpus), tuple(procs),
                            tuple(checked_row(RankInfo, row) for row in ranks),
                            None if run is None else checked_row(RunInfo, run),
                            tuple(checked_row(NodeInfo, row) for row in nodes), decimated)
    for name, record_type in (("metrics", MetricRecord), ("logs", LogLine), ("events", Event),
                              ("gpus", GpuSample), ("procs", ProcessSample)):
        stray = [record for record in getattr(message, name) if not isinstance(record, record_type)]
        if stray:
            raise TypeError(f"update {name} must be {record_type.__name__} values, not {stray[:1]!r}")
    return message
