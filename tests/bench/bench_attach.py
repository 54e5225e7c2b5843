"""Attaching to a big run: first screen and whole history, `rankwatch attach` against the real hub.

A run store holds one run with ``--metrics`` metric records (8 ranks) and ``--logs``
log lines; the real hub serves it (in this process, as in the runner) and the real
``rankwatch attach --plain`` (a subprocess) subscribes with history. Measured:
the time from starting ``attach`` to its first log line on stdout (the first
screen), to its last history log line, to the end of the whole replay (the metrics
follow the logs), the CLI's peak memory and the hub's growth.

    .venv/bin/python tests/bench/bench_attach.py [--metrics 1000000 --logs 200000 --repeat 3]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "runner" / "worker_path"))

from rankwatch.protocol import LogLine, MetricRecord  # noqa: E402
from runner.hub.hub import Hub  # noqa: E402
from runner.store.store import RecordBatch, RunStore  # noqa: E402


def fill(store: RunStore, run_id: int, metrics: int, logs: int) -> None:
    t0 = 1_700_000_000.0
    names = ("loss", "step_time", "data_wait", "samples_per_s", "steps_per_s")
    for start in range(0, metrics, 100_000):
        store.write_batch(run_id, RecordBatch(metrics=[
            MetricRecord(index % 8, t0 + index / 1000, index // 40, names[index // 8 % 5], float(index), "auto")
            for index in range(start, min(metrics, start + 100_000))]))
    for start in range(0, logs, 100_000):
        store.write_batch(run_id, RecordBatch(logs=[
            LogLine(index % 8, t0 + index / 100, "stdout", f"epoch 3 step {index} loss: 0.{index % 9973:04d}", "h")
            for index in range(start, min(logs, start + 100_000))]))


async def attach_once(home: Path, metrics: int, logs: int) -> dict:
    store_path = home / "data" / "runs.db"
    store_path.parent.mkdir(parents=True, exist_ok=True)
    hub = Hub(store_path, "bench")
    await hub.create_run({}, run_key=f"bench-{time.time()}", profile="bench", spec_toml="", command=None, host="h",
                         workdir=None, runner_pid=os.getpid(), socket=None, world_size=8, status="running")
    socket_path = Path(tempfile.mkdtemp(prefix="rw-", dir="/tmp")) / "hub.sock"
    await hub.serve_unix(socket_path)
    hub.start()
    await hub.writer.call(fill, hub.run_id, metrics, logs)
    await hub.update_run(socket=str(socket_path))
    hub_before = psutil.Process().memory_info().rss
    env = dict(os.environ, RANKWATCH_HOME=str(home))
    started = time.monotonic()
    cli = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "runner", "attach", str(hub.run_id), "--plain", "--status-every", "0",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL, env=env, limit=1 << 20)
    tracked = psutil.Process(cli.pid)
    first = None
    lines = 0
    peak = 0
    while lines < logs:
        line = await cli.stdout.readline()
        if not line:
            break
        if line.startswith(b"[rank "):
            lines += 1
            if first is None:
                first = time.monotonic() - started
            if lines % 10_000 == 0:
                peak = max(peak, tracked.memory_info().rss)
    whole = time.monotonic() - started
    while not all(subscriber.live for subscriber in hub.publisher.subscribers):  # metrics follow the logs
        await asyncio.sleep(0.05)
        peak = max(peak, tracked.memory_info().rss)
    replayed = time.monotonic() - started
    hub_growth = psutil.Process().memory_info().rss - hub_before
    await hub.close(reason="succeeded")
    await cli.wait()
    return {"first": first, "whole": whole, "replayed": replayed, "lines": lines, "cli_peak": peak,
            "hub_growth": hub_growth}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--metrics", type=int, default=1_000_000)
    parser.add_argument("--logs", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    results = []
    for attempt in range(args.repeat):
        with tempfile.TemporaryDirectory(dir="/tmp") as folder:
            result = asyncio.run(attach_once(Path(folder), args.metrics, args.logs))
        results.append(result)
        print(f"run {attempt + 1}: first log line after {result['first']:.2f} s, all {result['lines']:,} history "
              f"lines after {result['whole']:.1f} s, the whole history (metrics too) after {result['replayed']:.1f} s; "
              f"attach peak RSS {result['cli_peak'] >> 20} MB, hub +{result['hub_growth'] >> 20} MB")
    print(f"median first screen {statistics.median(r['first'] for r in results):.2f} s, log history "
          f"{statistics.median(r['whole'] for r in results):.1f} s, whole history "
          f"{statistics.median(r['replayed'] for r in results):.1f} s ({args.metrics:,} metrics, {args.logs:,} lines)")


if __name__ == "__main__":
    main()
