"""What the zero-code instrumentation costs a GPU step: an A/B within one process, on a lent GPU.

Whole runs of the same variant on the lent H200 differ by 15-25 % from one another
(``bench_job_overhead.py --models gpu``: 17.2-24.4 ms for one command), so run-against-run
rounds cannot resolve the 1 % target in the minutes a lease gives. Here one process trains
``bench_job_overhead.py``'s GPU model (a 6-layer, 768-wide causal transformer, bf16, DDP over a
one-rank NCCL group, fused AdamW, a DataLoader with 4 workers and pinned memory: launch-bound,
the host's Python is the bottleneck, so every microsecond added to the training thread shows)
and switches the real instrumentation (``rankwatch._instrument.install`` / ``uninstall``, as the
bootstrap installs it) on and off every ``--block`` steps, alternating which comes first. Each
block's first ``--skip`` steps are left out; a block's mean step time is paired with its
neighbour of the other mode. The median of the paired ratios is the figure, quiet and with every
core busy (``--busy``: one Python busy loop per core, at normal priority).

What it leaves out unless asked: the reporter thread (``--modes ...,reporter``: the real one, its
reads of the events off the training thread and its sends, to a socket that swallows them) and the
runner; ``bench_job_overhead.py`` has those. On the third lease the instrumentation alone cost
nothing measurable here (busy 0.977, quiet 1.020 over 16 cycles) while whole runs were 8-12 %
slower: the ``reporter`` mode tells whether the reporter's CUDA calls from a second thread are
the difference.

Run: ``PYTHONPATH=.:runner/worker_path python3 tests/bench/gpu_instrument_ab.py [--busy] [--json OUT]``.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset

from rankwatch import _instrument, _loss, _phases, protocol
from rankwatch._buffer import RecordBuffer
from rankwatch._reporter import Reporter

VOCAB, WIDTH, LAYERS, CONTEXT, BATCH = 8192, 768, 6, 256, 16


class Tokens(Dataset):
    def __len__(self):
        return 1 << 30

    def __getitem__(self, index):
        tokens = torch.randint(0, VOCAB, (CONTEXT + 1,))
        return tokens[:-1], tokens[1:]


class GPT(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(VOCAB, WIDTH)
        self.position = torch.nn.Parameter(torch.zeros(CONTEXT, WIDTH))
        block = torch.nn.TransformerEncoderLayer(WIDTH, 8, 4 * WIDTH, dropout=0.0, batch_first=True, norm_first=True)
        self.blocks = torch.nn.TransformerEncoder(block, LAYERS, enable_nested_tensor=False)
        self.head = torch.nn.Linear(WIDTH, VOCAB)
        self.register_buffer("mask", torch.nn.Transformer.generate_square_subsequent_mask(CONTEXT))

    def forward(self, tokens):
        hidden = self.blocks(self.embed(tokens) + self.position, mask=self.mask, is_causal=True)
        return self.head(hidden)


def block_of_steps(model, optimizer, loader, steps: int, device: str) -> list[float]:
    """``steps`` training steps; the CPU duration of each (nothing here synchronises)."""
    stream = iter(loader)
    durations = []
    last = time.perf_counter()
    for _ in range(steps):
        inputs, targets = next(stream)
        inputs, targets = inputs.to(device, non_blocking=True), targets.to(device, non_blocking=True)
        with torch.autocast(device, dtype=torch.bfloat16):
            loss = torch.nn.functional.cross_entropy(model(inputs).float().reshape(-1, VOCAB), targets.reshape(-1))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        now = time.perf_counter()
        durations.append(now - last)
        last = now
    return durations


def _never_split(step_time):
    return 1 << 30


MODES = ("off", "full", "nophases", "nocomm", "noloss", "reporter")
"""``off``: nothing installed; ``full``: the instrumentation as a job gets it; ``nophases``: installed,
but no step is timed (``split_every`` never due: loss, step time, data wait only); ``nocomm``: steps
timed, but without the autograd engine's callbacks that split ``comm`` from ``backward`` (Python on
the engine's device thread); ``noloss``: everything but the loss's copy to pinned host memory
(an event and a non-blocking copy each backward); ``reporter``: ``full`` with the real reporter
thread, as a job has it: it polls the events (``query``, ``elapsed_time``: CUDA calls from a second
thread), encodes the records and sends them to a local socket that reads and drops them."""


class Sink:
    """A hub that reads everything and answers nothing: where the ``reporter`` mode's lines go."""

    def __init__(self):
        self.folder = tempfile.mkdtemp(prefix="rankwatch-ab-")
        self.address = os.path.join(self.folder, "hub.sock")
        self.received = 0
        self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._server.bind(self.address)
        self._server.listen(8)
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            connection, _ = self._server.accept()
            threading.Thread(target=self._drain, args=(connection,), daemon=True).start()

    def _drain(self, connection):
        with connection:
            while chunk := connection.recv(1 << 16):
                self.received += len(chunk)


SINK: Sink | None = None


def _install(mode: str):
    buffer = RecordBuffer()
    reporter = None
    if mode == "reporter":
        global SINK
        SINK = SINK or Sink()
        reporter = Reporter(SINK.address, protocol.Hello(0, pid=os.getpid(), world_size=1), buffer, 0)
    clock = _instrument.install(torch, buffer, reporter=reporter)
    clock.optimizer_made = True  # the bootstrap installs before the optimizer is made
    if mode == "nophases":
        _phases.split_every = _never_split
    elif mode == "nocomm":
        clock.phases._is_initialized = lambda: False
    elif mode == "noloss":
        _loss.copy_to_host = _no_copy
    if reporter is not None:
        reporter.start()
    return buffer, clock, reporter


def _no_copy(tensor):
    return None  # never read: these blocks have no reporter


def measure(model, optimizer, loader, cycles: int, block: int, skip: int, label: str, modes: list[str],
            device: str) -> dict:
    means: dict[str, list[float]] = {mode: [] for mode in modes}
    split_every, copy_to_host = _phases.split_every, _loss.copy_to_host
    for cycle in range(cycles):
        order = modes[cycle % len(modes):] + modes[:cycle % len(modes)]
        for mode in order:
            installed = None if mode == "off" else _install(mode)
            try:
                durations = block_of_steps(model, optimizer, loader, block, device)
            finally:
                if installed is not None:
                    if device == "cuda":
                        torch.cuda.synchronize()
                    buffer, clock, reporter = installed
                    if reporter is not None:
                        reporter.close(5.0)
                    buffer.drain()
                    clock.uninstall()
                _phases.split_every = split_every
                _loss.copy_to_host = copy_to_host
            means[mode].append(statistics.fmean(durations[skip:]))
        print(f"  {label} cycle {cycle + 1} ({', '.join(order)}): "
              + ", ".join(f"{mode} {means[mode][-1] * 1e3:.3f} ms" for mode in modes), flush=True)
    result = {"modes": {}}
    for mode in modes:
        ratios = [value / off for value, off in zip(means[mode], means["off"], strict=True)]
        result["modes"][mode] = {"ms": [m * 1e3 for m in means[mode]], "ratios": ratios,
                                 "median_ms": statistics.median(means[mode]) * 1e3,
                                 "median_ratio": statistics.median(ratios)}
        if mode != "off":
            print(f"{label} {mode}: median step {statistics.median(means[mode]) * 1e3:.3f} ms against off "
                  f"{statistics.median(means['off']) * 1e3:.3f} ms; median of paired ratios "
                  f"{statistics.median(ratios):.4f} (per cycle: " + ", ".join(f"{r:.4f}" for r in ratios) + ")",
                  flush=True)
    return result


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cycles", type=int, default=10)
    parser.add_argument("--block", type=int, default=80, help="steps per block")
    parser.add_argument("--skip", type=int, default=20, help="steps left out at each block's start")
    parser.add_argument("--busy", action="store_true", help="also measure with every core busy")
    parser.add_argument("--modes", default="off,full", help=f"comma-separated, off first; of {', '.join(MODES)}")
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"),
                        help="cpu: a dry run of this file with a small model over gloo")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    modes = [mode.strip() for mode in args.modes.split(",") if mode.strip()]
    if modes[:1] != ["off"] or not set(modes) <= set(MODES):
        parser.error(f"--modes: off first, then any of {', '.join(MODES[1:])} (got {args.modes})")
    global VOCAB, WIDTH, LAYERS, CONTEXT, BATCH
    device = args.device
    if device == "cpu":
        VOCAB, WIDTH, LAYERS, CONTEXT, BATCH = 512, 64, 2, 32, 8
        torch.set_num_threads(1)
    name = torch.cuda.get_device_name(0) if device == "cuda" else "CPU"
    print(f"torch {torch.__version__}, {name}, {os.cpu_count()} cores, modes {modes}", flush=True)
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29534")
    os.environ.setdefault("TORCH_FR_BUFFER_SIZE", "2000")  # as the bootstrap sets it, in both modes
    if device == "cuda":
        torch.cuda.set_device(0)
        dist.init_process_group("nccl", rank=0, world_size=1, device_id=torch.device("cuda", 0))
    else:
        dist.init_process_group("gloo", rank=0, world_size=1)
    torch.manual_seed(0)
    on_gpu = device == "cuda"
    model = torch.nn.parallel.DistributedDataParallel(GPT().to(device), device_ids=[0] if on_gpu else None)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=on_gpu)
    loader = DataLoader(Tokens(), batch_size=BATCH, num_workers=4 if on_gpu else 1, pin_memory=on_gpu,
                        persistent_workers=True)
    block_of_steps(model, optimizer, loader, 60, device)  # warm-up: kernels chosen, caches filled
    results = {"quiet": measure(model, optimizer, loader, args.cycles, args.block, args.skip, "quiet", modes, device)}
    if args.busy:
        loops = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 1)]
        try:
            time.sleep(1.0)
            results["busy"] = measure(model, optimizer, loader, args.cycles, args.block, args.skip, "busy", modes,
                                      device)
        finally:
            for loop in loops:
                loop.kill()
    if SINK is not None:
        print(f"the reporter mode's blocks sent {SINK.received:,} bytes to the sink", flush=True)
        results["sink_bytes"] = SINK.received
    if args.json:
        with open(args.json, "w") as file:
            json.dump(results, file, indent=1)
    sys.stdout.flush()
    os._exit(0)  # skip the persistent DataLoader workers' and NCCL's teardown (~20 s here)


if __name__ == "__main__":
    sys.exit(main())
