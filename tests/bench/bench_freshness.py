"""Freshness: from `rankwatch.log()` in a worker to a subscriber holding the value.

A real worker process (the bootstrap running a small script that calls
`rankwatch.log` 100 times a second), the real hub with its store, and a subscriber
in a third process on the hub's socket, as the GUI is. Latency per record is the
subscriber's receive time minus the record's own timestamp (taken inside `log()`);
all on one machine, one clock.

    .venv/bin/python tests/bench/bench_freshness.py [--seconds 10]
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "runner" / "worker_path"))

from rankwatch import protocol  # noqa: E402
from runner.hub.hub import Hub  # noqa: E402

TOKEN = "fresh"
WORKER = """
import sys, time
import rankwatch
end = time.time() + float(sys.argv[1])
step = 0
while time.time() < end:
    rankwatch.log(step=step, probe=float(step))
    step += 1
    time.sleep(0.01)
"""


def subscriber(socket_path: str, seconds: float, results: multiprocessing.Queue) -> None:
    client = socket.socket(socket.AF_UNIX)
    client.connect(socket_path)
    client.sendall(protocol.encode("subscribe", history=False))
    reader = client.makefile("rb")
    latencies = []
    while True:  # until the hub says bye (or hangs up)
        line = reader.readline()
        if not line:
            break
        received = time.time()
        message = protocol.decode(line)
        for _rank, t, _step, name, _value, _source in message.get("metrics") or []:
            if name == "probe":
                latencies.append(received - t)
        if message["type"] == "bye":
            break
    results.put(latencies)


async def run(seconds: float, folder: Path) -> list[float]:
    hub = Hub(folder / "runs.db", TOKEN)
    await hub.create_run({}, run_key="fresh", profile="bench", spec_toml="", command=None, host="h", workdir=None,
                         runner_pid=os.getpid(), socket=None, world_size=1, status="running")
    socket_path = folder / "hub.sock"
    await hub.serve_unix(socket_path)
    hub.start()
    results = multiprocessing.Queue()
    watcher = multiprocessing.Process(target=subscriber, args=(str(socket_path), seconds, results))
    watcher.start()
    await asyncio.sleep(0.5)
    script = folder / "worker.py"
    script.write_text(WORKER)
    env = dict(os.environ, PYTHONPATH=str(REPO / "runner" / "worker_path"), RANKWATCH_SOCKET=str(socket_path),
               RANKWATCH_TOKEN=TOKEN, RANKWATCH_RUN_KEY="fresh", RANKWATCH_RUN="1", RANKWATCH_INSTRUMENT="0",
               RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", LOCAL_WORLD_SIZE="1", GROUP_RANK="0")
    worker = await asyncio.create_subprocess_exec(sys.executable, "-m", "rankwatch._bootstrap", str(script),
                                                  str(seconds), env=env)
    await worker.wait()
    await asyncio.sleep(0.5)
    await hub.close()
    latencies = results.get(timeout=30)
    watcher.join()
    return latencies


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir="/tmp") as folder:
        latencies = asyncio.run(run(args.seconds, Path(folder)))
    latencies.sort()
    p50 = statistics.median(latencies)
    p95 = latencies[int(0.95 * (len(latencies) - 1))]
    print(f"{len(latencies)} records: log() -> subscriber latency p50 {p50 * 1000:.1f} ms, "
          f"p95 {p95 * 1000:.1f} ms, max {latencies[-1] * 1000:.1f} ms (target p95 <= 100 ms)")


if __name__ == "__main__":
    main()
