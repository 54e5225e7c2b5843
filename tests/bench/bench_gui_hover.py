"""What the hover readout costs a frame: readout on and off interleaved in one process.

    .venv/bin/python tests/bench/bench_gui_hover.py [--history 1000000] [--blocks 12] [--frames 8]

The real ``MonitorPanel`` (1600x1000, offscreen) holds 64 ranks, 16 of them with a loss
history of ``--history`` points; each frame appends one step for every rank (loss, step
time, data wait, samples/s and a process sample), then does what the chart timer does
(``ChartGrid.refresh()``) and paints. Blocks of ``--frames`` frames alternate (on, off, off,
on, ...) between
the cursor resting over the loss chart (the readout finds every curve's point at the
cursor and redraws when that changed) and no cursor. Reported: the GUI thread's CPU
time per frame (``time.thread_time``) for each block and the medians of both. On a
machine shared with other jobs this A/B is far steadier than two separate runs of
``bench_gui_frames.py``: both halves see the same load.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO_ROOT))
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import numpy as np  # noqa: E402
from PySide6.QtWidgets import QApplication  # noqa: E402

from gui.widgets.monitor_panel import MonitorPanel  # noqa: E402
from rankwatch import protocol  # noqa: E402

RANKS = 64
LONG_CURVES = 16
T0 = 1_700_000_000.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--history", type=int, default=1_000_000, help="points of each long loss curve")
    parser.add_argument("--blocks", type=int, default=12, help="blocks, alternately readout on and off")
    parser.add_argument("--frames", type=int, default=8, help="frames per block")
    args = parser.parse_args()
    app = QApplication.instance() or QApplication([])
    panel = MonitorPanel()
    panel.resize(1600, 1000)
    panel.show()
    app.processEvents()
    model = panel.model
    model.apply({"type": "snapshot", "v": protocol.VERSION, "run": {"id": 1, "status": "running",
                 "world_size": RANKS, "started": T0}, "ranks": [], "nodes": [], "spec": {}})
    steps = np.arange(args.history, dtype=np.float64)
    for rank in range(LONG_CURVES):
        model.append_points(protocol.LOSS, rank, steps, T0 + 0.1 * steps, 2.3 * np.exp(-4 * steps / args.history))
    next_step = [args.history]

    def stream_one_step() -> None:
        step = next_step[0]
        next_step[0] += 1
        t = T0 + 0.1 * step
        metrics = [[rank, t, step, name, value, "auto"] for rank in range(RANKS)
                   for name, value in ((protocol.LOSS, 1.0 + 0.01 * rank), (protocol.STEP_TIME, 0.1),
                                       (protocol.DATA_WAIT, 0.01), (protocol.SAMPLES_PER_SECOND, 100.0))]
        procs = [[t, rank, 100 + rank, 50.0, 1 << 30, 4] for rank in range(RANKS)]
        model.apply({"type": "update", "v": protocol.VERSION, "metrics": metrics, "procs": procs})

    for _ in range(20):
        stream_one_step()
    charts = panel.charts
    charts.timer.stop()
    charts.refresh()
    app.processEvents()
    loss = charts.charts[protocol.LOSS]
    blocks = []
    for block in range(args.blocks):
        hover = block % 4 in (0, 3)  # on, off, off, on, ...: a drift or an order effect cancels
        if hover:
            (x_low, x_high), (y_low, y_high) = loss.view_box.viewRange()
            loss.show_readout_at(x_low + 0.7 * (x_high - x_low), (y_low + y_high) / 2)
        else:
            loss.hide_readout()
        frames = []
        for _ in range(args.frames):
            stream_one_step()
            app.processEvents()
            started = time.thread_time_ns()
            charts.refresh()
            for _ in range(3):
                QApplication.sendPostedEvents()
            app.processEvents()
            frames.append((time.thread_time_ns() - started) / 1e6)
        blocks.append({"readout": hover, "shown": hover and not loss.readout.isHidden(),
                       "cpu_ms": round(statistics.fmean(frames), 2)})
        print(json.dumps(blocks[-1]), flush=True)
    on = [b["cpu_ms"] for b in blocks if b["readout"]]
    off = [b["cpu_ms"] for b in blocks if not b["readout"]]
    print(f"\nhistory {args.history:,}: readout on {statistics.median(on):.1f} ms, off {statistics.median(off):.1f} ms "
          f"GUI-thread CPU per frame (median of {len(on)} blocks each); "
          f"difference {statistics.median(on) - statistics.median(off):+.1f} ms")
    panel.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
