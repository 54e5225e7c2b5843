"""Real runs, replayed to the GUI through the real hub: the fixtures of ``data/capture.py``.

``data/<scenario>.json`` holds what the run store recorded for a real job (the run
with its summary, rank and node rows, every event as the runner recorded it, the last
log lines). :class:`ReplayRun` feeds that run, piece by piece, into the real hub
(``runner.hub.Hub``, on an event loop in a thread of this process) the way the
runner fed it: the recorded rank rows are the hub's live rows, the recorded events
and log lines are added as the runner's own records (``hub.add_event``,
``hub.add_log``), node and run rows go through ``update_node`` / ``update_run``, and
the end closes the hub with the run's status (its ``bye``). Everything the GUI sees
is what the hub stored and published: snapshot, history, live updates.

* the snapshot shows the run running with its recorded ranks and nodes;
* :meth:`ReplayRun.send_events` adds recorded events (optionally moved to now), and
  can set ranks' states as the stall monitor does;
* :meth:`ReplayRun.end_as_recorded` adds the rest, the logs, the final rank, node and
  run rows, and ends the run;
* a subscriber's ``dump_stacks`` is answered with the run's last real capture, as the
  runner's stack capture would; subscriber requests are recorded in ``received``.

:func:`store_fixture` writes a fixture into the run store as a finished run, for the
History path (the monitor loads it from the store, not a socket).
"""

from __future__ import annotations

import json
import os
import secrets
import time
from pathlib import Path
from typing import Any

from live_run import RequestRecorder
from loop_thread import LoopThread

from rankwatch import protocol
from runner import paths
from runner.hub.hub import Hub
from runner.rows import NodeInfo
from runner.state import RankState
from runner.store.store import RecordBatch, RunStore

DATA = Path(__file__).with_name("data")
TIME_FIELDS = ("t", "last_progress", "since", "when")
EVENT_HEAD = ("kind", "t", "rank", "message")


def load_fixture(name: str) -> dict[str, Any]:
    return json.loads((DATA / f"{name}.json").read_text(encoding="utf-8"))


def _public(row: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in row.items() if k != "run_id"}


def shifted(events: list[dict[str, Any]], offset: float) -> list[dict[str, Any]]:
    """The events moved in time by ``offset`` seconds (as if they happened now)."""
    return [{**e, **{k: e[k] + offset for k in TIME_FIELDS if isinstance(e.get(k), (int, float))}} for e in events]


class CaptureAnswer(RequestRecorder):
    """Records subscriber requests; answers ``dump_stacks`` with the recorded capture."""

    def __init__(self, hub: Hub, capture: dict[str, Any] | None) -> None:
        super().__init__()
        self.hub = hub
        self.capture = capture

    def on_dump_stacks(self) -> None:
        super().on_dump_stacks()
        if self.capture is not None:
            fields = {k: v for k, v in self.capture.items() if k not in EVENT_HEAD}
            self.hub.add_event(protocol.EventKind.STACKS, None, str(self.capture.get("message") or "stacks"),
                               t=time.time(), **{**fields, "reason": "requested"})


class ReplayRun:
    """One recorded run, replayed through a real hub (see the module)."""

    def __init__(self, fixture: dict[str, Any]) -> None:
        self.fixture = fixture
        self.world_size = len(fixture["ranks"])
        self.hub: Hub | None = None
        self.answer: CaptureAnswer | None = None
        self.socket_path: Path | None = None
        self._sent_events: set[int] = set()
        self._thread: LoopThread | None = None
        self._ended = False

    def start(self) -> ReplayRun:
        self._thread = LoopThread(f"replay-{self.fixture['scenario']}")
        self._thread.run(self._open())
        return self

    async def _open(self) -> None:
        recorded = self.fixture["run"]
        hub = self.hub = Hub(paths.store_path(), secrets.token_urlsafe(16))
        await hub.create_run({"version": 1, "script": self.fixture["scenario"] + ".py"},
                             run_key=f"{recorded['run_key']}-{time.time_ns()}", profile=self.fixture["scenario"],
                             spec_toml=recorded.get("spec_toml") or "", command=recorded.get("command"),
                             host=recorded.get("host") or "localhost", workdir=recorded.get("workdir"),
                             runner_pid=os.getpid(), socket=None, world_size=recorded.get("world_size"),
                             status="running")
        self.socket_path = paths.socket_dir() / f"replay-{secrets.token_hex(6)}.sock"
        await hub.serve_unix(self.socket_path)
        capture = next((e for e in reversed(self.fixture["events"]) if e["kind"] == "stacks" and "groups" in e), None)
        self.answer = CaptureAnswer(hub, capture)
        hub.add_observer(self.answer)
        hub.start()
        now = time.time()
        for row in self.fixture["ranks"]:
            self._load_rank({**_public(row), "state": RankState.RUNNING.value, "exit_code": None, "last_seen": now})
        await hub.update_run(socket=str(self.socket_path), started=now)
        for node in self.fixture["nodes"]:
            await hub.update_node(node["node_rank"], node["host"], "running", node.get("processes"))
        await hub.flush()

    def _load_rank(self, values: dict[str, Any]) -> None:
        """The hub's live row of a rank, as the recording has it (what hellos and samples had set)."""
        assert self.hub is not None
        row = self.hub.model.row(values["rank"])
        for key, value in values.items():
            if key in protocol.RankRow.__slots__ and key != "rank":
                setattr(row, key, value)
        self.hub.model.changed.add(row.rank)
        self.hub.mark_changed()

    # ---- what a test reads -----------------------------------------------------------

    @property
    def run_id(self) -> int:
        assert self.hub is not None and self.hub.run_id is not None
        return self.hub.run_id

    @property
    def received(self) -> list[dict[str, Any]]:
        return self.answer.received if self.answer is not None else []

    def events(self, *kinds: str) -> list[dict[str, Any]]:
        return [e for e in self.fixture["events"] if not kinds or e["kind"] in kinds]

    def stored_node(self, node_rank: int) -> NodeInfo:
        """The node's row as the hub recorded it in the store."""
        with RunStore(readonly=True) as store:
            return next(node for node in store.stored_nodes(self.run_id) if node.node_rank == node_rank)

    # ---- what a test does ------------------------------------------------------------

    def send_events(self, *kinds: str, now: bool = False, rank_states: dict[int, str] | None = None,
                    first: int | None = None) -> list[dict[str, Any]]:
        """Add the recorded events of ``kinds`` (all when none; only the ``first`` N of them
        when given) not added yet, moved to the present with ``now``; ``rank_states`` sets
        those ranks' states as well (e.g. ``stalled``, as the stall monitor does)."""
        chosen = [(i, e) for i, e in enumerate(self.fixture["events"])
                  if (not kinds or e["kind"] in kinds) and i not in self._sent_events][:first]
        events = [e for _i, e in chosen]
        if now and events:
            events = shifted(events, time.time() - min(e["t"] for e in events))
        self._sent_events.update(i for i, _e in chosen)
        assert self._thread is not None
        self._thread.run(self._add(events, rank_states or {}))
        return events

    async def _add(self, events: list[dict[str, Any]], rank_states: dict[int, str]) -> None:
        assert self.hub is not None
        for event in events:
            fields = {k: v for k, v in event.items() if k not in EVENT_HEAD}
            self.hub.add_event(event["kind"], event.get("rank"), str(event.get("message") or ""), t=event["t"],
                               **fields)
        for rank, state in rank_states.items():
            self.hub.model.set_state(rank, RankState(state))
        self.hub.mark_changed()
        await self.hub.flush()

    def end_as_recorded(self) -> None:
        """The rest of the events, the logs, the final rank, node and run rows; then the end."""
        rest = [e for i, e in enumerate(self.fixture["events"]) if i not in self._sent_events]
        self._sent_events.update(range(len(self.fixture["events"])))
        assert self._thread is not None
        self._thread.run(self._end(rest))
        self._ended = True

    async def _end(self, rest: list[dict[str, Any]]) -> None:
        assert self.hub is not None
        hub = self.hub
        recorded = self.fixture["run"]
        for line in self.fixture["logs"]:
            hub.add_log(line[0], line[2], line[3], line[1], node=line[4])
        await self._add(rest, {})
        for row in self.fixture["ranks"]:
            self._load_rank(_public(row))
        for node in self.fixture["nodes"]:
            await hub.update_node(node["node_rank"], node["host"], node["state"], node.get("processes"),
                                  node.get("detail"))
        await hub.update_run(ended=recorded["ended"], status=recorded["status"], exit_code=recorded["exit_code"],
                             summary=recorded["summary"])
        await hub.close(reason=recorded["status"])

    def close(self) -> None:
        """End the replay (a run not ended yet is closed as stopped)."""
        if self._thread is None:
            return
        if not self._ended and self.hub is not None:
            hub = self.hub
            self._thread.run(hub.close(reason="stopped"))
        self._thread.stop()
        self._thread = None


def store_fixture(fixture: dict[str, Any]) -> int:
    """Write a recorded run into this test's run store as a finished run; returns its id."""
    run = fixture["run"]
    with RunStore() as store:
        run_id = store.create_run(run_key=f"{run['run_key']}-{time.time_ns()}", profile=fixture["scenario"],
                                  spec_toml=run.get("spec_toml") or "", command=run.get("command"),
                                  host=run.get("host") or "localhost", workdir=run.get("workdir"), runner_pid=0,
                                  socket=None, world_size=run.get("world_size"), status=run["status"])
        store.update_run(run_id, started=run.get("started"), ended=run.get("ended"), status=run["status"],
                         exit_code=run.get("exit_code"), summary=run.get("summary"))
        for row in fixture["ranks"]:
            values = {k: row[k] for k in RunStore.RANK_COLUMNS if k in row}
            store.upsert_rank(run_id, row["rank"], **values)
        for node in fixture["nodes"]:
            store.upsert_node(run_id, node["node_rank"], node["host"], node["state"], node.get("processes"),
                              node.get("detail"))
            with store.connection:
                store.connection.execute("UPDATE nodes SET changed = ? WHERE run_id = ? AND node_rank = ?",
                                         (node.get("changed"), run_id, node["node_rank"]))
        events = [protocol.Event.from_store(e["t"], e["kind"], e.get("rank"),
                                             {k: v for k, v in e.items() if k not in ("kind", "t", "rank")})
                  for e in fixture["events"]]
        logs = [protocol.LogLine(*line) for line in fixture["logs"]]
        store.write_batch(run_id, RecordBatch(events=events, logs=logs))
    return run_id
