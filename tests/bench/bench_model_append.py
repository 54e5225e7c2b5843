"""The GUI model taking live updates of a big run: one point per series per update.

    QT_QPA_PLATFORM=offscreen .venv/bin/python tests/bench/bench_model_append.py [REPO_ROOT]

Prints the median time of ``MonitorModel.add_metric_rows`` for an update of 256 ranks x 13
series, one point each (what the hub sends ~20 times a second for such a run). ``REPO_ROOT``
(default: this checkout) lets the same script time another tree, side by side.
"""

from __future__ import annotations

import random
import statistics
import sys
import time
from pathlib import Path

ROOT = sys.argv[1] if len(sys.argv) > 1 else str(Path(__file__).resolve().parents[2])
sys.path[:0] = [ROOT, ROOT + "/runner/worker_path"]

from gui.models.monitor import MonitorModel  # noqa: E402

RANKS = 256
NAMES = ["loss", "step_time", "data_wait", "samples_per_s", "comm_wait", "phase/forward", "phase/backward",
         "phase/optimizer", "phase/data", "phase/comm", "phase/h2d", "phase/rest", "phase_clock"]


def main() -> None:
    model = MonitorModel()
    updates = [[[rank, 1000.0 + update * 0.05, update, name, random.random(), "auto"]
                for rank in range(RANKS) for name in NAMES] for update in range(60)]
    times = []
    for rows in updates:
        started = time.perf_counter()
        model.add_metric_rows(rows)
        times.append(time.perf_counter() - started)
    print(f"{ROOT}: median {statistics.median(times[10:]) * 1000:.1f} ms per update of {len(updates[0])} records "
          f"({RANKS} ranks x {len(NAMES)} series, one point each)")


if __name__ == "__main__":
    main()
