"""A 1-rank NCCL job under ``rankwatch run`` on one GPU, checked: the second part of the GPU check.

The script (a GPT-style model in bf16, DataLoader with pinned memory, DDP over NCCL) prints its
own ``loss.item()`` at every step; the check compares, from the store (``runs export --csv``):

* each stored loss with the printed one, exactly;
* each measured step's phases: on the GPU's clock, adding up to the step time within 5 % at the
  median; the exposed communication of a rank that has nobody to wait for;
* the bottleneck verdict at the end (``runs show --json``), and the GPU utilisation and memory
  per rank where ``runs show --json`` has them;
* ``rankwatch gpus --json`` while the job trains: the rank's process, named with its run and rank
  where Rankwatch knows it.

Run (from the repository root, with this checkout's runner importable)::

    PYTHONPATH=.:runner/worker_path python3 tests/bench/gpu_job_check.py [--steps 300] [--json OUT]

Exits 1 when a check fails (each printed as FAIL); every raw number is printed.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FAILURES: list[str] = []

SCRIPT = r"""
import os, sys, torch, torch.distributed as dist
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

cpu = len(sys.argv) > 2 and sys.argv[2] == "cpu"  # the harness's own dry run on a machine without a GPU
dist.init_process_group("gloo" if cpu else "nccl")
if not cpu:
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
device = "cpu" if cpu else "cuda"
torch.manual_seed(0)
steps = int(sys.argv[1])
vocab, width, layers, context, batch = (512, 64, 2, 32, 4) if cpu else (8192, 768, 6, 256, 16)

class Tokens(Dataset):
    def __len__(self):
        return 1 << 30
    def __getitem__(self, index):
        tokens = torch.randint(0, vocab, (context + 1,))
        return tokens[:-1], tokens[1:]

class GPT(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, width)
        self.position = torch.nn.Parameter(torch.zeros(context, width))
        block = torch.nn.TransformerEncoderLayer(width, 8, 4 * width, dropout=0.0, batch_first=True, norm_first=True)
        self.blocks = torch.nn.TransformerEncoder(block, layers, enable_nested_tensor=False)
        self.head = torch.nn.Linear(width, vocab)
        self.register_buffer("mask", torch.nn.Transformer.generate_square_subsequent_mask(context))
    def forward(self, tokens):
        return self.head(self.blocks(self.embed(tokens) + self.position, mask=self.mask, is_causal=True))

model = torch.nn.parallel.DistributedDataParallel(GPT().to(device), device_ids=None if cpu else [torch.cuda.current_device()])
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=not cpu)
loader = DataLoader(Tokens(), batch_size=batch, num_workers=0 if cpu else 4, pin_memory=not cpu)
for step, (inputs, targets) in zip(range(steps), loader):
    inputs, targets = inputs.to(device, non_blocking=True), targets.to(device, non_blocking=True)
    with torch.autocast(device, dtype=torch.bfloat16, enabled=not cpu):
        loss = F.cross_entropy(model(inputs).float().reshape(-1, vocab), targets.reshape(-1))
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    print(f"step {step} loss {loss.item()!r}", flush=True)
dist.destroy_process_group()
"""


def check(condition: bool, what: str) -> None:
    print(("ok   " if condition else "FAIL ") + what, flush=True)
    if not condition:
        FAILURES.append(what)


def rankwatch(*args: str, environment: dict[str, str], **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "runner", *args], env=environment, capture_output=True, text=True,
                          **kwargs)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--json", default=None)
    parser.add_argument("--cpu", action="store_true", help="a dry run of this check on the CPU (gloo), no GPU")
    args = parser.parse_args()
    clock = "cpu" if args.cpu else "gpu"
    results: dict = {}
    with tempfile.TemporaryDirectory(prefix="rw-gpu-check-") as folder:
        folder_path = Path(folder)
        script = folder_path / "gpt_train.py"
        script.write_text(SCRIPT)
        python_path = os.pathsep.join(part for part in (str(REPO), str(REPO / "runner" / "worker_path"),
                                                        os.environ.get("PYTHONPATH", "")) if part)
        environment = {**os.environ, "RANKWATCH_HOME": str(folder_path / "home"), "PYTHONPATH": python_path}
        started = time.monotonic()
        job = subprocess.Popen([sys.executable, "-m", "runner", "run", "--plain", "--nproc-per-node", "1", "--gpus",
                                "cpu" if args.cpu else "0", str(script), str(args.steps), *(["cpu"] if args.cpu else [])],
                               env=environment, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, cwd=folder)
        printed: dict[int, float] = {}
        gpus_during = None
        output_lines = []
        assert job.stdout is not None
        for line in job.stdout:
            output_lines.append(line.rstrip("\n"))
            words = line.split()
            if "loss" in words and "step" in words:
                try:
                    printed[int(words[words.index("step") + 1])] = float(words[words.index("loss") + 1])
                except (ValueError, IndexError):
                    pass
            if gpus_during is None and len(printed) >= 50:
                gpus_during = rankwatch("gpus", "--json", environment=environment, timeout=60)
        code = job.wait()
        elapsed = time.monotonic() - started
        print("\n".join(output_lines[-25:]))
        check(code == 0, f"rankwatch run exited {code} after {elapsed:.1f} s")
        if gpus_during is not None and not args.cpu:
            print("rankwatch gpus --json while training:", gpus_during.stdout.strip()[:2000])
            try:
                processes = [process for gpu in json.loads(gpus_during.stdout) for process in gpu.get("processes") or []]
            except ValueError:
                processes = []
            results["gpus_during"] = processes
            check(any(process.get("run") is not None and process.get("rank") == 0 for process in processes),
                  "rankwatch gpus names the run and rank of the process it started")
        shown = rankwatch("runs", "show", "last", "--json", environment=environment, timeout=120)
        shown_text = rankwatch("runs", "show", "last", environment=environment, timeout=120)
        print(shown_text.stdout)
        show = json.loads(shown.stdout) if shown.returncode == 0 else {}
        results["show"] = show
        bottleneck = ((show.get("run") or {}).get("summary") or {}).get("diagnostics", {}).get("bottleneck")
        print("bottleneck:", json.dumps(bottleneck, indent=1))
        check(bool(bottleneck) and bottleneck.get("clock") == clock, f"a bottleneck verdict on the {clock}'s clock")
        ranks = show.get("ranks") or []
        for key in () if args.cpu else ("gpu_util", "gpu_mem_allocated", "gpu_mem_peak"):
            check(any(rank.get(key) is not None for rank in ranks), f"runs show --json has {key} per rank")
        export = folder_path / "export"
        rankwatch("runs", "export", "last", "--csv", str(export), environment=environment, timeout=120)
        by_step: dict[int, dict[str, float]] = defaultdict(dict)
        with (export / "metrics.csv").open() as file:
            for row in csv.DictReader(file):
                if row["source"] == "auto" and row["step"] and row["value"]:
                    by_step[int(row["step"])][row["name"]] = float(row["value"])
        stored = {step: values["loss"] for step, values in by_step.items() if "loss" in values}
        equal = sum(1 for step, loss in printed.items() if stored.get(step) == loss)
        differences = [abs(stored[step] - loss) / max(abs(loss), 1e-12) for step, loss in printed.items()
                       if step in stored]
        check(len(printed) == args.steps and equal == len(printed),
              f"{equal} of {len(printed)} printed losses stored exactly (largest relative difference "
              f"{max(differences) if differences else float('nan'):.2e}, {len(stored)} stored)")
        phase_names = [f"phase_{name}" for name in ("data", "h2d", "forward", "backward", "comm", "optimizer", "rest")]
        measured = [(step, values) for step, values in sorted(by_step.items())
                    if "phase_clock" in values and "step_time" in values]
        # steps of 10 ms or more are all timed, faster ones every 2nd..16th (rankwatch._phases.split_every)
        check(len(measured) >= args.steps // 16, f"phases measured on {len(measured)} of {len(by_step)} steps")
        check(all(values["phase_clock"] == (0 if args.cpu else 1) for _step, values in measured),
              f"every phase on the {clock}'s clock")
        ratios = [sum(values.get(name, 0.0) for name in phase_names) / values["step_time"] for _step, values in measured]
        median_ratio = statistics.median(ratios) if ratios else float("nan")
        print(f"phases' sum / step time: median {median_ratio:.4f}, p10 {sorted(ratios)[len(ratios) // 10]:.4f}, "
              f"p90 {sorted(ratios)[len(ratios) * 9 // 10]:.4f}" if ratios else "no phases")
        check(abs(median_ratio - 1) <= 0.05, "the phases add up to the step time within 5 % at the median")
        medians = {name: statistics.median([values[name] for _s, values in measured if name in values])
                   for name in phase_names if any(name in values for _s, values in measured)}
        print("median phases (ms): " + ", ".join(f"{name[6:]} {value * 1000:.3f}" for name, value in medians.items()))
        step_median = statistics.median(values["step_time"] for _s, values in measured) if measured else float("nan")
        print(f"median step time {step_median * 1000:.3f} ms; exposed communication of a rank with nobody to wait "
              f"for: {medians.get('phase_comm', 0.0) / step_median:.2%} of the step")
        for name in ("phase_data", "phase_h2d", "phase_forward", "phase_backward", "phase_comm", "phase_optimizer"):
            check(name in medians, f"{name} measured")
        results.update(printed=len(printed), stored=len(stored), equal=equal, measured=len(measured),
                       median_ratio=median_ratio, median_phases=medians, step_median=step_median,
                       bottleneck=bottleneck, failures=FAILURES)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1, default=str))
    print("FAILURES: " + ("; ".join(FAILURES) if FAILURES else "none"))
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
