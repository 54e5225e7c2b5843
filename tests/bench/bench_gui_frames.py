"""Frame time of the monitor's charts with long histories while many ranks stream.

    .venv/bin/python tests/bench/bench_gui_frames.py [--seconds 8] [--repeats 3] [--no-hover]

For each history length (10k and 1M points), the real ``MonitorPanel`` (1600x1000,
offscreen) attaches to the real runner in another process with fake ranks
(``tests/gui/live_run.py serve``: its hub, store and socket are real) that streams 64 ranks at 10 Hz (loss, step time, data
wait, samples/s and process samples for every rank: 64 curves on each of six
charts). Before streaming starts, 16 of the loss curves get a history of that
length. A frame is what the chart timer does when new points arrived, plus painting:
``ChartGrid.refresh()`` (min/max decimation of the visible range, ``setData``, range
following) and the paint of what changed (posted events sent at once); frames are
drawn as soon as new data is in the model, with the socket, the model and the
other timers served by the event loop between them. With the hover readout on (the
default; ``--no-hover`` turns it off) the cursor rests over the loss chart, so every
frame also finds each of its 64 curves' point at the cursor and rewrites the readout.
Reported: mean / median / p95 frame time, frames per second (1000 / mean) and the
ratio of 1M to 10k; also the GUI thread's CPU time per frame (``thread_time``) and the
frame rate it allows, which a machine shared with other jobs disturbs far less than the
wall-clock time (a frame waiting for a core counts in the one, not in the other).

``--baseline`` also times plain pyqtgraph drawing the same 16 curves undecimated
(100k points each), the cost the decimation avoids.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
LIVE_RUN = REPO_ROOT / "tests" / "gui" / "live_run.py"
sys.path.insert(0, str(REPO_ROOT))

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import numpy as np  # noqa: E402
from PySide6.QtCore import QElapsedTimer, QTimer  # noqa: E402
from PySide6.QtWidgets import QApplication  # noqa: E402

from gui.widgets.monitor_panel import MonitorPanel  # noqa: E402
from rankwatch import protocol  # noqa: E402

RANKS = 64
RATE_HZ = 10
LONG_CURVES = 16
SIZE = (1600, 1000)


def wait(app: QApplication, predicate, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError("timed out")
        app.processEvents()
        time.sleep(0.005)


def run_case(app: QApplication, history: int, seconds: float, hover: bool = True) -> dict:
    home = tempfile.mkdtemp(prefix="rw-bench-")
    os.environ["RANKWATCH_HOME"] = home
    sockets = tempfile.mkdtemp(prefix="rwb-", dir="/tmp")
    runner = subprocess.Popen(
        [sys.executable, str(LIVE_RUN), "serve", "--ranks", str(RANKS), "--rate", str(RATE_HZ),
         "--start-step", str(history)],
        stdout=subprocess.PIPE, env={**os.environ, "RANKWATCH_HOME": home, "RANKWATCH_SOCKET_DIR": sockets})
    try:
        info = json.loads(runner.stdout.readline())
        panel = MonitorPanel()
        panel.resize(*SIZE)
        panel.show()
        panel.charts.timer.stop()  # frames are driven below, back to back
        panel.attach(info["run_id"])
        wait(app, lambda: panel.model.history_done, 20)
        model = panel.model
        steps = np.arange(history, dtype=np.float64)
        t0 = time.time() - history * 0.1
        rng = np.random.default_rng(0)
        for rank in range(LONG_CURVES):
            values = 2.3 * np.exp(-steps / history * 4) + 0.05 * rng.random(history)
            model.append_points(protocol.LOSS, rank, steps, t0 + steps * 0.1, values)
        wait(app, lambda: len(model.series(protocol.LOSS)) == RANKS, 20)
        charts = panel.charts
        charts.refresh()
        loss_chart = charts.charts[protocol.LOSS]
        if hover:
            (x_low, x_high), (y_low, y_high) = loss_chart.view_box.viewRange()
            loss_chart.show_readout_at(x_low + 0.7 * (x_high - x_low), (y_low + y_high) / 2)
        frame_ms: list[float] = []
        frame_cpu_ms: list[float] = []
        readout_frames = [0]
        points: list[int] = []
        clock = QElapsedTimer()
        warmup_until = time.monotonic() + 2.0
        stop_at = warmup_until + seconds
        messages_before = [0]

        seen = [model.points_total]

        def frame() -> None:
            now = time.monotonic()
            if now >= stop_at:
                app.quit()
                return
            if model.points_total == seen[0]:
                return  # nothing new since the last frame: the chart timer would draw nothing
            seen[0] = model.points_total
            cpu_started = time.thread_time_ns()
            clock.start()
            drawn = charts.refresh()
            # Paint what changed, as the event loop would (posted scene updates, then the paint).
            for _ in range(3):
                QApplication.sendPostedEvents()
            elapsed = clock.nsecsElapsed() / 1e6
            cpu = (time.thread_time_ns() - cpu_started) / 1e6
            if now >= warmup_until:
                readout_frames[0] += hover and not loss_chart.readout.isHidden()
                if not frame_ms:
                    messages_before[0] = panel.link.messages_received
                frame_ms.append(elapsed)
                frame_cpu_ms.append(cpu)
                points.append(drawn)

        driver = QTimer()
        driver.setInterval(2)
        driver.timeout.connect(frame)
        driver.start()
        app.exec()
        driver.stop()
        messages = panel.link.messages_received - messages_before[0]
        long_points = len(model.series(protocol.LOSS)[0])
        readout_shown = f"{readout_frames[0]}/{len(frame_ms)} frames" if hover else "off"
        panel.detach()
        panel.close()
        panel.deleteLater()
        app.processEvents()
        mean = statistics.fmean(frame_ms)
        return {"history": history, "hover": hover, "readout_shown": readout_shown,
                "long_curve_points": long_points, "frames": len(frame_ms),
                "mean_ms": mean, "median_ms": statistics.median(frame_ms),
                "cpu_mean_ms": statistics.fmean(frame_cpu_ms), "fps_by_cpu": 1000.0 / statistics.fmean(frame_cpu_ms),
                "p95_ms": float(np.percentile(frame_ms, 95)), "fps": 1000.0 / mean,
                "points_per_frame": int(np.mean(points)), "updates_per_s": messages / seconds}
    finally:
        runner.terminate()
        runner.wait(5)


def baseline(app: QApplication, points: int = 100_000, curves: int = LONG_CURVES, frames: int = 10) -> float:
    """Plain pyqtgraph: ``curves`` undecimated curves of ``points``; returns fps."""
    import pyqtgraph as pg

    widget = pg.PlotWidget()
    widget.resize(800, 330)
    widget.show()
    x = np.arange(points, dtype=np.float64)
    items = [widget.plot(x, np.sin(x / 1000 + i) + 0.1 * np.random.random(points), pen=pg.mkPen(width=1))
             for i in range(curves)]
    app.processEvents()
    started = time.perf_counter()
    for _ in range(frames):
        for i, item in enumerate(items):
            item.setData(x, np.sin(x / 1000 + i) + 0.1 * np.random.random(points))
        widget.viewport().repaint()
    fps = frames / (time.perf_counter() - started)
    widget.close()
    return fps


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=8.0, help="measured seconds per run (after 2 s warm-up)")
    parser.add_argument("--repeats", type=int, default=3, help="runs per history length (median reported)")
    parser.add_argument("--histories", default="10000,1000000")
    parser.add_argument("--baseline", action="store_true", help="also time undecimated pyqtgraph")
    parser.add_argument("--no-hover", dest="hover", action="store_false",
                        help="without the hover readout over the loss chart")
    args = parser.parse_args()
    app = QApplication.instance() or QApplication([])
    results: dict[int, list[dict]] = {}
    for _ in range(args.repeats):
        for history in (int(h) for h in args.histories.split(",")):
            result = run_case(app, history, args.seconds, args.hover)
            results.setdefault(history, []).append(result)
            print(json.dumps({k: round(v, 2) if isinstance(v, float) else v for k, v in result.items()}), flush=True)
    print()
    print("| history per long curve | frames | mean ms | median ms | p95 ms | fps (1000/mean) | points/frame | updates/s |")
    print("|---|---|---|---|---|---|---|---|")
    summary = {}
    for history, runs in results.items():
        best = sorted(runs, key=lambda r: r["mean_ms"])[len(runs) // 2]  # the median run
        summary[history] = best
        print(f"| {history:,} | {best['frames']} | {best['mean_ms']:.1f} | {best['median_ms']:.1f} | "
              f"{best['p95_ms']:.1f} | {best['fps']:.0f} | {best['points_per_frame']:,} | {best['updates_per_s']:.1f} |")
    histories = sorted(summary)
    if len(histories) >= 2:
        ratio = summary[histories[-1]]["mean_ms"] / summary[histories[0]]["mean_ms"]
        print(f"\nframe time {histories[-1]:,} / {histories[0]:,}: {ratio:.2f}x (target <= 1.2x); "
              f"fps at {histories[-1]:,}: {summary[histories[-1]]['fps']:.0f} (target >= 30)")
    if args.baseline:
        print(f"\nundecimated pyqtgraph, {LONG_CURVES} curves x 100k points: {baseline(app):.1f} fps")
    return 0


if __name__ == "__main__":
    sys.exit(main())
