"""Frame time of the chart grid with the median and p10-p90 band across many ranks (offscreen).

A model holding 2,000 steps of loss for each rank count; then ``--frames`` frames, each after one
new step of every rank. The band is recomputed at most every ``BAND_SECONDS``: the other frames
draw the band and the ranks that stand out only. ``--every-frame`` recomputes it each frame (the
worst case); ``--every-rank`` draws each rank's own curve instead (up to 128).

Band frames (a chart on show recomputed its band: ``MetricChart.band_recomputed``) are reported
apart from the others, and each frame is split into ``refresh`` (the band and the curves computed
and handed to the items) and ``paint`` (Qt drawing them, in ``processEvents``).

    QT_QPA_PLATFORM=offscreen .venv/bin/python tests/bench/bench_band_frames.py [--ranks 64,1024]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "runner" / "worker_path"))

from PySide6.QtWidgets import QApplication

from gui.charts.grid import ChartGrid
from gui.models.monitor import MonitorModel

T0 = 1_700_000_000.0
STEPS = 2000


NAMES = ("loss", "step_time", "samples_per_s", "data_wait", "grad_norm")
"""The metrics of ``--metrics N``: one chart each."""


@dataclass(frozen=True)
class Frame:
    refresh_ms: float
    paint_ms: float
    band: bool
    """A chart on show recomputed its band in this frame."""

    @property
    def total_ms(self) -> float:
        return self.refresh_ms + self.paint_ms


def loss_update(ranks: int, first: int, steps: int, metrics: int = 1) -> dict:
    return {"type": "update", "v": 1, "metrics": [[rank, T0 + step, step, name, 2.0 - step / STEPS + 0.01 * rank,
                                                   "auto"] for step in range(first, first + steps)
                                                  for rank in range(ranks) for name in NAMES[:metrics]]}


def frames(app: QApplication, ranks: int, count: int, every_frame: bool, every_rank: bool, metrics: int = 1,
           interval: float = 0.0) -> list[Frame]:
    model = MonitorModel()
    model.apply(loss_update(ranks, 0, STEPS, metrics))
    grid = ChartGrid(model, refresh_hz=1)
    grid.every_rank.setChecked(every_rank)
    grid.resize(1300, 900)
    grid.show()
    app.processEvents()
    grid.refresh(force=True)
    app.processEvents()
    result = []
    for index in range(count):
        model.apply(loss_update(ranks, STEPS + index, 1, metrics))
        if interval:
            time.sleep(interval)
        if every_frame:
            for chart in grid.charts.values():
                chart._band_at = 0.0
        started = time.perf_counter()
        grid.refresh()
        refreshed = time.perf_counter()
        app.processEvents()
        painted = time.perf_counter()
        band = any(chart.band_recomputed for chart in grid.charts.values() if chart.isVisible())
        result.append(Frame(1000.0 * (refreshed - started), 1000.0 * (painted - refreshed), band))
    grid.close()
    return result


def summary(times: list[float]) -> str:
    if not times:
        return "none"
    ordered = sorted(times)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return f"{len(times)} frames, median {statistics.median(times):.1f} / p95 {p95:.1f} / max {max(times):.1f} ms"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ranks", default="64,1024")
    parser.add_argument("--frames", type=int, default=15)
    parser.add_argument("--every-frame", action="store_true", help="recompute the band every frame")
    parser.add_argument("--every-rank", action="store_true", help="every rank's curve, no band (<= 128 ranks)")
    parser.add_argument("--metrics", type=int, default=1, help=f"charts, 1-{len(NAMES)}: {', '.join(NAMES)}")
    parser.add_argument("--interval", type=float, default=0.0,
                        help="seconds between frames (0.05: a live run's 20 a second, the band due once a second)")
    args = parser.parse_args()
    app = QApplication([])
    for ranks in (int(text) for text in args.ranks.split(",")):
        result = frames(app, ranks, args.frames, args.every_frame, args.every_rank, args.metrics, args.interval)
        times = [frame.total_ms for frame in result]
        print(f"{ranks:5d} ranks: median {statistics.median(times):.1f} ms, max {max(times):.1f} ms; "
              f"per frame {[round(t) for t in times]}")
        for label, kept in (("band frames", [f for f in result if f.band]),
                            ("other frames", [f for f in result if not f.band])):
            print(f"      {label}: {summary([f.total_ms for f in kept])}; "
                  f"refresh {summary([f.refresh_ms for f in kept]).split(', ', 1)[-1]}; "
                  f"paint {summary([f.paint_ms for f in kept]).split(', ', 1)[-1]}")


if __name__ == "__main__":
    main()
