"""Per-step cost of the zero-code instrumentation, measured where it is visible: tiny steps.

Run on demand (not part of the test suite; about a minute)::

    .venv/bin/python tests/bench/bench_worker_hooks.py [--rounds 5] [--steps 20000] [--ddp]

A 5 ms DDP step on a shared 2-core machine varies by more than the 1% budget
from run to run (see ``bench_worker_overhead.py``), so this benchmark shrinks the
step instead: one process, a tiny model, a DataLoader and SGD, about 0.1-0.2 ms
per step. The same script runs under the bootstrap with ``RANKWATCH_INSTRUMENT=0``
and ``=1`` in turn, connected to a draining hub; the difference of the median
step times is the instrumentation's cost per step (DataLoader wrapper, backward
wrapper, optimizer hook, one queued record, and the reporter thread's share of
the GIL), which is then compared with a 5 ms step.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from bench_worker_log import DRAINING_HUB

WORKER_PATH = Path(__file__).resolve().parents[2] / "runner" / "worker_path"
REFERENCE_STEP_SECONDS = 0.005

TINY_TRAINING = r"""
import statistics, sys, time
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

torch.set_num_threads(1)
torch.manual_seed(0)
warmup, steps = 500, int(sys.argv[1])
model = torch.nn.Linear(16, 1)
if sys.argv[2] == "ddp":  # a process group of one: the comm/compute timing runs too
    import tempfile
    import torch.distributed as dist
    store = tempfile.mktemp(prefix="rwbench-store-")
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=0, world_size=1)
    model = torch.nn.parallel.DistributedDataParallel(model)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
loader = DataLoader(TensorDataset(torch.randn(65536, 16), torch.randn(65536, 1)), batch_size=8)
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
print(statistics.median(durations))
"""


def _run(instrument: str, script: str, steps: int, socket_path: str, ddp: bool) -> float:
    environment = {
        key: value for key, value in os.environ.items() if not key.startswith("RANKWATCH_")
    }
    environment.update(
        OMP_NUM_THREADS="1",
        PYTHONPATH=str(WORKER_PATH),
        RANK="0",
        WORLD_SIZE="1",
        RANKWATCH_SOCKET=socket_path,
        RANKWATCH_TOKEN="bench",
        RANKWATCH_INSTRUMENT=instrument,
    )
    completed = subprocess.run(
        [sys.executable, "-m", "rankwatch._bootstrap", script, str(steps), "ddp" if ddp else "plain"],
        env=environment,
        capture_output=True,
        text=True,
        timeout=600,
    )
    if completed.returncode != 0:
        raise RuntimeError(completed.stderr[-3000:])
    return float(completed.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=20000)
    parser.add_argument("--ddp", action="store_true",
                        help="wrap the model in DDP over a gloo group of one, so that the per-backward "
                             "comm/compute timing runs as in a real DDP job")
    options = parser.parse_args()

    folder = tempfile.mkdtemp(prefix="rwbench-", dir="/tmp")
    script = os.path.join(folder, "tiny_train.py")
    Path(script).write_text(TINY_TRAINING)
    socket_path = os.path.join(folder, "hub.sock")
    hub = subprocess.Popen(
        [sys.executable, "-c", DRAINING_HUB, socket_path], stdout=subprocess.PIPE, text=True
    )
    assert hub.stdout is not None and hub.stdout.readline().strip() == "ready"
    medians: dict[str, list[float]] = {"0": [], "1": []}
    try:
        for round_number in range(options.rounds):
            for instrument in ("0", "1"):
                seconds = _run(instrument, script, options.steps, socket_path, options.ddp)
                medians[instrument].append(seconds)
                print(
                    f"round {round_number + 1} instrument={instrument} {seconds * 1e6:.1f} us",
                    flush=True,
                )
    finally:
        hub.kill()
        hub.wait()

    off = statistics.median(medians["0"])
    on = statistics.median(medians["1"])
    cost = on - off
    print()
    model = "DDP (gloo, world size 1)" if options.ddp else "no process group"
    print(f"{options.rounds} rounds x {options.steps} steps, 1 process, {model}, {os.cpu_count()} cores")
    print("| instrument | median step us | runs (us) |")
    print("|---|---|---|")
    for instrument, value in (("0", off), ("1", on)):
        runs = ", ".join(f"{run * 1e6:.1f}" for run in medians[instrument])
        print(f"| {instrument} | {value * 1e6:.1f} | {runs} |")
    print(
        f"instrumentation cost per step: {cost * 1e6:.1f} us"
        f" = {cost / REFERENCE_STEP_SECONDS * 100:.2f}% of a 5 ms step"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
