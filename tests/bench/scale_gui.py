"""The monitor window on a big live run: its first frame and its frame time (offscreen).

The real ``MonitorPanel`` (1600x1000, ``QT_QPA_PLATFORM=offscreen``) attaches to run
``RUN_ID`` of ``$RANKWATCH_HOME``'s store (a live runner), as the GUI does. First frame:
from ``attach`` to the history replayed into the model and the charts drawn once
(``ChartGrid.refresh()`` and the paint of what changed). Then, for ``--seconds``, a
frame each time new points are in the model, as in ``bench_gui_frames.py``: wall time
and the GUI thread's CPU time per frame. Prints one JSON line.

    QT_QPA_PLATFORM=offscreen python tests/bench/scale_gui.py RUN_ID [--seconds 8]
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import json
import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests" / "bench"))
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from bench_gui_frames import SIZE, wait  # noqa: E402
from PySide6.QtCore import QEvent, QTimer  # noqa: E402
from PySide6.QtWidgets import QApplication  # noqa: E402

from gui.widgets.monitor_panel import MonitorPanel  # noqa: E402
from runner.runstate.messages import HistoryEnd, SnapshotMessage, UpdateMessage  # noqa: E402


class LinkTrace:
    """What the panel's link saw, and when (seconds since ``attach``): a history that does not
    arrive says where it stopped (no snapshot, a replay cut short by a reconnect, no end)."""

    def __init__(self, panel: MonitorPanel, started: float) -> None:
        self.started = started
        self.events: list[tuple[float, str]] = []
        self.updates = 0
        self.update_records = 0
        self.updates_at_end: int | None = None
        self.hub_said: list[str] = []
        """The hub's warnings that it disconnected a subscriber (this one, on an earlier try)."""
        panel.link.subscribed.connect(lambda: self._note("subscribed"))
        panel.link.connection_lost.connect(lambda reason: self._note(f"connection lost: {reason}"))
        panel.link.message_received.connect(self._on_message)

    def _note(self, what: str) -> None:
        self.events.append((round(time.perf_counter() - self.started, 2), what))

    def _on_message(self, message: object) -> None:
        if isinstance(message, UpdateMessage):
            self.updates += 1
            self.update_records += len(message.metrics)
            for event in message.events:
                if "disconnected" in event.message and event.message not in self.hub_said:
                    self.hub_said.append(event.message)
        elif isinstance(message, SnapshotMessage):
            self._note(f"snapshot ({self.updates} updates before)")
        elif isinstance(message, HistoryEnd):
            self.updates_at_end = self.updates
            self._note(f"history_end after {self.updates} updates, {self.update_records} metric records")

    def summary(self) -> dict:
        return {"link_events": self.events, "updates": self.updates, "update_records": self.update_records,
                "hub_said": self.hub_said}


def paint(app: QApplication) -> None:
    """Paint what changed, as the event loop would (posted scene updates, then the paint)."""
    for _ in range(3):
        QApplication.sendPostedEvents()


def close_panel(app: QApplication, panel: MonitorPanel) -> None:
    """Detach and delete the panel while the application still exists, and let the events that
    detaching posts run. Left to the interpreter's exit, the panel (kept alive by its signal
    connections) was deleted after the ``QApplication``: SIGSEGV (-11), with no Python frame."""
    panel.detach()
    panel.close()
    settle_until = time.monotonic() + 0.5
    while time.monotonic() < settle_until:
        app.processEvents()
    panel.deleteLater()
    QApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)


def measure(app: QApplication, run_id: int, seconds: float, history_timeout: float,
            profile_path: str | None = None, history_profile_path: str | None = None,
            charts_from_hub: bool = False) -> dict:
    panel = MonitorPanel()
    if charts_from_hub:  # as before the GUI read the history from the store: the hub replays it
        panel._subscribe = functools.partial(MonitorPanel._subscribe, panel, from_store=False)  # type: ignore[method-assign]
    panel.resize(*SIZE)
    panel.show()
    panel.charts.timer.stop()  # frames are driven below
    started = time.perf_counter()
    trace = LinkTrace(panel, started)
    history_profiler = cProfile.Profile() if history_profile_path else None
    if history_profiler is not None:
        history_profiler.enable()
    panel.attach(run_id)
    try:
        wait(app, lambda: panel.model.history_done, history_timeout)
    except TimeoutError:
        if history_profiler is not None and history_profile_path:
            history_profiler.disable()
            history_profiler.dump_stats(history_profile_path)
        close_panel(app, panel)
        return {"error": f"the history was not in the window after {history_timeout:.0f} s",
                "points_in_model": panel.model.points_total, **trace.summary()}
    history_s = time.perf_counter() - started
    if history_profiler is not None and history_profile_path:
        history_profiler.disable()
        history_profiler.dump_stats(history_profile_path)
    panel.charts.refresh()
    paint(app)
    first_frame_s = time.perf_counter() - started
    model = panel.model
    frame_ms: list[float] = []
    cpu_ms: list[float] = []
    seen = [model.points_total]
    stop_at = time.monotonic() + seconds

    def frame() -> None:
        if time.monotonic() >= stop_at:
            app.quit()
            return
        if model.points_total == seen[0]:
            return
        seen[0] = model.points_total
        cpu_started = time.thread_time_ns()
        wall_started = time.perf_counter_ns()
        if profiler is not None:
            profiler.enable()
        panel.charts.refresh()
        paint(app)
        if profiler is not None:
            profiler.disable()
        frame_ms.append((time.perf_counter_ns() - wall_started) / 1e6)
        cpu_ms.append((time.thread_time_ns() - cpu_started) / 1e6)

    profiler = cProfile.Profile() if profile_path else None
    driver = QTimer()
    driver.setInterval(2)
    driver.timeout.connect(frame)
    driver.start()
    app.exec()
    driver.stop()
    if profiler is not None and profile_path:
        profiler.dump_stats(profile_path)
    ranks = len(model.ranks) if hasattr(model, "ranks") else None
    close_panel(app, panel)
    frame_ms.sort()
    return {"history_s": history_s, "first_frame_s": first_frame_s, "frames": len(frame_ms),
            "frame_mean_ms": statistics.fmean(frame_ms) if frame_ms else None,
            "frame_p95_ms": frame_ms[int(0.95 * (len(frame_ms) - 1))] if frame_ms else None,
            "frame_cpu_ms": statistics.fmean(cpu_ms) if cpu_ms else None, "ranks_seen": ranks,
            "link_events": trace.events}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_id", type=int)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--history-timeout", type=float, default=240.0, help="seconds the history may take")
    parser.add_argument("--profile-frames", metavar="PATH", help="cProfile the frames only (not the history) into PATH")
    parser.add_argument("--profile-history", metavar="PATH",
                        help="cProfile the GUI from attach to the history's end (or the timeout) into PATH")
    parser.add_argument("--charts-from-hub", action="store_true",
                        help="the hub replays the charts' history (the GUI reads it from the store otherwise)")
    args = parser.parse_args()
    app = QApplication.instance() or QApplication([])
    print(json.dumps(measure(app, args.run_id, args.seconds, args.history_timeout, args.profile_frames,
                                 args.profile_history, args.charts_from_hub)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
