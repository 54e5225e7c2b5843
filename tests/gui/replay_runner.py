"""Real runs, replayed to the GUI: the fixtures of ``data/capture.py`` through a real socket.

``data/<scenario>.json`` holds what the run store recorded for a real job (the run
with its summary, rank and node rows, every event in the hub's shape, the last log
lines). :class:`ReplayRunner` is the fake runner (``fake_runner.py``: the hub's side
of the real protocol on a real Unix socket) serving that run instead of simulated
training: the snapshot shows it running, :meth:`ReplayRunner.send_events` sends
recorded events (optionally moved to now), :meth:`ReplayRunner.end_as_recorded`
sends the rest with the final rank, node and run rows (status, summary) and
``bye``. It answers ``dump_stacks`` with the run's last real stack capture.

:func:`store_fixture` writes a fixture into the run store as a finished run, for
the History path (the monitor loads it from the store, not a socket).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from fake_runner import FakeRunner

from rankwatch import _protocol
from runner.store.store import RecordBatch, RunStore

DATA = Path(__file__).with_name("data")
TIME_FIELDS = ("t", "last_progress", "since", "when")


def load_fixture(name: str) -> dict[str, Any]:
    return json.loads((DATA / f"{name}.json").read_text(encoding="utf-8"))


def _public(row: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in row.items() if k != "run_id"}


def shifted(events: list[dict[str, Any]], offset: float) -> list[dict[str, Any]]:
    """The events moved in time by ``offset`` seconds (as if they happened now)."""
    return [{**e, **{k: e[k] + offset for k in TIME_FIELDS if isinstance(e.get(k), (int, float))}} for e in events]


class ReplayRunner(FakeRunner):
    def __init__(self, socket_path: str | Path, fixture: dict[str, Any], store: bool = True) -> None:
        recorded_ranks = {row["rank"]: _public(row) for row in fixture["ranks"]}
        super().__init__(socket_path, ranks=len(recorded_ranks), store=store, profile=fixture["scenario"],
                         slow_rank=None)
        self.fixture = fixture
        now = time.time()
        self.ranks = {rank: {**row, "state": "running", "exit_code": None, "last_seen": now}
                      for rank, row in recorded_ranks.items()}
        self.nodes = [{**_public(node), "state": "running", "detail": None, "changed": now}
                      for node in fixture["nodes"]]
        run = fixture["run"]
        self.run.update(host=run.get("host"), command=run.get("command"), workdir=run.get("workdir"),
                        world_size=run.get("world_size"))
        self.spec = {"version": 1, "script": fixture["scenario"] + ".py"}
        self.stacks_capture = next((e for e in reversed(fixture["events"])
                                    if e["kind"] == "stacks" and "groups" in e), None)
        self._sent_events: set[int] = set()

    def tick(self) -> None:
        """No simulated training: only what the fixture recorded is sent."""

    def events(self, *kinds: str) -> list[dict[str, Any]]:
        return [e for e in self.fixture["events"] if not kinds or e["kind"] in kinds]

    def send_events(self, *kinds: str, now: bool = False, rank_states: dict[int, str] | None = None,
                    first: int | None = None) -> list[dict]:
        """Send the recorded events of ``kinds`` (all when none; only the ``first`` N of them when
        given) not sent yet, moved to the present with ``now``; ``rank_states`` changes those
        ranks' rows in the same update (e.g. ``stalled``)."""
        chosen = [(i, e) for i, e in enumerate(self.fixture["events"])
                  if (not kinds or e["kind"] in kinds) and i not in self._sent_events][:first]
        events = [e for _i, e in chosen]
        if now and events:
            events = shifted(events, time.time() - min(e["t"] for e in events))
        ranks = []
        with self._lock:
            for rank, state in (rank_states or {}).items():
                self.ranks[rank]["state"] = state
                ranks.append(self.ranks[rank])
            self._sent_events.update(i for i, _e in chosen)
            self._send_update({"events": events, "ranks": ranks})
        return events

    def end_as_recorded(self) -> None:
        """The rest of the events, the logs, the final rank/node/run rows, then ``bye``."""
        recorded = self.fixture["run"]
        with self._lock:
            rest = [e for i, e in enumerate(self.fixture["events"]) if i not in self._sent_events]
            ranks = [{**_public(row), "last_seen": row.get("last_seen")} for row in self.fixture["ranks"]]
            nodes = [_public(node) for node in self.fixture["nodes"]]
            run = {**self.run, "status": recorded["status"], "ended": recorded["ended"],
                   "exit_code": recorded["exit_code"], "summary": recorded["summary"]}
            self.run.update(run)
            for row in ranks:
                self.ranks[row["rank"]].update(row)
            self._send_update({"events": rest, "logs": self.fixture["logs"], "ranks": ranks, "nodes": nodes,
                               "run": run})
            self._ended = True
            if self._store is not None:
                self._store.update_run(self.run_id, ended=recorded["ended"], status=recorded["status"],
                                       exit_code=recorded["exit_code"], summary=recorded["summary"])
            self._broadcast(_protocol.encode("bye", reason=f"run {recorded['status']}"))
        self.close()


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
        events = [_protocol.Event.from_store(e["t"], e["kind"], e.get("rank"),
                                             {k: v for k, v in e.items() if k not in ("kind", "t", "rank")})
                  for e in fixture["events"]]
        logs = [_protocol.LogLine(*line) for line in fixture["logs"]]
        store.write_batch(run_id, RecordBatch(events=events, logs=logs))
    return run_id
