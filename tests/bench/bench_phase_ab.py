"""What each part of the zero-code telemetry costs a whole job: an A/B *within one job*.

Run on demand (not part of the test suite)::

    .venv/bin/python tests/bench/bench_phase_ab.py                       # ~2 min
    .venv/bin/python tests/bench/bench_phase_ab.py --steps 20000 --modes off,min,nosend,full

Why within one job: on a shared 2-core machine, whole runs of the same variant differ
by 10-30 % from one another (``bench_job_overhead.py``: where the ranks' threads land,
the host's other tenants), so run-against-run comparisons cannot resolve a few percent.
Here one real ``rankwatch run`` (runner, hub, store, samplers; 2 ranks, gloo, the DDP
model of ``bench_job_overhead.py``) switches the instrumentation's parts on and off
every ``--phase`` optimizer steps, in a fixed cycle; each phase's mean step time (its
first 25 steps left out) is compared with the ``off`` phase of the same cycle, a few
seconds away. The median of those paired ratios is the figure.

The switches are not in the product: this file copies the checkout's ``runner``
package to a temporary folder and edits the copy's ``rankwatch/_instrument.py``
(string replacements that fail loudly when the code they expect moved), so what runs
is the real code plus a mode check per hook. Modes:

* ``off``: every hook returns at once (the step counter still counts: the phases);
* ``min``: loss, step time, data wait (the hooks), nothing sent, no comm timing;
* ``nosend``: ``min`` plus the step phases and cpu-wait timing (``_phases``);
* ``nocomm``: ``min`` plus sending the step records (encode, socket, the runner's ingest);
* ``full``: everything, as a user gets it.

The Flight Recorder (C++, set at the process group's creation) cannot be switched
within a job; ``RANKWATCH_FLIGHT_RECORDER=0`` in the environment turns it off for all.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_job_overhead as job

REPO = Path(__file__).resolve().parents[2]
SKIP = 25
"""Steps left out at the start of each phase (the previous phase's records still in flight)."""

SWITCHES = r'''
import os as _os
_MODES = _os.environ.get("RW_BENCH_MODES", "full").split(",")
_PHASE = int(_os.environ.get("RW_BENCH_PHASE", "250"))
class _On:
    hooks = send = comm = True
def _set_mode(steps):
    mode = _MODES[(steps // _PHASE) % len(_MODES)]
    _On.hooks = mode != "off"
    _On.send = mode in ("full", "nocomm")
    _On.comm = mode in ("full", "nosend")
_set_mode(0)
'''

EDITS = [
    ("_perf_counter = time.perf_counter\n", "_perf_counter = time.perf_counter\n" + SWITCHES),
    ("        self.optimizer_steps += 1\n",
     "        self.optimizer_steps += 1\n        if not _On.hooks:\n            self.steps += 1\n"
     "            _set_mode(self.steps)\n            return\n"),
    ("        phases, cpu_wait = self.phases.end_step(now, step_time, step + 1)\n",
     "        phases, cpu_wait = self.phases.end_step(now, step_time, step + 1) if _On.comm else (None, None)\n"
     "        self.phases.timing = self.phases.timing and _On.comm\n"),
    ("        self._buffer.put((", "        (self._buffer.put if _On.send else _discard)(("),
    ("        self.steps = step + 1\n", "        self.steps = step + 1\n        _set_mode(self.steps)\n"),
    ("    def backward(tensors, *args, **kwargs):\n",
     "    def backward(tensors, *args, **kwargs):\n        if not _On.hooks:\n"
     "            return original(tensors, *args, **kwargs)\n"),
    ("            phases.on_backward_start(tensors)", "            _On.comm and phases.on_backward_start(tensors)"),
    ("    def __next__(self):\n", "    def __next__(self):\n        if not _On.hooks:\n            return original(self)\n"),
    ("        self.loss.on_step_start(", "        _On.hooks and self.loss.on_step_start("),
    ("def _warn(message: str) -> None:", "def _discard(record):\n    pass\n\n\ndef _warn(message: str) -> None:"),
]


def switchable_copy(folder: Path) -> Path:
    """A copy of this checkout's ``runner`` package whose instrumentation switches by phase."""
    root = folder / "tree"
    shutil.copytree(REPO / "runner", root / "runner", ignore=shutil.ignore_patterns("__pycache__"))
    path = root / "runner" / "worker_path" / "rankwatch" / "_instrument.py"
    text = path.read_text()
    for old, new in EDITS:
        if text.count(old) != 1:
            raise SystemExit(f"bench_phase_ab: _instrument.py changed, cannot place a switch at {old.strip()!r}")
        text = text.replace(old, new)
    path.write_text(text)
    return root


def run(options: argparse.Namespace) -> dict[str, list[float]]:
    folder = Path(tempfile.mkdtemp(prefix="rw-phase-ab-"))
    try:
        root = switchable_copy(folder)
        script = folder / "ddp.py"
        script.write_text(job.DDP_SCRIPT)
        prefix = folder / "result"
        environment = {key: value for key, value in os.environ.items() if not key.startswith("RANKWATCH_")}
        environment.update(OMP_NUM_THREADS="1", RANKWATCH_HOME=str(folder / "home"), PYTHONPATH=str(root),
                           RW_BENCH_MODES=",".join(options.modes), RW_BENCH_PHASE=str(options.phase))
        if os.environ.get("RANKWATCH_FLIGHT_RECORDER"):
            environment["RANKWATCH_FLIGHT_RECORDER"] = os.environ["RANKWATCH_FLIGHT_RECORDER"]
        command = job._command("rankwatch", script, [str(options.steps), str(prefix), str(options.width)],
                               job._free_port())
        done = subprocess.run(command, env=environment, cwd=folder, capture_output=True, text=True)
        if done.returncode:
            raise SystemExit(f"the job failed ({done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
        ranks = [json.loads(Path(f"{prefix}.{rank}").read_text())["durations"] for rank in (0, 1)]
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    per_mode: dict[str, list[float]] = {mode: [] for mode in options.modes}
    cycle = options.phase * len(options.modes)
    for start in range(cycle, options.steps - cycle + 1, cycle):  # the first cycle is warm-up
        for index, mode in enumerate(options.modes):
            begin = start + index * options.phase
            per_mode[mode].append(1000 * statistics.fmean(
                statistics.fmean(durations[begin + SKIP:begin + options.phase]) for durations in ranks))
    return per_mode


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=15000)
    parser.add_argument("--phase", type=int, default=250, help="optimizer steps per phase")
    parser.add_argument("--modes", type=lambda text: text.split(","), default=["off", "min", "nosend", "full"],
                        help="comma-separated, the first is the reference (default off,min,nosend,full)")
    parser.add_argument("--width", type=int, default=512, help="the DDP model's hidden width")
    options = parser.parse_args()
    print(f"load average before: {job._load_average()}", flush=True)
    per_mode = run(options)
    print(f"load average after: {job._load_average()}")
    reference = options.modes[0]
    print(f"{len(per_mode[reference])} cycles of {len(options.modes)} phases x {options.phase} steps; "
          f"ms per step, mean of both ranks; ratio = phase / the {reference} phase of the same cycle")
    print("| mode | median ms | median of paired ratios | per cycle (ms) |")
    print("|---|---|---|---|")
    for mode, values in per_mode.items():
        ratios = [value / base for value, base in zip(values, per_mode[reference], strict=True)]
        print(f"| {mode} | {statistics.median(values):.3f} | {statistics.median(ratios):.3f} | "
              + ", ".join(f"{value:.2f}" for value in values) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
