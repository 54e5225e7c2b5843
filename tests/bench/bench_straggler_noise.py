"""Stragglers on a busy machine: healthy jobs must name none, a planted one must be named and kept.

Each run is a real ``rankwatch run --plain`` of ``tests/scripts/diag_slow_compute.py`` with 4 ranks
(gloo, CPU) beside ``--busy`` bursty busy loops (``tests/scripts/busy_cpu.py``), in a store of its
own. A healthy run makes its batches on the training thread (``--data-work``), so the load stretches
one rank's data phase, then another's; a planted run gives rank 2 30 % more rows per step. One line
per run: the straggler events (rank, named or withdrawn, at which step) and the summary's straggler
line; then the counts the acceptance asks for.

    .venv/bin/python tests/bench/bench_straggler_noise.py [--healthy 10 --planted 5 --busy 2]
        [--steps 60] [--keep DIR]

``--keep DIR`` keeps each run's store (``DIR/<healthy|planted>-<n>/data/runs.db``) for
``replay_stragglers.py``, which replays its steps through the rule offline.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "runner" / "worker_path"))

from runner.store.store import RunStore  # noqa: E402

SCRIPT = REPO / "tests" / "scripts" / "diag_slow_compute.py"
BUSY = REPO / "tests" / "scripts" / "busy_cpu.py"
COMMON = ["--width", "384", "--data-work", "384", "--steps", "60"]
HEALTHY = [*COMMON, "--batch", "256", "--slow-rank", "-1"]
PLANTED = [*COMMON, "--batch", "2048", "--slow-rank", "2", "--extra", "rows", "--factor", "1.3"]
PLANTED_RANK = 2
NAMED_WITHIN_STEPS = 20


def run_once(args: list[str], busy: int, keep: Path | None = None) -> dict:
    """One job beside ``busy`` busy loops; its straggler events and summary line. ``keep``: the
    run's home, kept; else a temporary one."""
    with contextlib.ExitStack() as stack:
        home = str(keep) if keep is not None else stack.enter_context(tempfile.TemporaryDirectory(prefix="rw-noise-"))
        env = {**os.environ, "RANKWATCH_HOME": home,
               "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "runner" / "worker_path")])}
        loops = [subprocess.Popen([sys.executable, str(BUSY), "--seed", str(seed)]) for seed in range(busy)]
        started = time.monotonic()
        try:
            result = subprocess.run([sys.executable, "-m", "runner", "run", "--plain", "--nproc-per-node", "4",
                                     str(SCRIPT), *args], capture_output=True, text=True, env=env, timeout=600)
        finally:
            for loop in loops:
                loop.kill()
                loop.wait()
        seconds = time.monotonic() - started
        with RunStore(Path(home) / "data" / "runs.db", readonly=True) as store:
            stored = store.stored_events(store.resolve_run_id("last"), kind="straggler")
    events = [(event.rank, bool(event.fields.get("active")), event.fields.get("step")) for event in stored]
    summary_line = None
    for line in result.stderr.splitlines():
        if line.startswith("  straggler:"):
            summary_line = line.strip()
    return {"rc": result.returncode, "seconds": round(seconds, 1), "events": events, "summary": summary_line}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--healthy", type=int, default=10)
    parser.add_argument("--planted", type=int, default=5)
    parser.add_argument("--busy", type=int, default=2)
    parser.add_argument("--steps", type=int, default=60, help="steps of each job")
    parser.add_argument("--keep", type=Path, help="keep each run's store under this folder")
    args = parser.parse_args()
    steps = ["--steps", str(args.steps)]

    def keep(name: str) -> Path | None:
        return args.keep / name if args.keep is not None else None

    clean = kept = 0
    for index in range(args.healthy):
        outcome = run_once([*HEALTHY, *steps], args.busy, keep(f"healthy-{index + 1}"))
        clean += outcome["rc"] == 0 and not outcome["events"] and outcome["summary"] is None
        print(f"healthy {index + 1}: {json.dumps(outcome)}", flush=True)
    for index in range(args.planted):
        outcome = run_once([*PLANTED, *steps], args.busy, keep(f"planted-{index + 1}"))
        named = [event for event in outcome["events"] if event[1]]
        kept += (outcome["rc"] == 0 and outcome["events"] == named[:1] and bool(named)
                 and named[0][0] == PLANTED_RANK and (named[0][2] or 0) <= NAMED_WITHIN_STEPS
                 and outcome["summary"] is not None)
        print(f"planted {index + 1}: {json.dumps(outcome)}", flush=True)
    print(f"healthy runs naming no straggler: {clean} of {args.healthy}; planted straggler named within "
          f"{NAMED_WITHIN_STEPS} steps and kept: {kept} of {args.planted}")
    return 0 if clean == args.healthy and kept == args.planted else 1


if __name__ == "__main__":
    sys.exit(main())
