"""Whole-job cost of Rankwatch: bare torchrun vs ``rankwatch run`` vs ``--no-instrument``.

Run on demand (not part of the test suite). The full run (the acceptance of issue 17,
about 20-25 minutes on a 2-core machine)::

    .venv/bin/python tests/bench/bench_job_overhead.py

A quick check that it works (about 2 minutes)::

    .venv/bin/python tests/bench/bench_job_overhead.py --rounds 1 --steps 600 --gpt-steps 40 --first 300

What runs: the same 2-rank CPU training script (gloo, ``OMP_NUM_THREADS=1``) three
ways, alternating within each round (the order rotates from round to round so no
variant always follows another):

* ``bare``: ``python -m torch.distributed.run --nproc-per-node 2 script.py``;
* ``rankwatch``: ``rankwatch run --plain --nproc-per-node 2 script.py`` (as
  ``python -m runner run``, the CLI without the GUI, of this checkout), the real
  runner with its hub, store, samplers, sentinel, keeper and the zero-code
  instrumentation in the ranks (zero code: the script knows nothing of Rankwatch);
* ``no-instrument``: the same with ``--no-instrument`` (hub connection, heartbeats,
  output capture, no torch hooks).

Two models: ``ddp`` (an MLP under DDP, ~3 ms steps here) and ``gpt`` (a small causal
transformer with gradient accumulation under DDP's ``no_sync``, ~30 ms per optimizer
step on this machine; ``--gpt-width/--gpt-layers/--gpt-accumulate`` scale it to
another machine's speed, with ``--gpt-context``). Each model runs ``quiet`` and ``busy``: every core kept
busy by ``stress-ng --cpu N`` at normal priority (N = the core count, ``--load-workers``),
or by a pure-Python busy loop per core when stress-ng is not installed
(``apt-get install stress-ng``). ``--loads quiet`` or ``--loads busy`` runs one of them.

Every rank times every optimizer step itself (``perf_counter`` at each step's end,
from just before the first step). Per run: the mean step time after ``--warmup``
steps (steady), and the mean over the first ``--first`` steps (what the runner's start
costs a short job). Per variant: the median over the rounds, its ratio to bare, and
the median of the per-round ratios (each round's runs are close in time: drift of a
shared machine cancels). Raw per-round numbers are printed and, with ``--json``, saved.

While a run goes, a monitor thread here reads ``/proc`` every ``--sample-every``
seconds for every process under the launched command (runner, sentinel, keeper,
torchrun, ranks) and every thread in them: CPU time (``/proc/<pid>/stat``,
``/proc/<pid>/task/<tid>/schedstat``) and context switches (``voluntary_ctxt_switches``:
the thread slept and was woken; ``nonvoluntary``: it was preempted). Reported: the
runner's CPU seconds per second of run (whole run and its first ``--startup-seconds``),
and the switches per second of each Rankwatch thread and process. The monitor runs for
every variant alike (its own cost is the same for all). Targets (issue 17): ratio
<= 1.01 quiet and <= 1.05 busy, both models, steady and first 1,000 steps.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
VARIANTS = ("bare", "rankwatch", "no-instrument")
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
UPSTREAM_SHUTDOWN_ABORT = "terminate called without an active exception"
"""About 1 run in 50 here, one rank aborts in gloo's teardown after its last step, with
or without Rankwatch; such a run is repeated once (see bench_worker_overhead.py)."""

TIMING = r"""
import json, sys, time
import torch
import torch.distributed as dist
imported = time.time()

def timed_steps(run_step, steps, result_path):
    durations = []
    first_step = time.time()
    last = time.perf_counter()
    for _ in range(steps):
        run_step()
        now = time.perf_counter()
        durations.append(now - last)
        last = now
    policy = {0: "SCHED_OTHER", 3: "SCHED_BATCH", 5: "SCHED_IDLE"}.get(
        __import__("os").sched_getscheduler(0), "other")
    with open(f"{result_path}.{dist.get_rank()}", "w") as result:
        json.dump({"rank": dist.get_rank(), "durations": durations, "policy": policy,
                   "nice": __import__("os").nice(0), "imported": imported, "first_step": first_step,
                   "steps_done": time.time()}, result)
"""

DDP_SCRIPT = TIMING + r"""
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

torch.set_num_threads(1)
dist.init_process_group("gloo")
torch.manual_seed(0)
steps, result_path, width = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Sequential(
    torch.nn.Linear(256, width), torch.nn.ReLU(), torch.nn.Linear(width, 256), torch.nn.ReLU(),
    torch.nn.Linear(256, 1)))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
loader = DataLoader(TensorDataset(torch.randn(4096, 256), torch.randn(4096, 1)), batch_size=64,
                    shuffle=True, drop_last=True)

def batches():
    while True:
        yield from loader

stream = batches()

def step():
    x, y = next(stream)
    loss = F.mse_loss(model(x), y)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()

timed_steps(step, steps, result_path)
dist.destroy_process_group()
"""

GPT_SCRIPT = TIMING + r"""
import contextlib
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

torch.set_num_threads(1)
dist.init_process_group("gloo")
torch.manual_seed(0)
steps, result_path = int(sys.argv[1]), sys.argv[2]
width, layers, accumulate, context = (int(value) for value in sys.argv[3:7])
vocab, micro_batch = 512, 4


class TinyGPT(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, width)
        self.position = torch.nn.Parameter(torch.zeros(context, width))
        block = torch.nn.TransformerEncoderLayer(width, 4, 4 * width, dropout=0.0, batch_first=True,
                                                 norm_first=True)
        self.blocks = torch.nn.TransformerEncoder(block, layers, enable_nested_tensor=False)
        self.head = torch.nn.Linear(width, vocab)
        self.register_buffer("mask", torch.nn.Transformer.generate_square_subsequent_mask(context))

    def forward(self, tokens):
        hidden = self.blocks(self.embed(tokens) + self.position, mask=self.mask, is_causal=True)
        return self.head(hidden)


model = torch.nn.parallel.DistributedDataParallel(TinyGPT())
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
tokens = torch.randint(0, vocab, (512, context + 1))
loader = DataLoader(TensorDataset(tokens[:, :-1], tokens[:, 1:]), batch_size=micro_batch, shuffle=True,
                    drop_last=True)

def batches():
    while True:
        yield from loader

stream = batches()

def step():
    for micro in range(accumulate):
        inputs, targets = next(stream)
        quiet = model.no_sync() if micro < accumulate - 1 else contextlib.nullcontext()
        with quiet:
            logits = model(inputs)
            loss = F.cross_entropy(logits.reshape(-1, vocab), targets.reshape(-1)) / accumulate
            loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)

timed_steps(step, steps, result_path)
dist.destroy_process_group()
"""

GPU_SCRIPT = TIMING + r"""
import os
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

dist.init_process_group("nccl")
local_rank = int(os.environ.get("LOCAL_RANK", 0))
torch.cuda.set_device(local_rank)
torch.manual_seed(0)
steps, result_path = int(sys.argv[1]), sys.argv[2]
width, layers, context, batch = (int(value) for value in sys.argv[3:7])
vocab = 8192


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
        hidden = self.blocks(self.embed(tokens) + self.position, mask=self.mask, is_causal=True)
        return self.head(hidden)


model = torch.nn.parallel.DistributedDataParallel(GPT().cuda(), device_ids=[local_rank])
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=True)
loader = DataLoader(Tokens(), batch_size=batch, num_workers=4, pin_memory=True, persistent_workers=True)
stream = iter(loader)

def step():
    inputs, targets = next(stream)
    inputs, targets = inputs.cuda(non_blocking=True), targets.cuda(non_blocking=True)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        logits = model(inputs)
        loss = F.cross_entropy(logits.float().reshape(-1, vocab), targets.reshape(-1))
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)

timed_steps(step, steps, result_path)
torch.cuda.synchronize()
dist.destroy_process_group()
sys.stdout.flush()
os._exit(0)  # the persistent DataLoader workers' teardown took ~22 s of each ~42 s run on the H200
"""
"""The ``gpu`` model: a causal transformer in bf16 on one CUDA GPU per rank under DDP over NCCL,
fed by a DataLoader with pinned memory (the GPU check, ``gpu_check.sh``). Its step time is the
CPU's, which in steady state is the GPU's: nothing here synchronises, so the host runs ahead until
the launch queue is full and then keeps the GPU's pace."""


# ---- /proc monitor ------------------------------------------------------------------------------


@dataclass
class ThreadSeries:
    """First and last reading of one thread: (time, cpu ns, voluntary, nonvoluntary)."""

    role: str
    label: str
    first: tuple[float, int, int, int]
    last: tuple[float, int, int, int]


@dataclass
class ProcessSeries:
    role: str
    readings: list[tuple[float, float]] = field(default_factory=list)
    """(time, CPU seconds of the whole process, its ended threads included)."""


def _read(path: str) -> str | None:
    try:
        with open(path) as handle:
            return handle.read()
    except OSError:
        return None


def _children(pid: int) -> list[int]:
    found = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for tid in tasks:
        text = _read(f"/proc/{pid}/task/{tid}/children")
        if text:
            found.extend(int(child) for child in text.split())
    return found


def _switches(status: str) -> tuple[int, int]:
    voluntary = nonvoluntary = 0
    for line in status.splitlines():
        if line.startswith("voluntary_ctxt_switches"):
            voluntary = int(line.split()[1])
        elif line.startswith("nonvoluntary_ctxt_switches"):
            nonvoluntary = int(line.split()[1])
    return voluntary, nonvoluntary


class ProcMonitor:
    """Samples every process and thread under ``root`` every ``every`` seconds (its own thread)."""

    def __init__(self, root: int, root_role: str, every: float):
        self.root, self.root_role, self.every = root, root_role, every
        self.started = time.monotonic()
        self.roles: dict[int, str] = {}
        self.threads: dict[tuple[int, int], ThreadSeries] = {}
        self.processes: dict[int, ProcessSeries] = {}
        self.policies: dict[str, set[str]] = defaultdict(set)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="bench-proc-monitor", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _loop(self) -> None:
        while not self._stop.wait(self.every):
            self.sample()

    def _role(self, pid: int, parent_role: str | None) -> str:
        role = self.roles.get(pid)
        if role is not None:
            return role
        if pid == self.root:
            role = self.root_role
        else:
            command = (_read(f"/proc/{pid}/cmdline") or "").replace("\0", " ")
            if "runner.launch.sentinel" in command:
                role = "sentinel"
            elif "runner.launch.keeper" in command:
                role = "keeper"
            elif "torch.distributed.run" in command or "torchrun" in command:
                role = "torchrun"
            elif parent_role == "torchrun":
                role = "rank"
            else:
                role = f"{parent_role}'s child"
        self.roles[pid] = role
        return role

    def sample(self) -> None:
        now = time.monotonic()
        pending: list[tuple[int, str | None]] = [(self.root, None)]
        while pending:
            pid, parent_role = pending.pop()
            role = self._role(pid, parent_role)
            stat = _read(f"/proc/{pid}/stat")
            if stat is None:
                continue
            fields = stat.rsplit(")", 1)[1].split()
            cpu = (int(fields[11]) + int(fields[12])) / CLOCK_TICKS
            self.processes.setdefault(pid, ProcessSeries(role)).readings.append((now, cpu))
            try:
                self.policies[role].add(str(os.sched_getscheduler(pid)))
            except OSError:
                pass
            try:
                tasks = os.listdir(f"/proc/{pid}/task")
            except OSError:
                continue
            for tid_text in tasks:
                tid = int(tid_text)
                base = f"/proc/{pid}/task/{tid}"
                status, schedstat = _read(f"{base}/status"), _read(f"{base}/schedstat")
                if status is None or schedstat is None:
                    continue
                voluntary, nonvoluntary = _switches(status)
                reading = (now, int(schedstat.split()[0]), voluntary, nonvoluntary)
                series = self.threads.get((pid, tid))
                if series is None:
                    name = (_read(f"{base}/comm") or "?").strip()
                    label = "main" if tid == pid else (name if name.startswith("rankwatch-") else "other")
                    self.threads[(pid, tid)] = ThreadSeries(role, label, reading, reading)
                else:
                    series.last = reading
            pending.extend((child, role) for child in _children(pid))

    def summary(self, startup_seconds: float) -> dict:
        """Per role and thread label: CPU s/s and switches/s (voluntary, nonvoluntary), and
        the root's CPU over the whole run and over its first ``startup_seconds``."""
        per_label: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        processes_per_role: dict[str, int] = defaultdict(int)
        for series in self.processes.values():
            processes_per_role[series.role] += 1
        for series in self.threads.values():
            span = series.last[0] - series.first[0]
            if span <= 0:
                continue
            key = f"{series.role}/{series.label}"
            entry = per_label[key]
            entry["cpu_per_s"] += (series.last[1] - series.first[1]) / 1e9 / span
            entry["voluntary_per_s"] += (series.last[2] - series.first[2]) / span
            entry["nonvoluntary_per_s"] += (series.last[3] - series.first[3]) / span
        for key, entry in per_label.items():  # per process of that role (one rank, not the sum)
            count = processes_per_role[key.split("/", 1)[0]]
            for name in entry:
                entry[name] /= max(1, count)
        root = self.processes.get(self.root)
        result: dict = {"threads": {key: dict(value) for key, value in sorted(per_label.items())},
                        "policies": {role: sorted(values) for role, values in self.policies.items()}}
        if root and root.readings:
            end_time, end_cpu = root.readings[-1]
            result["root_cpu_per_s"] = end_cpu / max(1e-9, end_time - self.started)
            early = [cpu for t, cpu in root.readings if t - self.started <= startup_seconds]
            result["root_startup_cpu_s"] = early[-1] if early else None
            result["root_seconds"] = end_time - self.started
            previous, timeline = 0.0, []
            for t, cpu in root.readings[:12]:  # the start: CPU per sampling period
                timeline.append((round(t - self.started, 2), round(cpu - previous, 3)))
                previous = cpu
            result["root_timeline"] = timeline
        rank_starts = [series.readings[0][0] for series in self.processes.values()
                       if series.role == "rank" and series.readings]
        result["ranks_seen_at"] = round(min(rank_starts) - self.started, 2) if rank_starts else None
        return result


# ---- runs ---------------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _command(variant: str, script: Path, script_args: list[str], port: int, nproc: int = 2,
             backend: str = "gloo") -> list[str]:
    if variant == "bare":
        return [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc-per-node", str(nproc),
                "--master-addr", "127.0.0.1", "--master-port", str(port), str(script), *script_args]
    # ``python -m runner`` is ``rankwatch`` without the GUI; PYTHONPATH (run_once) makes it this
    # checkout's runner, so a copy of this file in another checkout measures that one.
    command = [sys.executable, "-m", "runner", "run", "--plain", "--status-every", "0", "--nproc-per-node", str(nproc),
               "--backend", backend, "--omp-num-threads", "1", "--master-port", str(port)]
    if backend == "nccl":
        command += ["--gpus", ",".join(str(index) for index in range(nproc))]
    if variant == "no-instrument":
        command.append("--no-instrument")
    return [*command, str(script), *script_args]


def run_once(variant: str, script: Path, steps: int, script_args: list[str], folder: Path,
             options: argparse.Namespace, backend: str = "gloo") -> dict:
    """One job; returns the ranks' step durations and the /proc summary.

    Raises:
        RuntimeError: the job failed (its output's tail in the message).
    """
    result_prefix = folder / f"result-{time.monotonic_ns()}"
    environment = {key: value for key, value in os.environ.items() if not key.startswith("RANKWATCH_")}
    # this checkout first; what PYTHONPATH already holds after it (packages carried to a bare machine)
    python_path = os.pathsep.join(part for part in (str(REPO), os.environ.get("PYTHONPATH", "")) if part)
    environment.update(OMP_NUM_THREADS="1", RANKWATCH_HOME=str(folder / "home"), PYTHONPATH=python_path)
    command = _command(variant, script, [str(steps), str(result_prefix), *script_args], _free_port(), options.nproc,
                       backend)
    output = folder / "output.txt"
    spawned = time.time()
    with output.open("w") as sink:
        process = subprocess.Popen(command, env=environment, stdout=sink, stderr=subprocess.STDOUT,
                                   cwd=folder, start_new_session=True)
        monitor = ProcMonitor(process.pid, "torchrun" if variant == "bare" else "runner", options.sample_every)
        try:
            code = process.wait(timeout=options.timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            code = -9
        finally:
            monitor.stop()
    if code != 0:
        raise RuntimeError(f"{variant} exited {code}:\n{output.read_text()[-3000:]}")
    ended = time.time()
    ranks = [json.loads(Path(f"{result_prefix}.{rank}").read_text()) for rank in range(options.nproc)]
    rank0 = ranks[0]
    stages = {"wall": ended - spawned, "to_imported": rank0["imported"] - spawned,
              "to_first_step": rank0["first_step"] - spawned,
              "steps": rank0["steps_done"] - rank0["first_step"], "after_steps": ended - rank0["steps_done"]}
    return {"ranks": ranks, "proc": monitor.summary(options.startup_seconds), "stages": stages}


def step_figures(ranks: list[dict], warmup: int, first: int) -> dict[str, float]:
    """Mean over every rank of: steady mean, steady median, mean of the first ``first`` steps."""
    steady = [statistics.fmean(rank["durations"][warmup:]) for rank in ranks]
    median = [statistics.median(rank["durations"][warmup:]) for rank in ranks]
    early = [statistics.fmean(rank["durations"][:first]) for rank in ranks]
    return {"steady_mean": statistics.fmean(steady), "steady_median": statistics.fmean(median),
            "first_mean": statistics.fmean(early)}


class BackgroundLoad:
    """Every core kept busy at normal priority: stress-ng, or one Python busy loop per core."""

    def __init__(self, workers: int):
        self.workers = workers
        self.tool = "stress-ng" if shutil.which("stress-ng") else "python busy loops"
        self._processes: list[subprocess.Popen] = []

    def __enter__(self) -> BackgroundLoad:
        if self.tool == "stress-ng":
            self._processes.append(subprocess.Popen(
                ["stress-ng", "--cpu", str(self.workers), "--quiet"], stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL, start_new_session=True))
        else:
            for _ in range(self.workers):
                self._processes.append(subprocess.Popen([sys.executable, "-c", "while True: pass"],
                                                        start_new_session=True))
        time.sleep(1.0)
        return self

    def __exit__(self, *exc: object) -> None:
        for process in self._processes:
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            process.wait()


def _load_average() -> str:
    return " ".join(f"{value:.2f}" for value in os.getloadavg())


def run_blocks(model: str, options: argparse.Namespace, folder: Path, deadline: float) -> list[dict]:
    """Every load's rounds of one model, the loads alternating round by round.

    A round is every variant once, in an order that shifts each round; a load's background is
    started for its round and stopped after it, so quiet and busy rounds see the same machine
    drift. No run starts after ``deadline`` (monotonic): the rounds finished by then are the result,
    so a time-boxed call on a lent GPU always reports whole rounds of both loads.
    """
    script = folder / f"{model}_train.py"
    script.write_text({"ddp": DDP_SCRIPT, "gpt": GPT_SCRIPT, "gpu": GPU_SCRIPT}[model])
    backend = "nccl" if model == "gpu" else "gloo"
    if model == "ddp":
        steps, script_args = options.steps, [str(options.ddp_width)]
    elif model == "gpu":
        steps = options.gpu_steps
        script_args = [str(options.gpu_width), str(options.gpu_layers), str(options.gpu_context),
                       str(options.gpu_batch)]
    else:
        steps = options.gpt_steps
        script_args = [str(options.gpt_width), str(options.gpt_layers), str(options.gpt_accumulate),
                       str(options.gpt_context)]
    first = min(options.first, steps)
    variants = options.variants
    loads = [load.strip() for load in options.loads.split(",") if load.strip()]
    blocks = {load: {"model": model, "load": load, "steps": steps, "first": first, "background": None,
                     "runs": {variant: [] for variant in variants}} for load in loads}
    for round_number in range(options.rounds):
        for load in loads:
            if time.monotonic() >= deadline:
                print(f"  deadline reached: {round_number} whole rounds of {load} and after", flush=True)
                return list(blocks.values())
            background = BackgroundLoad(options.load_workers) if load == "busy" else None
            if background is not None:
                background.__enter__()
                blocks[load]["background"] = background.tool
            shift = round_number % len(variants)
            records = {}
            try:
                for variant in variants[shift:] + variants[:shift]:
                    if time.monotonic() >= deadline:
                        break
                    records[variant] = _measured_run(model, load, round_number, variant, script, steps,
                                                     script_args, folder, options, backend, first)
            finally:
                if background is not None:
                    background.__exit__(None, None, None)
            if len(records) == len(variants):  # only whole rounds pair up
                for variant, record in records.items():
                    blocks[load]["runs"][variant].append(record)
    return list(blocks.values())


def _measured_run(model: str, load: str, round_number: int, variant: str, script: Path, steps: int,
                  script_args: list[str], folder: Path, options: argparse.Namespace, backend: str,
                  first: int) -> dict:
    load_before = _load_average()
    try:
        outcome = run_once(variant, script, steps, script_args, folder, options, backend)
    except RuntimeError as exc:
        if UPSTREAM_SHUTDOWN_ABORT not in str(exc):
            raise
        print(f"  {variant}: gloo aborted at exit, again", flush=True)
        outcome = run_once(variant, script, steps, script_args, folder, options, backend)
    figures = step_figures(outcome["ranks"], min(options.warmup, steps // 2), first)
    record = {"round": round_number + 1, **figures, "load_before": load_before,
              "load_after": _load_average(), "proc": outcome["proc"], "stages": outcome["stages"],
              "rank_policies": sorted({rank["policy"] for rank in outcome["ranks"]}),
              "rank_nice": sorted({rank["nice"] for rank in outcome["ranks"]})}
    stages = outcome["stages"]
    print(f"  {model} {load} round {record['round']} {variant:<13} steady {figures['steady_mean'] * 1e3:7.3f} ms"
          f"  first {first} {figures['first_mean'] * 1e3:7.3f} ms  (load {load_before} -> "
          f"{record['load_after']}; wall {stages['wall']:.1f} s: torch imported {stages['to_imported']:.1f},"
          f" first step {stages['to_first_step']:.1f}, steps {stages['steps']:.1f},"
          f" exit after {stages['after_steps']:.1f})", flush=True)
    return record


# ---- report -------------------------------------------------------------------------------------


def _ratio_rows(block: dict, figure: str) -> list[str]:
    runs = block["runs"]
    bare = [run[figure] for run in runs["bare"]]
    rows = []
    for variant in runs:
        values = [run[figure] for run in runs[variant]]
        paired = [value / base for value, base in zip(values, bare, strict=True)]
        rows.append(f"| {variant} | {statistics.median(values) * 1e3:.3f} | "
                    f"{statistics.median(values) / statistics.median(bare):.3f} | {statistics.median(paired):.3f} | "
                    + ", ".join(f"{value * 1e3:.2f}" for value in values) + " |")
    return rows


def print_block(block: dict) -> None:
    load = block["load"] + (f" ({block['background']})" if block["background"] else "")
    print(f"\n### {block['model']}, {load}: {block['steps']} steps, {len(block['runs']['bare'])} rounds")
    for figure, title in (("steady_mean", "steady mean step ms (after warm-up)"),
                          ("first_mean", f"mean of the first {block['first']} steps, ms")):
        print(f"\n{title}\n")
        print("| variant | median | ratio of medians | median of per-round ratios | per round |")
        print("|---|---|---|---|---|")
        for row in _ratio_rows(block, figure):
            print(row)
    print("\nRankwatch's processes and threads (rankwatch variant, median over rounds; per process)\n")
    print("| process/thread | CPU s per s | voluntary switches/s (wake-ups) | preempted/s |")
    print("|---|---|---|---|")
    threads: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for run in block["runs"]["rankwatch"]:
        for key, entry in run["proc"]["threads"].items():
            for name, value in entry.items():
                threads[key][name].append(value)
    for key, entry in sorted(threads.items()):
        print(f"| {key} | {statistics.median(entry['cpu_per_s']):.4f} | "
              f"{statistics.median(entry['voluntary_per_s']):.1f} | {statistics.median(entry['nonvoluntary_per_s']):.1f} |")
    bare_threads: dict[str, list[float]] = defaultdict(list)
    for run in block["runs"]["bare"]:
        for key, entry in run["proc"]["threads"].items():
            bare_threads[key].append(entry["nonvoluntary_per_s"])
    if "rank/main" in bare_threads:  # preempted/s of the training thread: what wake-ups cost it
        print(f"| (bare) rank/main, for comparison | | | {statistics.median(bare_threads['rank/main']):.1f} |")
    cpu = [run["proc"].get("root_cpu_per_s") for run in block["runs"]["rankwatch"]]
    startup = [run["proc"].get("root_startup_cpu_s") for run in block["runs"]["rankwatch"]]
    seconds = [run["proc"].get("root_seconds") for run in block["runs"]["rankwatch"]]
    if all(value is not None for value in cpu + startup):
        print(f"\nrunner CPU: {statistics.median(cpu):.4f} s per s of run (runs of ~{statistics.median(seconds):.0f} s:"
              f" {', '.join(f'{value:.4f}' for value in cpu)}); in its first seconds: "
              f"{', '.join(f'{value:.2f} s' for value in startup)}")
    for run in block["runs"]["rankwatch"][:3]:
        timeline = ", ".join(f"{t:.0f}s: {cpu:.2f}" for t, cpu in run["proc"].get("root_timeline", []))
        print(f"runner CPU seconds per sampling period from its start (ranks seen at "
              f"{run['proc'].get('ranks_seen_at')} s): {timeline}")
    policies = {variant: sorted({policy for run in block["runs"][variant] for policy in run["rank_policies"]})
                for variant in block["runs"]}
    runner_policy = sorted({policy for run in block["runs"]["rankwatch"]
                            for policy in run["proc"]["policies"].get("runner", [])})
    print(f"scheduling: ranks {policies}; runner policy numbers {runner_policy} (0 normal, 3 batch)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--nproc", type=int, default=2,
                        help="ranks (2; 1 on a 2-core machine keeps a core more than ranks)")
    parser.add_argument("--models", default="ddp,gpt",
                        help="ddp, gpt (CPU, gloo) or gpu (one CUDA GPU per rank, NCCL), comma-separated")
    parser.add_argument("--loads", default="quiet,busy", help="quiet, busy or both (comma-separated)")
    parser.add_argument("--steps", type=int, default=3000, help="optimizer steps of the ddp model")
    parser.add_argument("--gpt-steps", type=int, default=400, help="optimizer steps of the gpt model")
    parser.add_argument("--first", type=int, default=1000, help="the early window, in steps")
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument("--ddp-width", type=int, default=512)
    parser.add_argument("--gpt-width", type=int, default=64)
    parser.add_argument("--gpt-layers", type=int, default=2)
    parser.add_argument("--gpt-accumulate", type=int, default=4, help="micro-batches per optimizer step")
    parser.add_argument("--gpt-context", type=int, default=32, help="tokens per sequence")
    parser.add_argument("--gpu-steps", type=int, default=400, help="optimizer steps of the gpu model")
    parser.add_argument("--gpu-width", type=int, default=768)
    parser.add_argument("--gpu-layers", type=int, default=6)
    parser.add_argument("--gpu-context", type=int, default=256)
    parser.add_argument("--gpu-batch", type=int, default=16)
    parser.add_argument("--load-workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--sample-every", type=float, default=1.0, help="/proc monitor period, seconds")
    parser.add_argument("--startup-seconds", type=float, default=5.0)
    parser.add_argument("--timeout", type=float, default=600.0, help="per run, seconds")
    parser.add_argument("--deadline", type=float, default=float("inf"),
                        help="start no run after this many seconds; report the whole rounds done by then")
    parser.add_argument("--json", type=Path, help="save every raw figure here")
    parser.add_argument("--variants", default=",".join(VARIANTS),
                        help="which of bare, rankwatch, no-instrument to run (bare and rankwatch at least)")
    options = parser.parse_args()
    options.variants = tuple(variant.strip() for variant in options.variants.split(",") if variant.strip())
    if not {"bare", "rankwatch"} <= set(options.variants) <= set(VARIANTS):
        parser.error(f"--variants: bare and rankwatch, and optionally no-instrument (got {options.variants})")

    print(f"{os.cpu_count()} cores, load average {_load_average()} at start, python {sys.version.split()[0]}",
          flush=True)
    blocks = []
    deadline = time.monotonic() + options.deadline
    with tempfile.TemporaryDirectory(prefix="rw-job-bench-", dir="/tmp") as folder:
        for model in options.models.split(","):
            blocks.extend(run_blocks(model.strip(), options, Path(folder), deadline))
    for block in blocks:
        if block["runs"]["bare"]:
            print_block(block)
        else:
            print(f"\n### {block['model']}, {block['load']}: no whole round before the deadline")
    print(f"\nload average at the end: {_load_average()}")
    if options.json:
        options.json.write_text(json.dumps({"options": {k: str(v) for k, v in vars(options).items()},
                                            "blocks": blocks}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
