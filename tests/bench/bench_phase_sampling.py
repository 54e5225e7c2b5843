"""The step phases timed on every step vs sampled (``_phases.split_every``), A/B in one process.

Run on demand (not part of the test suite; about 3 minutes)::

    .venv/bin/python tests/bench/bench_phase_sampling.py [--rounds 100] [--steps 200]

Whole runs of a job differ by 5-10 % on a shared 2-core machine, so the two are
compared inside one process instead: a tiny model under DDP over a gloo group of
one (so the phases' marks, the end-of-backward one included, run as in a DDP job, ~0.6 ms steps, which
``split_every`` times every 16th step), the real instrumentation installed and
removed in short alternating blocks: ``off`` (nothing installed), ``every``
(every step timed, as before) and ``sampled`` (as shipped). Per round the
difference of each to ``off`` in the same round; the medians of those
differences are the cost per step, and every round's raw numbers are printed.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "runner" / "worker_path"))

import torch
import torch.distributed as dist
from torch.nn import functional

from rankwatch import _instrument, _phases
from rankwatch._buffer import RecordBuffer

VARIANTS = ("off", "every", "sampled")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--steps", type=int, default=200)
    options = parser.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{tempfile.mktemp(prefix='rwbench-')}", rank=0,
                            world_size=1)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(16, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    inputs, targets = torch.randn(4096, 8, 16), torch.randn(4096, 8, 1)
    sampled = _phases.split_every
    buffer = RecordBuffer(10**7)

    def block(variant: str, steps: int) -> float:
        clock = None
        if variant != "off":
            _phases.split_every = sampled if variant == "sampled" else (lambda step_time: 1)
            clock = _instrument.install(torch, buffer, None)
            clock.optimizer_made = True  # the bootstrap installs before the script makes its optimizer
        started = time.perf_counter()
        for index in range(steps):
            loss = functional.mse_loss(model(inputs[index]), targets[index])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
        elapsed = (time.perf_counter() - started) / steps * 1e6
        if clock is not None:
            clock.uninstall()
            _phases.split_every = sampled
            buffer.drain()
        return elapsed

    for variant in VARIANTS:
        block(variant, 300)  # warm up
    results: dict[str, list[float]] = {variant: [] for variant in VARIANTS}
    for round_number in range(options.rounds):
        shift = round_number % len(VARIANTS)
        for variant in VARIANTS[shift:] + VARIANTS[:shift]:
            results[variant].append(block(variant, options.steps))
    print(f"{options.rounds} rounds x {options.steps} steps, in one process, DDP over gloo (world size 1)")
    print("| variant | median us/step | median of per-round differences to off |")
    print("|---|---|---|")
    for variant in VARIANTS:
        difference = statistics.median(a - b for a, b in zip(results[variant], results["off"], strict=True))
        print(f"| {variant} | {statistics.median(results[variant]):.1f} | {difference:+.1f} |")
    paired = [a - b for a, b in zip(results["sampled"], results["every"], strict=True)]
    print(f"sampled - every, per round: median {statistics.median(paired):+.1f} us, quartiles "
          f"{[round(q, 1) for q in statistics.quantiles(paired, n=4)]}, sampled faster in "
          f"{sum(value < 0 for value in paired)} of {len(paired)} rounds")
    for variant in VARIANTS:
        print(f"raw {variant}: {', '.join(f'{value:.1f}' for value in results[variant])}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
