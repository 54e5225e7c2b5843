"""The run as the hub's messages build it, for the GUI (``runner.runstate``).

The typed messages (``SnapshotMessage``, ``UpdateMessage``, ``HistoryEnd``; ``HubMessage`` any
of them) and the rows they carry (``RunInfo``, ``RankInfo``, ``NodeInfo``), the one reducer the
terminal view renders too (``RunState``), and ``RunReading``: the runner's rules for reading
those rows, so the GUI counts steps, names a hung run and decodes a message as every other
surface does. The contract's own types (``Event``, ``EventKind``, ``LogLine``) come from
``rankwatch.protocol``, not from here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rankwatch.protocol import ProcessSample
from runner.runstate.messages import (
    HistoryEnd,
    HubMessage,
    NodeInfo,
    RankInfo,
    RunInfo,
    SnapshotMessage,
    UpdateMessage,
    decode_hub_message,
)
from runner.runstate.state import HUNG, RunState, measured_process, steps_done, working_text

__all__ = [
    "HistoryEnd", "HubMessage", "NodeInfo", "RankInfo", "RunInfo", "RunReading", "RunState", "SnapshotMessage",
    "UpdateMessage",
]


class RunReading:
    """How the runner reads a run's rows: one reading for the GUI, the terminal view and ``runs``."""

    HUNG = HUNG
    """The shown status of a running run while a rank of it makes no progress (not a stored status)."""

    @staticmethod
    def decode(message: Mapping[str, Any]) -> HubMessage | None:
        """One JSON message from the hub, typed; ``None`` for one a run's state does not take
        (``pong``, ``error``, a type from a newer hub)."""
        return decode_hub_message(message)

    @staticmethod
    def steps_done(step: int | None) -> int | None:
        """Steps completed: the newest step index + 1, as the header and ``runs show`` count them."""
        return steps_done(step)

    @staticmethod
    def working_text(row: RankInfo, now: float) -> str:
        """``working without steps for 42 s (since step 311)`` for a rank that works without
        stepping; empty otherwise."""
        return working_text(row, now)

    @staticmethod
    def measured(sample: ProcessSample) -> bool:
        """Whether a process sample read anything (all zeros: the process was already gone)."""
        return measured_process(sample)
