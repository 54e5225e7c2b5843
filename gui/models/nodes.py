"""The nodes of a run as the monitor shows them, Qt-free.

The hub sends one NODE row per machine (``rankwatch.protocol``: ``node_rank``,
``host``, ``state`` = ``runner.state.NodeState`` value, ``processes``, ``changed``
= when the state last changed, ``detail``), and every RANK row carries its
``node_rank`` and ``host``. This module turns them into the nodes table's cells
(state, since when, which ranks live there) and says when a run has several nodes
(the monitor then shows the Nodes tab, the rank table's Node column, and the log
view's node filter).
"""

from __future__ import annotations

import time

from gui.gateway.run_state import NodeInfo
from gui.models.monitor import MonitorModel

NODE_COLUMNS = ("Node", "Host", "State", "Processes", "Ranks", "Since", "Detail")
FINISHED_NODE_STATES = ("exited", "failed", "stopped", "lost")


def compact_ranks(ranks: list[int]) -> str:
    """``0-3, 8`` for [0, 1, 2, 3, 8]."""
    ranks = sorted(set(ranks))
    parts: list[str] = []
    start = previous = None
    for rank in [*ranks, None]:
        if rank is not None and previous is not None and rank == previous + 1:
            previous = rank
            continue
        if start is not None:
            parts.append(str(start) if start == previous else f"{start}-{previous}")
        start = previous = rank
    return ", ".join(parts)


def since_text(node: NodeInfo) -> str:
    """``lost at 12:03:04``, ``failed at ...``, ``running since ...`` (local time)."""
    changed = node.changed
    if changed is None:
        return ""
    when = time.strftime("%H:%M:%S", time.localtime(changed))
    state = node.state or ""
    if state in FINISHED_NODE_STATES:
        return f"{state} at {when}"
    return f"{state} since {when}" if state else when


def ranks_by_node(model: MonitorModel) -> dict[int, list[int]]:
    grouped: dict[int, list[int]] = {}
    for row in model.rank_rows():
        grouped.setdefault(row.node_rank or 0, []).append(row.rank)
    return grouped


def node_rows(model: MonitorModel) -> list[NodeInfo]:
    """The NODE rows in node order; a run without any (an older runner) gets one per host of its ranks."""
    if model.nodes:
        return [model.nodes[node_rank] for node_rank in sorted(model.nodes)]
    hosts: dict[int, str] = {}
    processes: dict[int, int] = {}
    for row in model.rank_rows():
        node_rank = row.node_rank or 0
        hosts.setdefault(node_rank, row.host or "")
        processes[node_rank] = processes.get(node_rank, 0) + 1
    return [NodeInfo(node_rank=n, host=hosts[n], processes=processes[n]) for n in sorted(hosts)]


def node_cells(node: NodeInfo, ranks: list[int]) -> tuple[str, ...]:
    """The nodes table's texts for one NODE row, in :data:`NODE_COLUMNS` order."""
    processes = node.processes
    return (
        str(node.node_rank),
        node.host or "",
        node.state or "",
        "–" if processes is None else str(processes),  # not known: not measured
        compact_ranks(ranks),
        since_text(node),
        node.detail or "",
    )


def node_count(model: MonitorModel) -> int:
    """How many machines the run uses (from its NODE rows, else its ranks' node ranks)."""
    if model.nodes:
        return len(model.nodes)
    return len({row.node_rank or 0 for row in model.rank_rows()}) if model.ranks else 0


def is_multi_node(model: MonitorModel) -> bool:
    return node_count(model) > 1


def log_nodes(model: MonitorModel, recent: int = 2000) -> list[str]:
    """Host labels seen on log lines (and NODE rows), head first, for the log view's node filter."""
    labels = [node.host for node in node_rows(model) if node.host]
    entries = model.logs.entries
    for index in range(max(0, len(entries) - recent), len(entries)):
        label = entries[index].node
        if label and label not in labels:
            labels.append(label)
    return labels
