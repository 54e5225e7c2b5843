"""Forged hellos against a real hub: a hello's pid is the worker's word, never a steering wheel."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from rankwatch import protocol
from runner.diagnosis.stack_capture import StackCapture
from runner.launch.process_tree import carries_marker
from runner.sampling.samplers import ProcessSampler
from runner.store.store import RunStore
from tests.hubs import hello, open_hub

WORKER_PATH = str(Path(__file__).resolve().parents[2] / "runner" / "worker_path")


def test_a_hello_with_pid_minus_one_costs_no_other_rank_its_sampling(tmp_path, caplog):
    """A forged ``pid: -1`` is no pid: the rank has none, and the sampler still measures the others."""
    async def scenario():
        hub, socket_path = await open_hub(tmp_path)
        writers = []
        for rank, pid in ((0, -1), (1, None)):  # rank 1: this process, a real pid
            _, writer = await asyncio.open_unix_connection(str(socket_path))
            writer.write(hello(rank, pid=pid))
            await writer.drain()
            writers.append(writer)
        await asyncio.sleep(0.3)
        pids = hub.model.pids()
        rows = []
        sampler = ProcessSampler(1.0, pids=lambda: {**hub.model.pids(), 2: -1}, emit=rows.extend)
        with caplog.at_level(logging.WARNING):
            for _ in range(3):
                sampler.sample()
        for writer in writers:
            writer.close()
        await hub.close()
        return pids, rows
    pids, rows = asyncio.run(scenario())
    assert 0 not in pids and pids[1] > 0  # the forged pid was not taken
    assert [row.rank for row in rows] == [1, 1, 1]  # every sample, despite the bad entry
    assert not [record for record in caplog.records if record.exc_info]  # no traceback
    assert len([record for record in caplog.records if "cannot sample process -1" in record.getMessage()]) == 1


RANK_PROCESS = """
import os, socket, sys, time
sys.path.insert(0, sys.argv[3])
from rankwatch import protocol
connection = socket.socket(socket.AF_UNIX)
connection.connect(sys.argv[1])
connection.sendall(protocol.Hello(rank=int(sys.argv[2]), token="secret-token", host="h", local_rank=0, node_rank=0,
                                  pid=os.getpid()).encode())
print("ready", flush=True)
time.sleep(30)
"""


def test_stacks_signal_only_a_process_that_proved_it_is_the_rank(tmp_path):
    """A forged hello naming a process of the run (torchrun, the keeper: they carry the marker,
    and SIGUSR2's default action kills) gets it refused; a rank that connected from its own pid
    is signalled."""
    run_key = "run-key-of-this-test"
    marked = {**os.environ, "RANKWATCH_RUN_KEY": run_key}
    torchrun_like = subprocess.Popen(["sleep", "30"], env=marked)  # of the run, never said hello itself
    stranger = subprocess.Popen(["sleep", "30"])
    stacks = tmp_path / "stacks"
    stacks.mkdir()
    for rank in (0, 1, 2):
        (stacks / f"rank-{rank}.txt").write_text("")

    async def scenario():
        hub, socket_path = await open_hub(tmp_path)
        rank_process = subprocess.Popen([sys.executable, "-c", RANK_PROCESS, str(socket_path), "2", WORKER_PATH],
                                        env=marked, stdout=subprocess.PIPE, text=True)
        writers = []
        for rank, pid in ((0, torchrun_like.pid), (1, stranger.pid)):  # forged: sent by this process
            _, writer = await asyncio.open_unix_connection(str(socket_path))
            writer.write(hello(rank, pid=pid))
            await writer.drain()
            writers.append(writer)
        assert await asyncio.to_thread(rank_process.stdout.readline) == "ready\n"
        await asyncio.sleep(0.3)
        capture = StackCapture(hub, stacks, is_local=lambda row: True, wait_seconds=0.5, ask_seconds=0.1,
                               is_ours=lambda pid: carries_marker(pid, run_key), proven_pid=hub.proven_pid)
        capture.capture_stacks()
        await asyncio.sleep(1.0)
        for writer in writers:
            writer.close()
        await hub.close()
        return capture.latest, rank_process
    rank_process = None
    try:
        result, rank_process = asyncio.run(scenario())
        assert torchrun_like.poll() is None, "a process of the run that is no rank was signalled"
        assert stranger.poll() is None, "a stranger was signalled"
        assert rank_process.wait(5) == -signal.SIGUSR2  # the rank itself was (no handler here: it dies of it)
        refused = {m["rank"]: m["why"] for m in result["missing"]}
        assert f"refused to signal pid {torchrun_like.pid}" in refused[0]
        assert f"refused to signal pid {stranger.pid}" in refused[1]
    finally:
        for process in (torchrun_like, stranger, rank_process):
            if process is not None:
                process.kill()
                process.wait()



def test_a_forged_negative_drop_count_is_no_count(tmp_path):
    """A heartbeat's ``dropped: -1`` once read "-1 records dropped"; a count is never negative."""
    async def scenario():
        hub, socket_path = await open_hub(tmp_path)
        _, writer = await asyncio.open_unix_connection(str(socket_path))
        writer.write(hello(0))
        writer.write(protocol.encode("heartbeat", rank=0, t=time.time(), step=3, dropped=5, sent=10))
        writer.write(protocol.encode("heartbeat", rank=0, t=time.time(), step=4, dropped=-1, sent=-7))
        await writer.drain()
        await asyncio.sleep(0.3)
        row = hub.model.ranks[0]
        writer.close()
        await hub.close()
        return row
    row = asyncio.run(scenario())
    assert row.step == 4 and row.dropped == 5  # the forged count changed nothing


def test_a_refused_agent_hello_reads_as_english_over_tcp(tmp_path):
    async def scenario():
        hub, _socket_path = await open_hub(tmp_path)
        port = await hub.serve_tcp("127.0.0.1", 0)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(protocol.AgentHello(node_rank=1, token="wrong", host="h").encode())
        await writer.drain()
        await reader.read()
        writer.close()
        await hub.close()
        with RunStore(tmp_path / "runs.db", readonly=True) as store:
            return [event.message for event in store.stored_events(hub.run_id, kind="refused")]
    [message] = asyncio.run(scenario())
    assert "an agent_hello with a wrong or missing token" in message
