"""The hub's messages to subscribers, typed (``runner.runstate.messages``), and the one run
state built from them (``runner.runstate.state.RunState``), against the real hub."""

from __future__ import annotations

import asyncio
import json
import time

from rankwatch import protocol
from runner.hub.client import HubClient
from runner.runstate.messages import (
    Bye,
    EventKind,
    HistoryEnd,
    NodeInfo,
    RankInfo,
    RunInfo,
    SnapshotMessage,
    StalledFields,
    StoppingFields,
    UpdateMessage,
    decode_hub_message,
    fields_of,
)
from runner.runstate.state import RunState, steps_done
from tests.hub_messages import rank_changes, run_changes, update
from tests.hubs import fake_worker, open_hub


def _messages_of_a_real_run(tmp_path) -> list[dict]:
    """Every message a subscriber of the real hub gets while two fake ranks run and exit."""
    async def scenario() -> list[dict]:
        hub, socket_path = await open_hub(tmp_path)
        live: list[dict] = []
        hub.add_local_subscriber(live.append)
        await asyncio.gather(fake_worker(socket_path, 0, 40), fake_worker(socket_path, 1, 40))
        hub.add_log(0, "stdout", "hello from rank 0", time.time(), "h")
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and not any(
                row.get("state") == "exited" for m in live for row in m.get("ranks") or []):
            await asyncio.sleep(0.05)
        client = await HubClient.subscribe(str(socket_path))
        replayed = []
        async for message in client.messages():
            replayed.append(message)
            if message["type"] == "history_end":
                break
        client.close()
        await hub.close()
        return [json.loads(json.dumps(m, default=list)) for m in live] + replayed

    return asyncio.run(scenario())


def test_every_message_of_a_real_hub_decodes_and_goes_back_to_the_wire_unchanged(tmp_path):
    messages = _messages_of_a_real_run(tmp_path)
    kinds = {message["type"] for message in messages}
    assert {"snapshot", "update", "history_end"} <= kinds
    typed = [decode_hub_message(message) for message in messages]
    assert all(message is not None for message in typed)
    snapshots = [m for m in typed if isinstance(m, SnapshotMessage)]
    assert snapshots[0].run is not None and snapshots[0].run.status == "running"
    ranks = [RankInfo.from_wire(row) for m in typed if isinstance(m, UpdateMessage) for row in m.ranks]
    assert {row.rank for row in ranks} == {0, 1}
    assert max(row.step or 0 for row in ranks) == 39  # a number, not text
    for message, wire in zip(typed, messages, strict=True):
        assert message is not None
        again = message.to_wire()
        decoded_again = decode_hub_message(again)
        assert decoded_again is not None and decoded_again.to_wire() == again
        if isinstance(message, SnapshotMessage):
            assert again["ranks"] == wire["ranks"] and again["run"] == wire["run"]
    events = [event for m in typed if isinstance(m, UpdateMessage) for event in m.events]
    assert EventKind.RANK_STARTED in {event.kind for event in events}
    logs = [line for m in typed if isinstance(m, UpdateMessage) for line in m.logs]
    assert [line.line for line in logs if line.rank == 0][-1] == "hello from rank 0"


def test_rows_are_lenient_and_keep_what_a_newer_hub_adds():
    row = RankInfo.from_wire({"rank": 3, "step": 12.0, "loss": "nan-ish", "state": None, "newer": [1]})
    assert (row.rank, row.step, row.loss, row.state) == (3, 12, None, "waiting")
    assert row.to_wire()["newer"] == [1]
    assert row.merged({"loss": 0.5}).loss == 0.5 and row.merged({"loss": 0.5}).step == 12
    run = RunInfo.from_wire({"id": 4, "status": "running", "summary": '{"headline": "ok"}'})
    assert run.summary == {"headline": "ok"}
    assert NodeInfo.from_wire({"host": "a"}).node_rank == 0
    assert decode_hub_message({"type": "pong"}) is None
    assert decode_hub_message({"type": "bye", "reason": "run ended"}) == Bye("run ended")
    assert decode_hub_message({"type": "history_end"}) == HistoryEnd()
    newer = UpdateMessage.from_wire({"t": 1.0, "events": [{"kind": "no_such_kind", "t": 2.0, "rank": 1}],
                                     "ranks": [{"step": 3}], "logs": [[0, 1.0]]})
    assert newer.events[0].kind == EventKind.WARNING  # a kind from a newer hub
    assert newer.ranks == () and newer.logs == ()


def test_the_run_state_counts_steps_once_and_keeps_only_this_runs_ranks():
    state = RunState()
    state.apply(SnapshotMessage(RunInfo(id=1, status="running"), tuple(RankInfo(rank=r) for r in range(8))))
    state.apply(update(ranks=[rank_changes(2, step=639)]))
    assert state.current_step() == 639 and state.steps_done() == 640 == steps_done(639)
    assert state.rank_set() == list(range(8))
    changes = state.apply(SnapshotMessage(RunInfo(id=2, status="running"), (RankInfo(rank=0), RankInfo(rank=1))))
    assert changes.reset and state.rank_set() == [0, 1] and state.current_step() is None
    changes = state.apply(update(run=run_changes(status="succeeded")))
    assert changes.status and state.finished and state.run is not None and state.run.id == 2


def test_a_process_that_is_gone_keeps_its_last_known_figures_not_zeros():
    state = RunState()
    state.apply(SnapshotMessage(RunInfo(id=1, status="running"), (RankInfo(rank=0),)))
    alive = protocol.ProcessSample(1.0, 0, 42, 97.0, 300 << 20, 9)
    gone = protocol.ProcessSample(2.0, 0, 42, 0.0, 0, 0)
    assert state.note_process_samples([alive, gone]) == [alive]
    assert state.process_figures(0) == (97.0, 300 << 20)


def test_the_data_wait_share_pairs_step_time_and_data_wait_in_either_order():
    state = RunState()
    assert state.pair_data_wait(protocol.MetricRecord(0, 1.0, 5, protocol.DATA_WAIT, 0.05, "auto")) is None
    paired = state.pair_data_wait(protocol.MetricRecord(0, 1.1, 5, protocol.STEP_TIME, 0.2, "auto"))
    assert paired is not None and paired[0] == 5 and paired[2] == 0.25



def test_the_fields_of_the_kinds_readers_use_are_typed():
    stalled = protocol.Event(5.0, EventKind.STALLED, 1, "rank 1 stalled", {"step": 7, "seconds": 6.0,
                                                                             "threshold": 5.0, "extra": "kept"})
    assert fields_of(stalled) == StalledFields(step=7, seconds=6.0, threshold=5.0)
    assert fields_of(stalled).extra == {"extra": "kept"}  # type: ignore[union-attr]
    stopping = UpdateMessage.from_wire({"events": [{"kind": "stopping", "t": 1.0, "rank": None, "message": "m",
                                                    "stopped_by": "SIGINT (Ctrl-C)"}]}).events[0]
    assert fields_of(stopping) == StoppingFields(stopped_by="SIGINT (Ctrl-C)")
    assert fields_of(protocol.Event(1.0, EventKind.WARNING, None, "w")) is None  # its fields stay as sent


def test_a_row_made_positionally_gets_its_own_first_field_not_the_unknown_keys():
    """``extra`` (keys this version does not know) came first, inherited: ``RankInfo(3)`` was rank 0."""
    assert RankInfo(3).rank == 3 and RankInfo(3).extra == {}
    assert RunInfo(7).id == 7
