"""Many fake ranks in one process: what stands in for a node's workers in the scale benchmark.

Each rank has its own Unix-socket connection to the hub (as every real rank's reporter
has) and speaks the real protocol: ``hello``, one step row per optimizer step as the
zero-code instrumentation sends it (``protocol.STEP_ROW_LENGTH``: loss, step time, data
wait, samples, phases on the CPU clock), a ``heartbeat`` a second with the records sent so
far, and at the end an ``exit``. A rank prints a line every ``--print-every`` steps; the
lines go to stdout as JSON (rank, t, text) for the runner's fake node to hand over, as
torchrun's captured output is. The ranks run until ``--stop-file`` exists, then each
sends ``exit`` 0 and what every rank sent is written to ``--result`` (JSON), so the
benchmark can compare it with the store.

Ranks are spread over the step period (their steps do not all land in the same
millisecond), as independent processes' are.

    python tests/bench/scale_ranks.py SOCKET TOKEN RUN_KEY --first 0 --count 256 --world-size 1024 \
        --rate 2 --stop-file STOP --result OUT.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import random
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
for _path in (str(REPO), str(REPO / "runner" / "worker_path")):
    if _path not in sys.path:
        sys.path.insert(0, _path)

from rankwatch import protocol  # noqa: E402

HEARTBEAT_S = 1.0
BACKOFF_MIN_S = 0.1
BACKOFF_MAX_S = 2.0
GPUS_PER_NODE = 8
PHASE_SPLIT = (0.03, 0.30, 0.45, 0.10, 0.08, 0.04)
"""h2d, forward, backward, comm, optimizer, rest: shares of a step past its data wait."""


@dataclass
class RankSent:
    """What one fake rank sent, in the hub's units."""

    records: int = 0
    """Metric records (a step row counts as the records the hub makes of it)."""
    lines: int = 0
    heartbeats: int = 0
    steps: int = 0
    reconnects: int = 0
    """Connections the hub dropped before this rank's hello (the rank connected again)."""


@dataclass
class FakeRank:
    rank: int
    world_size: int
    writer: asyncio.StreamWriter
    rng: random.Random
    sent: RankSent = field(default_factory=RankSent)

    def step_row(self, step: int, now: float) -> list:
        step_time = 0.5 * (1 + 0.1 * self.rng.random())
        data_wait = step_time * (0.05 + 0.05 * self.rng.random())
        working = step_time - data_wait
        loss = 2.3 * math.exp(-step / 500.0) + 0.05 * self.rng.random()
        phases = [protocol.CLOCK_CPU, data_wait, *(working * share for share in PHASE_SPLIT)]
        return [now, step, loss, step_time, data_wait, 32, None, False, phases]


async def connect(socket_path: str, token: str, run_key: str, rank: int, world_size: int) -> FakeRank:
    """Connect and say hello; a connection the hub drops before the hello is tried again after
    a backoff, as ``rankwatch._reporter`` reconnects (counted in ``RankSent.reconnects``)."""
    node = rank // GPUS_PER_NODE
    hello = protocol.Hello(
        rank=rank, token=token, run_key=run_key, local_rank=rank, node_rank=0, world_size=world_size,
        local_world_size=world_size, host=f"fake-node-{node}", pid=os.getpid(), python=sys.executable,
        python_version=".".join(map(str, sys.version_info[:3])), restart=0, argv=["fake_train.py"]).encode()
    sent = RankSent()
    backoff = BACKOFF_MIN_S
    while True:
        try:
            _reader, writer = await asyncio.open_unix_connection(socket_path)
            writer.write(hello)
            await writer.drain()
            return FakeRank(rank, world_size, writer, random.Random(rank), sent)
        except ConnectionError:
            sent.reconnects += 1
            await asyncio.sleep(backoff)
            backoff = min(2 * backoff, BACKOFF_MAX_S)


async def train(rank: FakeRank, rate_hz: float, print_every: int, stop: asyncio.Event) -> None:
    """Step at ``rate_hz`` until ``stop``, starting at a random point of the first period."""
    period = 1.0 / rate_hz
    await asyncio.sleep(rank.rng.random() * period)
    next_tick = time.monotonic()
    last_heartbeat = 0.0
    step = 0
    writer = rank.writer
    while not stop.is_set():
        now = time.time()
        row = rank.step_row(step, now)
        writer.write(protocol.encode_metric_items(rank.rank, [row]))
        rank.sent.records += protocol.step_row_size(row)
        rank.sent.steps += 1
        if now - last_heartbeat >= HEARTBEAT_S:
            last_heartbeat = now
            writer.write(protocol.Heartbeat(rank.rank, now, step, dropped=0, sent=rank.sent.records).encode())
            rank.sent.heartbeats += 1
        if step % print_every == 0:
            text = f"epoch {step // 100} step {step} loss: {row[2]:.4f}"
            sys.stdout.write(json.dumps({"rank": rank.rank, "t": now, "text": text}) + "\n")
            rank.sent.lines += 1
        await writer.drain()
        step += 1
        next_tick += period
        delay = next_tick - time.monotonic()
        if delay < 0:
            next_tick = time.monotonic()
        await asyncio.sleep(max(0.0, delay))


async def watch_stop_file(path: Path, stop: asyncio.Event) -> None:
    while not path.exists():
        await asyncio.sleep(0.2)
    stop.set()


async def main_async(args: argparse.Namespace) -> None:
    ranks = [await connect(args.socket, args.token, args.run_key, rank, args.world_size)
             for rank in range(args.first, args.first + args.count)]
    stop = asyncio.Event()
    started = time.time()
    watcher = asyncio.create_task(watch_stop_file(args.stop_file, stop))
    flusher = asyncio.create_task(flush_stdout(stop))
    await asyncio.gather(*(train(rank, args.rate, args.print_every, stop) for rank in ranks))
    ended = time.time()
    for rank in ranks:
        rank.writer.write(protocol.Exit(rank.rank, time.time(), 0).encode())
    for rank in ranks:
        await rank.writer.drain()
        rank.writer.close()
    for rank in ranks:
        await rank.writer.wait_closed()
    await watcher
    await flusher
    sys.stdout.flush()
    args.result.write_text(json.dumps({"started": started, "ended": ended,
                                       "ranks": {rank.rank: vars(rank.sent) for rank in ranks}}))


async def flush_stdout(stop: asyncio.Event) -> None:
    """Hand the printed lines over in small batches, as a pipe does."""
    while not stop.is_set():
        sys.stdout.flush()
        await asyncio.sleep(0.05)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("socket")
    parser.add_argument("token")
    parser.add_argument("run_key")
    parser.add_argument("--first", type=int, required=True)
    parser.add_argument("--count", type=int, required=True)
    parser.add_argument("--world-size", type=int, required=True)
    parser.add_argument("--rate", type=float, default=2.0, help="steps per second per rank")
    parser.add_argument("--print-every", type=int, default=5, help="a printed line every this many steps")
    parser.add_argument("--stop-file", type=Path, required=True)
    parser.add_argument("--result", type=Path, required=True)
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
