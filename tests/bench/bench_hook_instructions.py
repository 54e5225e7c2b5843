"""Instructions the zero-code instrumentation adds to a training step, counted, not timed.

Run on demand (not part of the test suite; about 4 minutes per variant, two at a time)::

    apt-get install -y valgrind
    .venv/bin/python tests/bench/bench_hook_instructions.py
    .venv/bin/python tests/bench/bench_hook_instructions.py --worker-path /tmp/rw-before/runner/worker_path

Why counted: on a shared 2-core machine a step's wall time varies by more than the whole
instrumentation costs (in-process A/B blocks of the same variant differ by +-10 us on a 0.5 ms
step), so medians of timings cannot name a part of a few microseconds. ``valgrind --tool=callgrind``
counts the instructions a process executes, the same count every run whatever the rest of the
machine does. What it does not count: time in the kernel (a ``pread`` of /proc is ~1.6 us of
system time) and cache misses; the timed benchmarks (``bench_comm_split.py``,
``bench_job_overhead.py``) stay the measure of time.

What runs, per variant, in its own process under callgrind: one of ``bench_job_overhead.py``'s
models (``--model ddp``, the MLP under DDP with a DataLoader, ~3 ms steps natively; ``gpt``, the
small transformer with 4 micro-batches of gradient accumulation, ~30 ms), or ``tiny`` (a linear
layer under DDP, no DataLoader, ~0.5 ms steps: the hooks at their most visible), each in a gloo
group of one (so the comm/compute split runs as in a DDP job). The instrumentation is installed
*before* the script makes its model and optimizer, as the bootstrap does it. After ``--warmup``
steps the counters are zeroed (callgrind's ``--zero-before`` on a call of ``getppid``),
``--steps`` steps run, and the counts are dumped (``--dump-before`` on ``getgid``). Records are
drained from the buffer every 50 records (no reporter: its work is ``bench_reporter_work.py``'s).
Variants:

* ``off``: nothing installed (the bare step);
* ``never``: no step timed (the hooks alone);
* ``sampled``: every Nth step timed, N as the instrumentation picks it for the model's native
  step time (``split_every``: 16 for tiny, 4 for ddp, 1 for gpt; under callgrind every step is
  slower than 10 ms, so the factor is fixed for every variant);
* ``every``: every step timed (the comm/compute split and the CPU wait each step), as for
  steps of 10 ms or more.

Counted: the main (training) thread's instructions only (``--separate-threads=yes``). gloo's
own threads wait for work in ways whose instruction counts depend on the scheduling, by
thousands per step from run to run; the training thread's count repeats.

Printed: instructions per step of each variant and their difference to ``off``; with them the
cost of a timed step is ``every - never`` and of the hooks ``never - off``.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
WORKER_PATH = Path(__file__).resolve().parents[2] / "runner" / "worker_path"
VARIANTS = ("off", "never", "sampled", "every")
SAMPLED_EVERY = {"tiny": 16, "ddp": 4, "gpt": 1}
"""``split_every`` of each model's native step time (0.5, 3 and 30 ms on this machine)."""

PRELUDE = r"""
import json, os, sys, tempfile, time
sys.path.insert(0, os.environ["RW_BENCH_WORKER_PATH"])
import torch
import torch.distributed as dist
from rankwatch import _instrument
try:
    from rankwatch import _phases as _sampling  # the step phases
except ImportError:
    from rankwatch import _comm_timing as _sampling  # checkouts before them
from rankwatch._buffer import RecordBuffer

variant, warmup = os.environ["RW_BENCH_VARIANT"], int(os.environ["RW_BENCH_WARMUP"])
buffer = RecordBuffer(10**7)
if variant != "off":  # before the script makes its model and optimizer, as the bootstrap does
    # the step times under callgrind are ~50 times the native ones: the split's sampling is fixed here
    every = {"every": 1, "sampled": int(os.environ["RW_BENCH_SAMPLED_EVERY"]), "never": 1 << 62}[variant]
    for module in (_sampling, _instrument):  # checkouts before issue 17's step rows decided in _instrument
        if hasattr(module, "split_every"):
            module.split_every = lambda step_time: every
    clock = _instrument.install(torch, buffer, None)
    timer = getattr(clock, "phases", None) or clock.comm
    timer.timing = variant == "every"  # step 0 is timed by every variant: left out of the count here


def timed_steps(run_step, steps, result_path):
    for index in range(steps):
        if index == warmup:
            os.getppid()  # callgrind zeroes its counters here
        run_step()
        if len(buffer) > 50:
            buffer.drain()
    os.getgid()  # and dumps them here
"""

TINY_SCRIPT = r"""
import torch.distributed as dist
from torch.nn import functional

torch.set_num_threads(1)
dist.init_process_group("gloo")
torch.manual_seed(0)
steps = int(sys.argv[1])
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(16, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
inputs, targets = torch.randn(steps, 8, 16), torch.randn(steps, 8, 1)
index = 0

def step():
    global index
    loss = functional.mse_loss(model(inputs[index]), targets[index])
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    index += 1

timed_steps(step, steps, None)
dist.destroy_process_group()
"""
"""A linear layer under DDP, no DataLoader: ~0.5 ms steps, the hooks' cost at its most visible."""


def _script(model: str) -> tuple[str, list[str]]:
    """The training script of ``model`` under the counting prelude, and its arguments after the step count."""
    if model == "tiny":
        return PRELUDE + TINY_SCRIPT, []
    import bench_job_overhead as job  # the whole-job benchmark's models, the same code

    if model == "ddp":
        return PRELUDE + job.DDP_SCRIPT[len(job.TIMING):], ["-", "512"]
    return PRELUDE + job.GPT_SCRIPT[len(job.TIMING):], ["-", "64", "2", "4", "32"]


def _instructions(variant: str, attempt: int, options: argparse.Namespace, folder: str) -> int:
    """Instructions the main thread executed in the measured steps of one variant (callgrind's ``summary``)."""
    script, arguments = _script(options.model)
    path = os.path.join(folder, f"{options.model}.py")
    Path(path).write_text(script)
    output = os.path.join(folder, f"callgrind.{variant}-{attempt}")
    environment = {key: value for key, value in os.environ.items() if not key.startswith("RANKWATCH_")}
    environment.update(OMP_NUM_THREADS="1", PYTHONHASHSEED="0", RW_BENCH_VARIANT=variant,
                       RW_BENCH_WARMUP=str(options.warmup), RW_BENCH_WORKER_PATH=str(options.worker_path),
                       RW_BENCH_SAMPLED_EVERY=str(SAMPLED_EVERY[options.model]),
                       RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1",
                       MASTER_PORT=str(_free_port()))
    completed = subprocess.run(
        [*_without_address_randomisation(), "valgrind", "--tool=callgrind", "--separate-threads=yes", "--zero-before=getppid", "--dump-before=getgid",
         f"--callgrind-out-file={output}.%p", sys.executable, path, str(options.warmup + options.steps), *arguments],
        capture_output=True, text=True, timeout=7200, env=environment, cwd=folder)
    if completed.returncode != 0:
        raise RuntimeError(f"{variant}: {completed.stderr[-3000:]}")
    # the dump made at getgid, of thread 1 (the main thread): callgrind.<variant>.<pid>.1-01
    dumps = [name for name in os.listdir(folder)
             if name.startswith(f"callgrind.{variant}-{attempt}.") and name.endswith(".1-01")]
    if len(dumps) != 1:
        raise RuntimeError(f"{variant}: expected one dump of the main thread at getgid, found {dumps}")
    for line in Path(folder, dumps[0]).read_text().splitlines():
        if line.startswith("summary:"):
            return int(line.split()[1])
    raise RuntimeError(f"{variant}: no summary in {dumps[0]}")


def _without_address_randomisation() -> list[str]:
    """``setarch -R`` where it exists: the same addresses every run, so hashes of objects by address
    (sets and dictionaries of objects) probe alike and the count repeats."""
    setarch = shutil.which("setarch")
    return [setarch, os.uname().machine, "-R"] if setarch else []


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=("tiny", "ddp", "gpt"), default="ddp",
                        help="tiny: a linear layer; ddp and gpt: bench_job_overhead.py's models")
    parser.add_argument("--steps", type=int, default=160, help="measured steps (a multiple of 16)")
    parser.add_argument("--warmup", type=int, default=40)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--worker-path", type=Path, default=WORKER_PATH,
                        help="the rankwatch package's folder to measure (another checkout's, for before/after)")
    parser.add_argument("--jobs", type=int, default=2, help="variants counted at once")
    parser.add_argument("--repeat", type=int, default=1, help="count each variant this many times (the spread)")
    options = parser.parse_args()
    if shutil.which("valgrind") is None:
        print("valgrind is not installed: apt-get install -y valgrind", file=sys.stderr)
        return 2
    variants = [variant for variant in options.variants.split(",") if variant]
    unknown = set(variants) - set(VARIANTS)
    if unknown or "off" not in variants:
        print(f"--variants: choose from {', '.join(VARIANTS)}, 'off' included", file=sys.stderr)
        return 2
    folder = tempfile.mkdtemp(prefix="rwbench-callgrind-")
    runs = [(variant, attempt) for attempt in range(options.repeat) for variant in variants]
    with concurrent.futures.ThreadPoolExecutor(options.jobs) as pool:
        counted = list(pool.map(lambda run: _instructions(run[0], run[1], options, folder), runs))
    counts: dict[str, list[float]] = {variant: [] for variant in variants}
    for (variant, _attempt), count in zip(runs, counted, strict=True):
        counts[variant].append(count / options.steps)
    per_step = {variant: statistics.median(values) for variant, values in counts.items()}
    print(f"model {options.model}: {options.steps} steps after {options.warmup} warm-up steps, DDP over gloo "
          f"(world size 1), main thread, sampled = every {SAMPLED_EVERY[options.model]}th step timed; "
          f"rankwatch from {options.worker_path}")
    print("| variant | instructions per step (median) | added to off | added, share of off | each run |")
    print("|---|---|---|---|---|")
    for variant in variants:
        added = per_step[variant] - per_step["off"]
        print(f"| {variant} | {per_step[variant]:,.0f} | {added:+,.0f} | {added / per_step['off']:+.2%} | "
              + ", ".join(f"{value:,.0f}" for value in counts[variant]) + " |")
    if {"every", "never"} <= set(per_step):
        print(f"a timed step costs {per_step['every'] - per_step['never']:,.0f} instructions more than an untimed one")
    shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
