"""The step phases on a real GPU, in one process: the first part of the GPU check (``gpu_check.sh``).

Installs the real zero-code instrumentation into this process (as ``tests/worker/in_process.py``
does) and trains a small GPT-style model on one CUDA GPU, wrapped in DDP over a one-rank NCCL
group, in bf16 autocast. Prints every raw number:

* the phases of the measured steps (GPU clock), their sum against the CPU step time, and the
  exposed communication of a rank that has nobody to wait for;
* whether the instrumentation adds a synchronisation: ``torch.profiler``'s CUDA runtime calls
  (``cudaStreamSynchronize``, ``cudaEventSynchronize``, ``cudaDeviceSynchronize``, ``cudaMemcpy``
  without Async) counted with the hooks installed and without, over the same steps;
* the cost of a mark (an event record on the training stream) on this machine;
* a step ``GradScaler`` skipped (fp16, a gradient made infinite on purpose): marked skipped,
  its loss kept;
* the allocator's memory counters at a step's end.

Run: ``PYTHONPATH=.:runner/worker_path python3 tests/bench/gpu_phases_inprocess.py [--json OUT]``.
Exits 1 when a check fails (each printed as FAIL).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
from torch import nn

from rankwatch import _instrument, protocol
from rankwatch._buffer import KIND_GPU_MEMORY, KIND_STEP, RecordBuffer

FAILURES: list[str] = []


def check(condition: bool, what: str) -> None:
    print(("ok   " if condition else "FAIL ") + what, flush=True)
    if not condition:
        FAILURES.append(what)


class Block(nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.attention = nn.MultiheadAttention(width, 8, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))

    def forward(self, x):
        h = self.norm(x)
        x = x + self.attention(h, h, h, need_weights=False)[0]
        return x + self.mlp(self.norm(x))


class TinyGPT(nn.Module):
    def __init__(self, vocab: int = 4096, width: int = 512, depth: int = 6):
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.blocks = nn.Sequential(*(Block(width) for _ in range(depth)))
        self.head = nn.Linear(width, vocab)

    def forward(self, tokens):
        return self.head(self.blocks(self.embed(tokens)))


def read_records(buffer: RecordBuffer, deadline: float = 10.0) -> tuple[list[tuple], list[tuple]]:
    """Step rows and memory records as the reporter reads them (waits for the events)."""
    steps, memory = [], []
    for record in buffer.drain():
        if record[0] == KIND_STEP:
            _kind, _t, step, loss, step_time, _data_wait, _samples, _cpu_wait, skipped, phases = record
            until = time.monotonic() + deadline
            for pending in (loss, phases):
                while pending is not None and hasattr(pending, "ready") and not pending.ready():
                    if time.monotonic() > until:
                        break
                    time.sleep(0.001)
            loss = loss.value() if hasattr(loss, "ready") else loss
            phases = phases.value() if hasattr(phases, "ready") else phases
            steps.append((step, loss, step_time, skipped, phases))
        elif record[0] == KIND_GPU_MEMORY:
            memory.append(record)
    return steps, memory


class Tokens(torch.utils.data.Dataset):
    def __init__(self, vocab: int, length: int):
        self.vocab, self.length = vocab, length

    def __len__(self):
        return 1 << 20

    def __getitem__(self, index):
        return torch.randint(0, self.vocab, (self.length,))


def train(model, optimizer, steps: int, batch: int, length: int, vocab: int, losses: list[float] | None = None):
    loader = torch.utils.data.DataLoader(Tokens(vocab, length), batch_size=batch, num_workers=2, pin_memory=True)
    for _, tokens in zip(range(steps), loader, strict=False):
        tokens = tokens.to("cuda", non_blocking=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(tokens)
            loss = nn.functional.cross_entropy(logits.float().view(-1, vocab), tokens.view(-1))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if losses is not None:
            losses.append(loss.detach())


def synchronising_calls(profile) -> dict[str, int]:
    counts: dict[str, int] = {}
    for event in profile.events():
        name = event.name
        if "Synchronize" in name or name in ("cudaMemcpy", "cuMemcpy"):
            counts[name] = counts.get(name, 0) + 1
    return counts


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    results: dict = {"torch": torch.__version__, "gpu": torch.cuda.get_device_name(0)}
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name(0)}, NCCL {torch.cuda.nccl.version()}")
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    torch.cuda.set_device(0)
    dist.init_process_group("nccl", rank=0, world_size=1, device_id=torch.device("cuda", 0))
    vocab = 4096
    torch.manual_seed(0)
    buffer = RecordBuffer()
    clock = _instrument.install(torch, buffer, reporter=None)  # as the bootstrap does: before the optimizer exists
    model = nn.parallel.DistributedDataParallel(TinyGPT(vocab).cuda(), device_ids=[0])
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    train(model, optimizer, 20, 16, 256, vocab)  # warm-up
    torch.cuda.synchronize()
    buffer.drain()

    # 1. the phases of a DDP step on the GPU clock
    losses: list = []
    started = time.perf_counter()
    train(model, optimizer, args.steps, 16, 256, vocab, losses)
    torch.cuda.synchronize()
    elapsed = time.perf_counter() - started
    steps, memory = read_records(buffer)
    steps = [(step - 20, *rest) for step, *rest in steps]  # numbered from the first measured iteration
    measured = [(step, step_time, phases) for step, _loss, step_time, _skipped, phases in steps if phases]
    print(f"{len(steps)} steps in {elapsed:.3f} s; {len(measured)} with phases")
    check(len(steps) == args.steps, f"every optimizer step counted ({len(steps)} of {args.steps})")
    check(len(measured) >= args.steps // 2, f"phases measured on most steps ({len(measured)})")
    check(all(phases[0] == protocol.CLOCK_GPU for _s, _t, phases in measured), "phases on the GPU clock")
    rows = []
    for step, step_time, phases in measured:
        values = phases[1:]
        span = sum(value for value in values if value is not None)
        rows.append((step, step_time, span, values))
    print("step  cpu_step_ms  gpu_span_ms  " + "  ".join(f"{name}_ms" for name in protocol.PHASES))
    for step, step_time, span, values in rows[:10] + rows[-5:]:
        print(f"{step:4d}  {step_time * 1000:11.3f}  {span * 1000:11.3f}  "
              + "  ".join("–" if value is None else f"{value * 1000:.3f}" for value in values))
    median_step = statistics.median(row[1] for row in rows)
    median_span = statistics.median(row[2] for row in rows)
    print(f"median CPU step time {median_step * 1000:.3f} ms, median GPU span {median_span * 1000:.3f} ms, "
          f"ratio {median_span / median_step:.4f}")
    check(abs(median_span / median_step - 1) <= 0.05, "the phases add up to the step time within 5 % at the median")
    medians = {}
    for index, name in enumerate(protocol.PHASES):
        values = [row[3][index] for row in rows if row[3][index] is not None]
        medians[name] = statistics.median(values) if values else None
    print("median phases (ms): " + ", ".join(f"{k} {'–' if v is None else f'{v * 1000:.3f}'}" for k, v in medians.items()))
    for name in ("data", "h2d", "forward", "backward", "optimizer", "comm"):
        check(medians[name] is not None, f"phase {name} measured")
    comm_share = (medians["comm"] or 0.0) / median_span
    print(f"exposed communication of a 1-rank job: {comm_share:.2%} of the GPU span")
    results.update(steps=len(steps), measured=len(measured), median_step_s=median_step, median_span_s=median_span,
                   median_phases_s=medians, comm_share_one_rank=comm_share,
                   losses_equal=None)
    # the loss stored is the script's own
    script_losses = [value.float().item() for value in losses]
    stored = [loss for _step, loss, _t, _skipped, _phases in steps]
    differences = [abs(a - b) / max(abs(a), 1e-12) for a, b in zip(script_losses, stored, strict=False) if b is not None]
    check(len(differences) == len(script_losses) and max(differences) < 1e-6,
          f"stored loss equals loss.item() ({len(differences)} compared, largest relative difference "
          f"{max(differences) if differences else float('nan'):.2e})")
    check(bool(memory), f"allocator memory read at step ends ({len(memory)} records)")
    if memory:
        _kind, _t, _step, allocated, reserved, peak = memory[-1]
        print(f"memory: allocated {allocated} reserved {reserved} peak {peak}; "
              f"torch says {torch.cuda.memory_allocated()} / {torch.cuda.memory_reserved()} / "
              f"{torch.cuda.max_memory_allocated()}")
        check(0 < allocated <= reserved and peak >= allocated, "allocated <= reserved, peak >= allocated")
        results["memory"] = {"allocated": allocated, "reserved": reserved, "peak": peak}

    # 2. no synchronisation added: the CUDA runtime calls of the same steps with and without the hooks
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as with_hooks:
        train(model, optimizer, 32, 16, 256, vocab)
        torch.cuda.synchronize()
    buffer.drain()
    clock.uninstall()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as without_hooks:
        train(model, optimizer, 32, 16, 256, vocab)
        torch.cuda.synchronize()
    counted_with, counted_without = synchronising_calls(with_hooks), synchronising_calls(without_hooks)
    print(f"synchronising CUDA calls over 32 steps: with the hooks {counted_with}, without {counted_without}")
    check(counted_with == counted_without, "the instrumentation adds no synchronising CUDA call")
    results["synchronising_calls"] = {"with": counted_with, "without": counted_without}

    # 3. the cost of one mark on this machine
    stream = torch.cuda.current_stream()
    events = [torch.cuda.Event(enable_timing=True) for _ in range(2000)]
    for event in events:
        event.record(stream)
    torch.cuda.synchronize()
    started = time.perf_counter()
    for event in events:
        event.record(stream)
    per_record = (time.perf_counter() - started) / len(events)
    started = time.perf_counter()
    for _ in range(2000):
        torch.cuda.current_stream(0)
    per_stream = (time.perf_counter() - started) / 2000
    torch.cuda.synchronize()
    started = time.perf_counter()
    for first, second in itertools.pairwise(events):
        first.elapsed_time(second)
    per_elapsed = (time.perf_counter() - started) / (len(events) - 1)
    started = time.perf_counter()
    for _ in range(200):
        torch.cuda.memory_stats(0)
    per_memory = (time.perf_counter() - started) / 200
    print(f"event record {per_record * 1e6:.2f} us, current_stream {per_stream * 1e6:.2f} us, "
          f"elapsed_time (reporter) {per_elapsed * 1e6:.2f} us, memory_stats {per_memory * 1e6:.1f} us")
    results["costs_us"] = {"record": per_record * 1e6, "current_stream": per_stream * 1e6,
                           "elapsed_time": per_elapsed * 1e6, "memory_stats": per_memory * 1e6}

    # 4. a step GradScaler skips is marked skipped, its loss kept
    buffer = RecordBuffer()
    clock = _instrument.install(torch, buffer, reporter=None)
    small = nn.Linear(64, 64).cuda()
    small_optimizer = torch.optim.SGD(small.parameters(), lr=0.01)
    scaler = torch.amp.GradScaler("cuda")
    script = []
    for index in range(8):
        with torch.autocast("cuda", dtype=torch.float16):
            loss = small(torch.randn(32, 64, device="cuda")).float().pow(2).mean()
        scaler.scale(loss).backward()
        if index == 5:
            small.weight.grad.fill_(float("inf"))
        scaler.step(small_optimizer)
        scaler.update()
        small_optimizer.zero_grad()
        script.append(loss.item())
    torch.cuda.synchronize()
    steps, _memory = read_records(buffer)
    clock.uninstall()
    skipped = [step for step, _loss, _t, was_skipped, _phases in steps if was_skipped]
    print(f"GradScaler: {len(steps)} steps, skipped {skipped}, losses {[s[1] for s in steps]}")
    for step, loss, _step_time, was_skipped, phases in steps:
        print(f"  step {step}: loss {loss} (script {script[step]:.6f}), skipped {was_skipped}, "
              f"phases {phases and [p if isinstance(p, str) or p is None else round(p * 1000, 3) for p in phases]}")
    check(len(steps) == 8 and skipped == [5], "the step GradScaler skipped is counted and marked skipped")
    check(all(b[1] is not None and abs(a - b[1]) <= 1e-6 * max(1, abs(a)) for a, b in zip(script, steps, strict=False)),
          "every step's loss kept, the skipped one's too")
    dist.destroy_process_group()
    results["failures"] = FAILURES
    if args.json:
        with open(args.json, "w") as file:
            json.dump(results, file, indent=1, default=str)
    print("FAILURES: " + ("; ".join(FAILURES) if FAILURES else "none"))
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
