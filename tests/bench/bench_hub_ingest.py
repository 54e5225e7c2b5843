"""Hub ingest including the store: records/s from 8 fake ranks, stored == sent.

Each fake rank is its own process speaking the real protocol the way the worker's
reporter does (a hello, then `metrics` lines of up to 2,000 items), as fast as it
can. ``--shape items``: one ``[t, step, name, value, source]`` item per record (what
``rankwatch.log`` sends); ``--shape steps``: step rows as the zero-code instrumentation
sends them (one row per step, 4 records; every 16th step is timed: its CPU wait, the
phases' clock, the phases and the compute time make it 14: ``protocol.step_row_records``), counted in the records they make. The hub runs in this process, as in the runner. Time runs from the first
connection to the moment every record is committed to SQLite. Also printed: the CPU
time of the hub's process (event loop and writer thread) per record, which a shared,
loaded machine disturbs much less than the rate.

    .venv/bin/python tests/bench/bench_hub_ingest.py [--ranks 8] [--records 400000] [--shape steps]
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import resource
import socket
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "runner" / "worker_path"))

from rankwatch import protocol
from runner.hub.hub import Hub
from runner.store.store import RunStore

TOKEN = "bench"
BATCH = 2000  # as the reporter's MAX_ITEMS_PER_MESSAGE


def step_rows(records: int) -> list[list]:
    """Step rows making at least ``records`` records, as a DDP rank's reporter sends them."""
    rows, made, now = [], 0, time.time()
    while made < records:
        step = len(rows)
        timed = step % 16 == 0  # a timed step carries its phases on the CPU's clock
        phases = [protocol.CLOCK_CPU, *(2.9e-4 / len(protocol.PHASES) for _ in protocol.PHASES)] if timed else None
        row = [now + step * 3e-4, step, 0.69 + step * 1e-6, 2.9e-4, 1.2e-5, 64, 3e-6 if timed else None, False,
               phases]
        assert len(row) == protocol.STEP_ROW_LENGTH
        rows.append(row)
        made += protocol.step_row_size(row)
    return rows


def fake_rank(socket_path: str, rank: int, records: int, start: multiprocessing.Event, shape: str) -> None:
    client = socket.socket(socket.AF_UNIX)
    client.connect(socket_path)
    start.wait()
    client.sendall(protocol.encode("hello", token=TOKEN, rank=rank, local_rank=rank, node_rank=0, world_size=8,
                                   host="bench", pid=os.getpid()))
    now = time.time()
    sent = 0
    names = ("loss", "step_time", "data_wait", "samples_per_s", "steps_per_s")
    if shape == "steps":
        rows = step_rows(records)
        for first in range(0, len(rows), BATCH):
            client.sendall(protocol.encode_metric_items(rank, rows[first:first + BATCH]))
    while shape == "items" and sent < records:
        count = min(BATCH, records - sent)
        items = [[now, (sent + i) // 5, names[(sent + i) % 5], 0.5 + i, "auto"] for i in range(count)]
        client.sendall(protocol.encode("metrics", rank=rank, items=items))
        sent += count
    client.sendall(protocol.encode("exit", rank=rank, t=time.time(), code=0))
    client.close()


async def run(ranks: int, per_rank: int, folder: Path, shape: str) -> dict:
    hub = Hub(folder / "runs.db", TOKEN)
    await hub.create_run({}, run_key="bench", profile="bench", spec_toml="", command=None, host="h", workdir=None,
                         runner_pid=os.getpid(), socket=None, world_size=ranks, status="running")
    socket_path = folder / "hub.sock"
    await hub.serve_unix(socket_path)
    hub.start()
    start = multiprocessing.Event()
    clients = [multiprocessing.Process(target=fake_rank, args=(str(socket_path), r, per_rank, start, shape))
               for r in range(ranks)]
    for client in clients:
        client.start()
    await asyncio.sleep(0.5)
    began = time.perf_counter()
    cpu_before = resource.getrusage(resource.RUSAGE_SELF)
    start.set()
    total = ranks * (per_rank if shape == "items" else sum(map(protocol.step_row_size, step_rows(per_rank))))
    while hub.stats["records_stored"] < total:
        await asyncio.sleep(0.01)
    elapsed = time.perf_counter() - began
    cpu_after = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (cpu_after.ru_utime - cpu_before.ru_utime) + (cpu_after.ru_stime - cpu_before.ru_stime)
    for client in clients:
        client.join()
    await hub.close()
    with RunStore(folder / "runs.db", readonly=True) as store:
        stored = store.count("metrics", hub.run_id)
    return {"sent": total, "stored": stored, "seconds": elapsed, "rate": total / elapsed,
            "cpu_us": cpu / total * 1e6}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--records", type=int, default=400_000, help="records in all")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--shape", choices=("items", "steps"), default="items",
                        help="logged values, one item per record, or the zero-code instrumentation's step rows")
    args = parser.parse_args()
    rates, cpus = [], []
    for attempt in range(args.repeat):
        with tempfile.TemporaryDirectory(dir="/tmp") as folder:
            result = asyncio.run(run(args.ranks, args.records // args.ranks, Path(folder), args.shape))
        assert result["stored"] == result["sent"], result
        rates.append(result["rate"])
        cpus.append(result["cpu_us"])
        print(f"run {attempt + 1}: {result['sent']:,} records ({args.shape}) from {args.ranks} ranks stored in "
              f"{result['seconds']:.2f} s = {result['rate']:,.0f} records/s (stored == sent: {result['stored']:,}); "
              f"hub CPU {result['cpu_us']:.2f} us/record")
    rates.sort()
    cpus.sort()
    print(f"median {rates[len(rates) // 2]:,.0f} records/s over {args.repeat} runs (target >= 100,000); "
          f"hub CPU {cpus[len(cpus) // 2]:.2f} us/record (both threads of the hub's process)")


if __name__ == "__main__":
    main()
