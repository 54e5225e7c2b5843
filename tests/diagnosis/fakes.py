"""A stand-in hub for monitor tests: the real LiveModel, events collected in a list."""

from __future__ import annotations

import time
from typing import Any

from rankwatch.protocol import Hello
from runner.hub.live_model import LiveModel
from runner.rows import RunInfo


class FakeHub:
    def __init__(self) -> None:
        self.model = LiveModel()
        self.events: list[dict[str, Any]] = []
        self.run_row: RunInfo | None = RunInfo(status="running")
        self.observers: list = []

    def add_observer(self, observer) -> None:
        self.observers.append(observer)

    def add_event(self, kind: str, rank: int | None, message: str, t: float | None = None, **fields: Any) -> None:
        self.events.append({"kind": kind, "rank": rank, "message": message, "t": t or time.time(), **fields})

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        return [event for event in self.events if event["kind"] == kind]

    def hello(self, rank: int, pid: int = 0, host: str = "localhost", **fields: Any) -> None:
        self.model.on_hello(Hello.from_wire({"rank": rank, "pid": pid or None, "host": host, "local_rank": rank,
                                             "node_rank": 0, **fields}))
