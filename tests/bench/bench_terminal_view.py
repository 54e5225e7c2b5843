"""The terminal view's cost in the runner: ms of CPU per 100,000 metric records.

`rankwatch run` shows its live table from inside the runner (an in-process subscriber on
the hub's event loop), so every record the hub publishes also passes through the view
(logged keys' newest values, progress marks). Updates are shaped as the hub sends them:
batches of 5,000 rows from 8 ranks, 5 measured series and 2 `rankwatch.log` keys.

    .venv/bin/python tests/bench/bench_terminal_view.py [--records 400000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import io
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "runner" / "worker_path"))

from runner.view.terminal import TerminalView

NAMES = ("loss", "step_time", "data_wait", "samples_per_s", "steps_per_s", "lr", "grad_norm")
BATCH = 5000
RANKS = 8


def updates(records: int) -> list[dict]:
    rows = [[i % RANKS, 1000.0 + i * 1e-4, i // (RANKS * len(NAMES)), NAMES[(i // RANKS) % len(NAMES)], 0.5,
             "log" if NAMES[(i // RANKS) % len(NAMES)] in ("lr", "grad_norm") else "auto"] for i in range(records)]
    return [{"type": "update", "t": 0.0, "metrics": rows[start:start + BATCH]} for start in range(0, records, BATCH)]


def measure(records: int) -> float:
    view = TerminalView(live=False, out=io.StringIO(), err=io.StringIO(), status_every=0)
    view.handle({"type": "snapshot", "run": {"id": 1, "status": "running", "started": 1000.0},
                 "ranks": [{"rank": r, "state": "running"} for r in range(RANKS)], "nodes": []})
    messages = updates(records)
    began = time.process_time()
    for message in messages:
        view.handle(message)
    return (time.process_time() - began) * 1000 * 100_000 / records


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=400_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    costs = sorted(measure(args.records) for _ in range(args.repeat))
    for cost in costs:
        print(f"{cost:.1f} ms CPU per 100k records")
    print(f"median {costs[len(costs) // 2]:.1f} ms per 100k records over {args.repeat} runs "
          "(target <= 50: at most 5% of a core at the hub's 100k records/s)")


if __name__ == "__main__":
    main()
