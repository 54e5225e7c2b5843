"""The run as the hub's messages build it, for the GUI (``runner.runstate``): the typed
messages and the one reducer the terminal view renders too. The GUI's models take these
names from here (only the gateway reaches into ``runner``)."""

from __future__ import annotations

from runner.runstate.messages import (
    Bye,
    Event,
    EventKind,
    HistoryEnd,
    HubMessage,
    LogLine,
    NodeInfo,
    RankInfo,
    RunInfo,
    SnapshotMessage,
    UpdateMessage,
    decode_hub_message,
    event_of,
)
from runner.runstate.state import (
    HUNG,
    Changes,
    RunState,
    measured_process,
    shown_status,
    steps_done,
    working_text,
)

RunEvent = Event
"""The contract's ``Event`` (something that happened in a run), under a name the GUI's models can
tell apart from their own observer ``gui.models.Event``."""

__all__ = [
    "HUNG", "Bye", "Changes", "Event", "EventKind", "HistoryEnd", "HubMessage", "LogLine", "NodeInfo", "RankInfo", "RunEvent", "RunInfo", "RunState",
    "SnapshotMessage", "UpdateMessage", "decode_hub_message", "event_of", "measured_process", "shown_status", "steps_done",
    "working_text",
]
