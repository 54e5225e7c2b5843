"""What a run's events are called on screen: words a person reads, not the protocol's kind names.

The store and the wire keep ``hub_stats``, ``rank_failed``, ...; the events list shows
"Telemetry totals", "Rank failed". A kind this table does not know (a newer runner) is shown
with its underscores as spaces, never dropped.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rankwatch.protocol import Event as RunEvent

EVENT_TITLES = {
    "rank_started": "Rank started", "rank_exited": "Rank exited", "rank_failed": "Rank failed",
    "rank_stopped": "Rank stopped", "exception": "Exception", "thread_exception": "Exception in a thread",
    "connection_lost": "Connection lost", "param_hash": "Parameter fingerprint",
    "stacks_written": "Stack dump written", "stacks": "Stacks captured", "stalled": "Stalled",
    "resumed": "Resumed", "straggler": "Straggler", "bottleneck": "Bottleneck",
    "flight_recorder": "Flight Recorder", "divergence": "Replicas diverged", "node_lost": "Node lost",
    "agent_connected": "Node agent connected", "agents_listening": "Listening for node agents",
    "refused": "Connections refused", "records_rejected": "Records rejected",
    "store_incomplete": "Run store incomplete", "stop_requested": "Stop requested", "stopping": "Stopping",
    "run_finished": "Run finished", "warning": "Warning", "hub_stats": "Telemetry totals",
    "launch_mismatch": "Launch problem", "slurm_submitted": "Submitted to Slurm", "slurm": "Slurm",
    "launch_mode": "Launch mode",
}
INTERNAL_MESSAGES = {"hub_stats": "hub counters", "param_hash": "parameter fingerprint",
                     "stacks_written": "stack dump written"}
"""Messages that only repeat the kind's name; the title says it, or the fields say more."""


def event_title(kind: str) -> str:
    """``rank_failed`` -> ``Rank failed``; an unknown kind reads as its words."""
    return EVENT_TITLES.get(kind) or kind.replace("_", " ").capitalize()


def event_message(event: RunEvent) -> str:
    """The event's message, with the hub's counters spelled out for ``hub_stats``."""
    kind = event.kind.value
    message = event.message
    if kind == "hub_stats":
        return _counters_text(event.fields.get("counters"))
    if message == INTERNAL_MESSAGES.get(kind):
        return ""
    return message


def _counters_text(counters: Any) -> str:
    """``12,340 records stored; lines too long: 2`` (the counters that are not zero)."""
    if not isinstance(counters, Mapping):
        return ""
    parts = []
    stored = counters.get("records_stored")
    if isinstance(stored, int):
        parts.append(f"{stored:,} records stored")
    for name, value in sorted(counters.items()):
        if name != "records_stored" and isinstance(value, int) and value:
            parts.append(f"{name.replace('_', ' ')}: {value:,}")
    return "; ".join(parts)
