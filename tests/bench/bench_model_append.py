"""The GUI model taking live updates of a big run: one point per series per update.

    QT_QPA_PLATFORM=offscreen .venv/bin/python tests/bench/bench_model_append.py REPO_ROOT

Prints the median time of ``MonitorModel.add_metric_rows`` for an update of 256 ranks x 13
series, one point each (what the hub sends ~20 times a second for such a run).
"""
import sys, time, random, statistics
sys.path[:0] = [sys.argv[1], sys.argv[1] + "/runner/worker_path"]
from gui.models.monitor import MonitorModel
from rankwatch import protocol
ranks, names = 256, ["loss", "step_time", "data_wait", "samples_per_s", "comm_wait", "phase/forward", "phase/backward",
                     "phase/optimizer", "phase/data", "phase/comm", "phase/h2d", "phase/rest", "phase_clock"]
model = MonitorModel()
rows_per_update = [[[rank, 1000.0 + u * 0.05, u, name, random.random(), "auto"] for rank in range(ranks) for name in names]
                   for u in range(60)]
times = []
for rows in rows_per_update:
    started = time.perf_counter()
    model.add_metric_rows(rows)
    times.append(time.perf_counter() - started)
print(f"{sys.argv[1]}: median {statistics.median(times[10:])*1000:.1f} ms per update of {len(rows_per_update[0])} records "
      f"({ranks} ranks x {len(names)} series, one point each)")
