"""Attaching to a big run: a bounded window of the history arrives, fast, with bounded memory.

One run holds 1,000,000 metric records and 200,000 log lines (hours of a real job).
``rankwatch attach`` (a real CLI process) and a second subscriber reading the same
stream (``HubClient``, as the CLI does) attach to the real hub at once. The replay is
bounded (``runner.store.replay_window``): the most recent log lines, the recent metrics in
full, older ones thinned to their envelope, and every series' exact last record.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time

import psutil

from rankwatch import protocol
from rankwatch.protocol import LogLine, MetricRecord
from runner import paths
from runner.hub.client import HubClient
from runner.store.replay_window import ReplayBudget
from runner.store.store import RecordBatch, RunStore
from tests.hubs import open_hub, rss_bytes

METRICS = 1_000_000
LOGS = 200_000
RANKS = 8
CLI_MEMORY_BOUND = 200 << 20
HUB_GROWTH_BOUND = 64 << 20
BUDGET = ReplayBudget()
LOGS_REPLAYED = BUDGET.keep["logs"]
METRICS_REPLAYED_BOUND = BUDGET.metric_tail + BUDGET.metric_older_points + 4 * RANKS * 5
REPLAY_SECONDS_BOUND = 20.0
"""Loose (the machine is shared): the replay takes ~2 s, where all of it took 30-55 s."""


def fill(store: RunStore, run_id: int) -> None:
    """The history, as a long run of 8 ranks would have left it (written in 100k-row transactions)."""
    t0 = 1_700_000_000.0
    names = ("loss", "step_time", "data_wait", "samples_per_s", "steps_per_s")
    for start in range(0, METRICS, 100_000):
        batch = RecordBatch(metrics=[
            MetricRecord(index % RANKS, t0 + index / 1000, index // (RANKS * 5), names[index // RANKS % 5],
                         float(index), "auto") for index in range(start, start + 100_000)])
        store.write_batch(run_id, batch)
    for start in range(0, LOGS, 100_000):
        store.write_batch(run_id, RecordBatch(logs=[
            LogLine(index % RANKS, t0 + index / 100, "stdout", f"line {index} of the training log", "h")
            for index in range(start, start + 100_000)]))


async def count_replay(socket_path: str) -> dict:
    client = await HubClient.subscribe(socket_path, history=True)
    seen: dict = {"metrics": 0, "logs": 0, "dropped": 0, "last": {}}
    try:
        async for message in client.messages():
            if message["type"] == "update":
                seen["metrics"] += len(message.get("metrics") or [])
                seen["logs"] += len(message.get("logs") or [])
                for row in message.get("metrics") or []:
                    seen["last"][(row[0], row[3], row[5])] = row
            elif message["type"] == "history_end":
                break
    finally:
        seen["dropped"] = client.lines_dropped
        client.close()
    return seen


async def watch_cli(process: asyncio.subprocess.Process, seen: dict) -> None:
    """Count the CLI's log lines and sample its memory until it has printed the whole history."""
    tracked = psutil.Process(process.pid)
    while seen["lines"] < LOGS_REPLAYED:
        line = await asyncio.wait_for(process.stdout.readline(), 120)
        if not line:
            return
        if line.startswith(b"[rank "):
            seen["lines"] += 1
            if seen["lines"] % 1_000 == 0:
                seen["peak_rss"] = max(seen["peak_rss"], tracked.memory_info().rss)


def last_of_every_series(store: RunStore, run_id: int) -> dict:
    last = {}
    for chunk in store.iter_metrics(run_id):
        for row in chunk:
            last[(row[0], row[3], row[5])] = list(row)
    return last


def test_attach_to_a_run_with_a_million_records_gets_a_bounded_replay_with_exact_last_values(tmp_path):
    async def scenario():
        hub, socket_path = await open_hub(tmp_path, store_path=paths.store_path())  # where the CLI looks
        await hub.writer.call(fill, hub.run_id)
        await hub.update_run(socket=str(socket_path))
        before = rss_bytes()
        cli = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "runner", "attach", str(hub.run_id), "--plain", "--status-every", "0",
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, limit=1 << 20)
        seen_by_cli = {"lines": 0, "peak_rss": 0}
        started = time.monotonic()
        replay, _ = await asyncio.gather(count_replay(str(socket_path)), watch_cli(cli, seen_by_cli))
        seconds = time.monotonic() - started
        hub_growth = rss_bytes() - before
        stored_last = await hub.writer.call(last_of_every_series, hub.run_id)
        await hub.close(reason="succeeded")
        _, stderr = await cli.communicate()
        return replay, seen_by_cli, hub_growth, seconds, cli.returncode, stderr.decode(), stored_last

    replay, cli, hub_growth, seconds, returncode, stderr, stored_last = asyncio.run(scenario())
    assert replay["metrics"] <= METRICS_REPLAYED_BOUND, replay["metrics"]
    assert (replay["logs"], replay["dropped"]) == (LOGS_REPLAYED, 0)
    assert replay["last"] == stored_last  # every series, its exact newest record
    assert seconds < REPLAY_SECONDS_BOUND, f"the replay took {seconds:.1f} s"
    assert cli["lines"] == LOGS_REPLAYED, stderr[-2000:]
    assert returncode == 0, stderr[-2000:]
    assert "Traceback" not in stderr
    assert 0 < cli["peak_rss"] < CLI_MEMORY_BOUND, f"attach used {cli['peak_rss'] >> 20} MB"
    assert hub_growth < HUB_GROWTH_BOUND, f"the hub grew {hub_growth >> 20} MB replaying to two subscribers"
    print(f"attach: {replay['metrics']:,} of {METRICS:,} metrics + {LOGS_REPLAYED:,} of {LOGS:,} lines in "
          f"{seconds:.1f} s; CLI peak "
          f"{cli['peak_rss'] >> 20} MB, hub +{hub_growth >> 20} MB", file=sys.stderr)


def test_every_update_line_fits_a_readers_line_limit():
    from collections import Counter

    from runner.hub.publisher import encode_update, update_lines

    batch = RecordBatch(metrics=[MetricRecord(0, 1.0, i, "é" * 128, 0.5, "auto") for i in range(50_000)],
                        logs=[LogLine(0, 1.0, "stdout", "\x01" * 60_000, None) for _ in range(40)],
                        events=[protocol.Event(1.0, "warning", None, "x" * (2 << 20))])
    stats: Counter[str] = Counter()
    lines = [line for update in update_lines(1.0, batch) for line in encode_update(update, stats)]
    assert all(len(line) < protocol.MAX_LINE_BYTES for line in lines)
    records = [json.loads(line) for line in lines]
    assert sum(len(r["metrics"]) for r in records) == 50_000 and sum(len(r["logs"]) for r in records) == 40
    assert stats["lines_too_long"] == 1  # the one event bigger than any line: left out and counted


def test_an_update_cut_into_lines_keeps_its_rank_rows_run_and_nodes():
    """Seen at 1,024 fake ranks: a flush's rank rows and 3,000 records passed 1 MiB, the
    update was cut along its records, and the halves kept only those: the rank rows, the run
    row and the nodes were lost on every such flush, so an attached table stood still."""
    from runner.hub.publisher import encode_update, update_lines
    from runner.runstate.messages import RankInfo

    rows = [RankInfo(rank=rank, state="running", step=100, loss=1.5, host=f"node-{rank // 8:03d}",
                     phase_shares={"data": 0.1, "forward": 0.3, "backward": 0.5, "rest": 0.1}).to_wire()
            for rank in range(2048)]
    batch = RecordBatch(metrics=[MetricRecord(rank % 1024, 1.0, 100, "phase_forward", 0.25, "auto")
                                 for rank in range(3000)])
    first, *rest = list(update_lines(1.0, batch))
    first.ranks, first.run, first.nodes = rows, {"id": 1, "status": "running"}, [{"node_rank": 0, "host": "h"}]
    lines = [line for update in (first, *rest) for line in encode_update(update)]
    assert len(lines) > 1 and all(len(line) < protocol.MAX_LINE_BYTES for line in lines)
    decoded = [json.loads(line) for line in lines]
    assert sorted(row["rank"] for line in decoded for row in line["ranks"]) == list(range(2048))
    assert sum(len(line["metrics"]) for line in decoded) == 3000
    assert [line["run"] for line in decoded if line["run"]] == [{"id": 1, "status": "running"}]
    assert sum(len(line["nodes"]) for line in decoded) == 1
