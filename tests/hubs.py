"""Helpers for tests of the real hub: a hub on a real socket with its store, fake workers
that speak the real protocol, the memory of this process."""

from __future__ import annotations

import asyncio
import os
import random
import time
from pathlib import Path

import psutil

from rankwatch import protocol
from runner import paths
from runner.hub.hub import Hub
from runner.store.store import RunStore

TOKEN = "secret-token"


async def open_hub(tmp_path: Path, token: str = TOKEN, store_path: Path | None = None) -> tuple[Hub, Path]:
    """A hub with its run (store: ``tmp_path / "runs.db"`` unless given) listening on a Unix socket."""
    hub = Hub(store_path or tmp_path / "runs.db", token)
    await hub.create_run({}, run_key=f"k{random.random()}", profile="t", spec_toml="", command=None, host="h",
                         workdir=None, runner_pid=os.getpid(), socket=None, world_size=8, status="running")
    socket_path = paths.socket_dir() / f"hub-{os.getpid()}-{random.randrange(10**6)}.sock"
    await hub.serve_unix(socket_path)
    hub.start()
    return hub, socket_path


def hello(rank: int, token: str = TOKEN, pid: int | None = None) -> bytes:
    return protocol.Hello(rank=rank, token=token, run_key="k", local_rank=rank, node_rank=0, world_size=8,
                          local_world_size=8, host="h", pid=pid or os.getpid(), python="py", python_version="3",
                          restart=0, argv=[]).encode()


async def fake_worker(socket_path: Path, rank: int, records: int, token: str = TOKEN, batch: int = 250) -> int:
    """Speak the real protocol: hello, metric batches, exit. Returns records sent."""
    _reader, writer = await asyncio.open_unix_connection(str(socket_path))
    writer.write(hello(rank, token))
    sent = 0
    step = 0
    while sent < records:
        count = min(batch, records - sent)
        items = [[time.time(), step + i, "loss", float(i), "auto"] for i in range(count)]
        writer.write(protocol.encode_metric_items(rank, items))
        sent += count
        step += count
        await writer.drain()
    writer.write(protocol.Exit(rank, time.time(), 0).encode())
    await writer.drain()
    writer.close()
    await writer.wait_closed()
    return sent


def stored_count(tmp_path: Path, hub: Hub, table: str = "metrics") -> int:
    with RunStore(tmp_path / "runs.db", readonly=True) as store:
        return store.count(table, hub.run_id)


def rss_bytes() -> int:
    return psutil.Process().memory_info().rss
