"""Zero-code instrumentation overhead on a 2-rank CPU DDP job (gloo) with ~5 ms steps.

Run on demand (not part of the test suite; about 2-3 minutes)::

    .venv/bin/python tests/bench/bench_worker_overhead.py [--rounds 4] [--steps 600]

Each round runs the same training script three ways, in turn, so slow drifts of
a shared machine hit every variant alike:

* ``plain``: ``torchrun script.py`` (no Rankwatch at all);
* ``bootstrap, instrument=0``: ``torchrun -m rankwatch._bootstrap script.py``
  with a hub connected (hello, heartbeats, exit) but no instrumentation;
* ``bootstrap, instrument=1``: the same with the zero-code instrumentation
  (loss, step time, data wait, throughput from torch hooks, sent in batches at most 40 ms late).

The script times every step on rank 0 and 1 itself (after a warm-up) and prints
the median; a variant's result is the median over its runs of the two ranks'
mean median. Target: instrument=1 at most 1% slower than instrument=0.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from bench_worker_log import DRAINING_HUB

WORKER_PATH = Path(__file__).resolve().parents[2] / "runner" / "worker_path"

TRAINING_SCRIPT = r"""
import json, os, sys, time, statistics
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

torch.set_num_threads(1)
dist.init_process_group("gloo")
torch.manual_seed(0)
warmup, steps = 50, int(sys.argv[1])
model = torch.nn.Sequential(
    torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 256), torch.nn.ReLU(),
    torch.nn.Linear(256, 1),
)
model = torch.nn.parallel.DistributedDataParallel(model)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
data = TensorDataset(torch.randn(4096, 256), torch.randn(4096, 1))
loader = DataLoader(data, batch_size=64, shuffle=True, drop_last=True)
durations = []
done = 0
last = time.perf_counter()
while done < warmup + steps:
    for x, y in loader:
        loss = F.mse_loss(model(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        now = time.perf_counter()
        if done >= warmup:
            durations.append(now - last)
        last = now
        done += 1
        if done == warmup + steps:
            break
with open(f"{sys.argv[2]}.{dist.get_rank()}", "w") as result:
    json.dump({"rank": dist.get_rank(), "median": statistics.median(durations)}, result)
dist.destroy_process_group()
"""

VARIANTS = ("plain", "bootstrap, instrument=0", "bootstrap, instrument=1")
UPSTREAM_SHUTDOWN_ABORT = "terminate called without an active exception"
"""About 1 run in 50 here, one rank aborts in gloo's teardown after its last step, with
or without Rankwatch (seen with ``plain`` too); such a run is repeated once."""


def _run(variant: str, script: str, steps: int, socket_path: str, port: int) -> float:
    """Mean over both ranks of the median step time (seconds) of one torchrun run."""
    environment = {
        key: value for key, value in os.environ.items() if not key.startswith("RANKWATCH_")
    }
    environment.update(OMP_NUM_THREADS="1", PYTHONPATH=str(WORKER_PATH))
    command = [
        sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc-per-node", "2",
        "--master-addr", "127.0.0.1", "--master-port", str(port),
    ]  # fmt: skip
    result_prefix = os.path.join(os.path.dirname(script), f"result-{port}")
    if variant == "plain":
        command += [script, str(steps), result_prefix]
    else:
        environment.update(
            RANKWATCH_SOCKET=socket_path,
            RANKWATCH_TOKEN="bench",
            RANKWATCH_RUN_KEY="bench",
            RANKWATCH_INSTRUMENT="1" if variant.endswith("1") else "0",
        )
        command += ["-m", "rankwatch._bootstrap", script, str(steps), result_prefix]
    completed = subprocess.run(
        command, env=environment, capture_output=True, text=True, timeout=600
    )
    if completed.returncode != 0:
        raise RuntimeError(f"{variant} failed:\n{completed.stderr}")
    results = [json.loads(Path(f"{result_prefix}.{rank}").read_text()) for rank in (0, 1)]
    return statistics.mean(result["median"] for result in results)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--steps", type=int, default=600)
    options = parser.parse_args()

    folder = tempfile.mkdtemp(prefix="rwbench-", dir="/tmp")
    script = os.path.join(folder, "ddp_train.py")
    Path(script).write_text(TRAINING_SCRIPT)
    socket_path = os.path.join(folder, "hub.sock")
    hub = subprocess.Popen(
        [sys.executable, "-c", DRAINING_HUB, socket_path], stdout=subprocess.PIPE, text=True
    )
    assert hub.stdout is not None and hub.stdout.readline().strip() == "ready"
    medians: dict[str, list[float]] = {variant: [] for variant in VARIANTS}
    try:
        for round_number in range(options.rounds):
            for index, variant in enumerate(VARIANTS):
                port = 29700 + round_number * len(VARIANTS) + index
                try:
                    seconds = _run(variant, script, options.steps, socket_path, port)
                except RuntimeError as exc:  # see UPSTREAM_SHUTDOWN_ABORT
                    if UPSTREAM_SHUTDOWN_ABORT not in str(exc):
                        raise
                    print(f"round {round_number + 1} {variant}: gloo aborted at exit, again")
                    seconds = _run(variant, script, options.steps, socket_path, port + 1000)
                medians[variant].append(seconds)
                print(f"round {round_number + 1} {variant:<24} {seconds * 1000:.3f} ms", flush=True)
    finally:
        hub.kill()
        hub.wait()

    result = {variant: statistics.median(values) for variant, values in medians.items()}
    baseline = result["bootstrap, instrument=0"]
    print()
    print(f"{options.rounds} rounds x {options.steps} steps, 2 ranks, gloo, {os.cpu_count()} cores")
    print("| variant | median step ms | runs (ms) | vs instrument=0 |")
    print("|---|---|---|---|")
    for variant in VARIANTS:
        runs = ", ".join(f"{value * 1000:.2f}" for value in medians[variant])
        ratio = result[variant] / baseline
        print(
            f"| {variant} | {result[variant] * 1000:.3f} | {runs} | {ratio:.4f} ({(ratio - 1) * 100:+.2f}%) |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
