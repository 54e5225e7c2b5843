"""Attaching replays a bounded window of the run's history, whatever the run's size.

A real hub with its real SQLite store; the history is written through the store API (fast)
and a fake worker speaking the real protocol adds the newest records; subscribers are real
``HubClient`` connections on the hub's socket.
"""

from __future__ import annotations

import asyncio
import json
import math
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

from rankwatch import protocol
from rankwatch.protocol import LogLine, MetricRecord
from runner.hub import publisher
from runner.hub.client import HubClient
from runner.store import replay_window
from runner.store.replay_window import ReplayBudget
from runner.store.store import RecordBatch, RunStore
from tests.hubs import fake_worker, open_hub, stored_count

T0 = 1_700_000_000.0
SERIES = [(rank, name) for rank in range(3) for name in ("loss", "grad_norm")]
WORKER_RECORDS = 500


def fill(store: RunStore, run_id: int, metrics: int, logs: int = 0) -> None:
    """``metrics`` records over ``SERIES`` (a wave, so each bucket has a low and a high), and ``logs`` lines."""
    for start in range(0, metrics, 50_000):
        store.write_batch(run_id, RecordBatch(metrics=[
            MetricRecord(SERIES[index % len(SERIES)][0], T0 + index / 100, index // len(SERIES),
                         SERIES[index % len(SERIES)][1], math.sin(index / 997) * (1 + index / metrics), "auto")
            for index in range(start, min(metrics, start + 50_000))]))
    if logs:
        store.write_batch(run_id, RecordBatch(logs=[LogLine(0, T0 + index, "stdout", f"line {index}", "h")
                                                    for index in range(logs)]))


async def replay(socket_path: Path, records: bool = True) -> dict[str, Any]:
    """Everything a subscriber gets up to ``history_end``: records, bytes, flags."""
    client = await HubClient.subscribe(str(socket_path), history=True, records=records)
    seen: dict[str, Any] = {"metrics": [], "logs": [], "bytes": 0, "decimated_updates": 0, "history_end": None,
                            "ranks": 0}
    try:
        async for message in client.messages():
            seen["bytes"] += len(json.dumps(message, separators=(",", ":")))
            if message["type"] == "snapshot":
                seen["ranks"] = len(message.get("ranks") or [])
            elif message["type"] == "update":
                seen["metrics"] += message.get("metrics") or []
                seen["logs"] += message.get("logs") or []
                seen["decimated_updates"] += bool(message.get("decimated"))
            elif message["type"] == "history_end":
                seen["history_end"] = message
                break
    finally:
        client.close()
    return seen


async def big_run_replayed(tmp_path: Path, metrics: int, logs: int = 0,
                           budget: ReplayBudget | None = None) -> tuple[dict[str, Any], Path]:
    tmp_path.mkdir(exist_ok=True)
    hub, socket_path = await open_hub(tmp_path)
    if budget is not None:
        hub.publisher.replay_budget = budget
    try:
        await hub.writer.call(fill, hub.run_id, metrics, logs)
        await fake_worker(socket_path, 0, WORKER_RECORDS)
        while stored_count(tmp_path, hub) < metrics + WORKER_RECORDS:
            await asyncio.sleep(0.05)
        seen = await asyncio.wait_for(replay(socket_path), 60)
        seen["run_id"] = hub.run_id
    finally:
        await hub.close(reason="succeeded")
    return seen, tmp_path / "runs.db"


def by_series(rows: list[Any]) -> dict[tuple[int, str, str], list[Any]]:
    series: dict[tuple[int, str, str], list[Any]] = defaultdict(list)
    for row in rows:
        series[(row[0], row[3], row[5])].append(row)
    return series


def test_attaching_to_a_run_of_300k_records_replays_a_bounded_window_and_reaches_history_end(tmp_path):
    seen, _store = asyncio.run(big_run_replayed(tmp_path, 300_000, logs=30_000))
    budget = ReplayBudget()
    assert seen["history_end"] is not None
    assert len(seen["metrics"]) <= budget.metric_tail + budget.metric_older_points + 4 * len(SERIES) + 1
    assert len(seen["logs"]) == budget.keep["logs"]
    assert seen["logs"][-1][3] == "line 29999"  # the most recent ones
    assert seen["bytes"] < 6 << 20, seen["bytes"]
    end = seen["history_end"]
    assert end["decimated"] is True
    assert end["left_out"]["logs"] == 30_000 - budget.keep["logs"]
    assert end["left_out"]["metrics"] == 300_000 + WORKER_RECORDS - len(seen["metrics"])


def test_a_decimated_replay_keeps_every_series_last_value_and_envelope_exact(tmp_path):
    seen, store_path = asyncio.run(big_run_replayed(tmp_path, 300_000))
    assert seen["decimated_updates"] > 0
    replayed = by_series(seen["metrics"])
    with RunStore(store_path, readonly=True) as store:
        stored = by_series(store.metrics(seen["run_id"]))
    assert replayed.keys() == stored.keys()
    for key, rows in stored.items():
        assert list(replayed[key][-1]) == list(rows[-1]), key  # the exact newest record
        values = [row[4] for row in rows]
        got = [row[4] for row in replayed[key]]
        assert (min(got), max(got)) == (min(values), max(values)), key
        assert len(replayed[key]) < len(rows)


def test_replay_is_exact_up_to_the_budget_and_bounded_past_it(tmp_path):
    budget = ReplayBudget(metric_tail=1_000, metric_older_points=2_000)
    exact, store_path = asyncio.run(big_run_replayed(tmp_path / "a", 3_000 - WORKER_RECORDS, budget=budget))
    with RunStore(store_path, readonly=True) as store:
        stored = [list(row) for row in store.read_chunk("metrics", exact["run_id"], 0, None, 10_000)[0]]
    assert [list(row) for row in exact["metrics"]] == stored  # every record, as stored, in order
    assert exact["decimated_updates"] == 0
    assert protocol.HistoryEnd.from_wire(exact["history_end"]) == protocol.HistoryEnd(False, {})

    over, _ = asyncio.run(big_run_replayed(tmp_path / "b", 20_000 - WORKER_RECORDS, budget=budget))
    assert len(over["metrics"]) <= budget.metric_tail + budget.metric_older_points + 4 * len(SERIES) + 1
    assert over["history_end"]["decimated"] is True


def test_past_the_envelope_scan_limit_a_replay_samples_by_seeks_bounded_with_exact_last_values(tmp_path,
                                                                                             monkeypatch):
    monkeypatch.setattr(replay_window, "ENVELOPE_SCAN_ROWS", 10_000)  # as if the older part were huge
    budget = ReplayBudget(metric_tail=1_000, metric_older_points=600)
    seen, store_path = asyncio.run(big_run_replayed(tmp_path, 40_000, budget=budget))
    assert seen["history_end"]["decimated"] is True
    assert "metrics" not in seen["history_end"]["left_out"]  # not counted: that would read every row
    assert len(seen["metrics"]) <= budget.metric_tail + budget.metric_older_points + 2 * len(SERIES)
    replayed = by_series(seen["metrics"])
    with RunStore(store_path, readonly=True) as store:
        stored = by_series(store.metrics(seen["run_id"]))
    assert replayed.keys() == stored.keys()
    for key, rows in stored.items():
        assert list(replayed[key][-1]) == list(rows[-1]), key
        assert list(replayed[key][0]) == list(rows[0]), key  # the curve still starts where it started


def test_history_end_says_what_a_bounded_replay_left_out_and_reads_leniently():
    end = protocol.HistoryEnd(True, {"logs": 20_000, "metrics": 250_000})
    assert protocol.decode_message(end.encode()) == end
    assert protocol.decode_message(b'{"type":"history_end","v":1}\n') == protocol.HistoryEnd(False, {})
    odd = protocol.decode_message(b'{"type":"history_end","v":1,"decimated":"yes","left_out":{"logs":-1,"x":2}}\n')
    assert odd == protocol.HistoryEnd(False, {"x": 2})


SLOW_READER = r"""
import json, socket, sys, time
path, subscribe = sys.argv[1:3]
client = socket.socket(socket.AF_UNIX)
client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
client.connect(path)
client.sendall(subscribe.encode())
client.settimeout(3)
last, history_end, pending = {}, None, b""
try:
    while True:
        data = client.recv(16384)
        if not data:
            break
        *lines, pending = (pending + data).split(b"\n")
        for line in lines:
            message = json.loads(line)
            if message["type"] == "history_end":
                history_end = message
            for row in message.get("metrics") or []:
                last[json.dumps([row[0], row[3], row[5]])] = row
        if history_end is None:
            time.sleep(0.05)  # ~300 KB/s while the history loads: the replay outlasts the live budget
except socket.timeout:
    pass  # the run went quiet
print(json.dumps({"last": last, "history_end": history_end}))
"""
"""A subscriber in its own process (as ``rankwatch attach`` is) that reads its history slowly,
then live records until the run is quiet for 3 s; it prints each series' last record."""


def watch_with_a_slow_reader(tmp_path: Path, live_records: int) -> tuple[dict[str, Any], dict[str, int]]:
    """A hub whose store holds 30,000 records, ``SLOW_READER`` subscribed with history, then one
    worker's ``live_records``: what the reader printed, and the hub's stats."""
    async def scenario() -> tuple[dict[str, Any], dict[str, int]]:
        hub, socket_path = await open_hub(tmp_path)
        await hub.writer.call(fill, hub.run_id, 30_000)
        reader = await asyncio.create_subprocess_exec(
            sys.executable, "-c", SLOW_READER, str(socket_path), protocol.Subscribe(history=True).encode().decode(),
            stdout=asyncio.subprocess.PIPE)
        while not hub.publisher.subscribers:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.5)
        await fake_worker(socket_path, 0, live_records, batch=1_000)
        out, _ = await asyncio.wait_for(reader.communicate(), 120)
        stats = dict(hub.stats)
        await hub.close(reason="succeeded")
        return json.loads(out), stats

    return asyncio.run(scenario())


def test_a_reader_whose_replay_outlasts_the_live_budget_catches_up_from_the_store_instead_of_being_dropped(
        tmp_path, monkeypatch):
    monkeypatch.setattr(publisher, "DISCONNECT_ABOVE_BYTES", 1 << 20)  # as 16 MiB is at 1,024 ranks
    got, stats = watch_with_a_slow_reader(tmp_path, 60_000)
    got["last"] = {tuple(json.loads(key)): row for key, row in got["last"].items()}
    assert got["history_end"] is not None, "the reader was dropped before history_end"
    assert stats.get("subscribers_dropped", 0) == 0 and stats["replay_catch_ups"] >= 1, stats
    with RunStore(tmp_path / "runs.db", readonly=True) as store:
        stored = {key: list(rows[-1]) for key, rows in by_series(store.metrics(1)).items()}
    assert got["last"] == stored  # nothing the live run stored is missing at the end


def test_a_reader_still_behind_after_its_catch_ups_is_dropped_for_that_and_told_so(tmp_path, monkeypatch):
    """The reader above, with no catch-up allowed: it is dropped after its replay, and the warning
    says it read more slowly than the run wrote. It once said that it "stopped reading" and that
    5.4 MiB were "more than the 16 MiB held for one" (seen at 1,024 ranks)."""
    monkeypatch.setattr(publisher, "DISCONNECT_ABOVE_BYTES", 1 << 20)
    monkeypatch.setattr(publisher, "CATCH_UP_ROUNDS", 0)

    got, stats = watch_with_a_slow_reader(tmp_path, 60_000)
    assert got["history_end"] is None
    assert stats["subscribers_dropped"] == stats["subscribers_dropped_slower_than_run"] == 1, stats
    with RunStore(tmp_path / "runs.db", readonly=True) as store:
        [warning] = [event.message for event in store.stored_events(1, "warning") if "disconnected" in event.message]
    assert "read the run's history more slowly than the run wrote it: still behind after 0 catch-ups" in warning
    assert "stopped reading" not in warning and "more than the" not in warning
