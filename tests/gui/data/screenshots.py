"""Take the README's screenshots from real runs: ``python tests/gui/data/screenshots.py [SHOT ...]``.

Shots (``assets/screenshots/``), the window under Xvfb at 1600x1000 unless named:

* ``launch-panel.png``: the Launch tab with the bundled example profile;
* ``live-run.png``: a live 8-rank CPU/gloo job (``tests/gui/data/logged_train.py``) that
  reports ``lr`` and ``grad_norm`` with ``rankwatch.log``: their charts, 8 curves each, and
  the hover readout over ``grad_norm``; below, the rank table with where each rank's step
  goes (rank 7 sleeps longest, in ``rest``, the others wait for it in ``comm``) and the
  bottleneck verdict; ``live-run-1280x720.png``: the same at 1280x720;
* ``failure.png``: a real failing run (``tests/scripts/diag_exception.py``, 2 ranks; rank 1
  raises) with its Diagnosis tab;
* ``stacks.png``: a real hang (``tests/scripts/diag_hang.py``, 2 ranks, stall timeout 5 s)
  watched live, the Stacks tab showing the stall's capture;
* ``history.png``: the History tab after those runs, the loss of two runs overlaid.

Xvfb, ImageMagick's ``import`` and Qt's xcb libraries must be installed
(``/work/shared/tools/screenshot`` installs them). Everything runs in one throwaway
``RANKWATCH_HOME``; jobs are started with the real
``rankwatch run`` (CPU, gloo). ``window RUN_ID TAB WIDTHxHEIGHT [HOVER_CHART]`` is the part
that runs under Xvfb: the main window attached to a run, on the given bottom tab. Runs
left going are stopped (SIGINT to their runner, by pid) once their pictures are taken.
Takes several minutes on two busy cores.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO))
OUT = REPO / "assets" / "screenshots"
LOGGED_TRAIN = REPO / "tests" / "gui" / "data" / "logged_train.py"
SCRIPTS = REPO / "tests" / "scripts"
FULL, SMALL = (1600, 1000), (1280, 720)


# ---- under Xvfb ---------------------------------------------------------------------------

def _window(size: tuple[int, int]):
    from PySide6.QtWidgets import QApplication

    from gui.main_window import MainWindow, apply_color_scheme

    app = QApplication(["rankwatch"])
    app.setApplicationName("Rankwatch")
    apply_color_scheme(app, "light")
    main = MainWindow(initial_profile="example")
    main.move(0, 0)
    main.resize(*size)
    main.show()
    return app, main


def _ready_after(app, milliseconds: int) -> None:
    """Tell the driver the window is ready to be photographed (it waits for this file)."""
    from PySide6.QtCore import QTimer

    ready = os.environ.get("SHOT_READY_FILE")
    if ready:
        QTimer.singleShot(milliseconds, lambda: Path(ready).write_text("ready"))


def launch_window(size: tuple[int, int]) -> int:
    app, _main = _window(size)
    _ready_after(app, 6000)  # the interpreter probe answers
    return app.exec()


def window(run_id: int, tab: str, size: tuple[int, int], hover_chart: str | None, log_chart: str | None) -> int:
    from PySide6.QtCore import QPointF, QTimer
    from PySide6.QtGui import QCursor

    app, main = _window(size)
    if tab == "history":
        main.tabs.setCurrentWidget(main.history)
        QTimer.singleShot(2500, lambda: (main.history.select_runs([run_id, run_id - 1]),
                                         main.history.overlay([run_id, run_id - 1]),
                                         main.history.overlay_chart.set_log_y(True)))
        _ready_after(app, 5000)
        return app.exec()
    main._on_open_run_requested(run_id)

    def arrange() -> None:
        monitor = main.monitor
        if log_chart:
            monitor.charts.charts[log_chart].set_log_y(True)
        if tab == "diagnosis":
            monitor.failure_banner.details_button.setChecked(True)
        elif tab == "stacks":
            monitor.show_tab(monitor.stacks_view)
        else:
            monitor.show_tab(monitor.rank_table)

    def hover() -> None:
        """Put the real pointer over the chart (X11 moves it), as a person hovering does."""
        charts = main.monitor.charts
        chart = charts.charts.get(hover_chart or "")
        if chart is not None and not chart.is_empty:
            (x_low, x_high), (y_low, y_high) = chart.view_box.viewRange()
            # Near the top: the readout opens below the cursor and stays over the charts, not
            # over the rank table's phase bars and verdict.
            point = QPointF(x_low + 0.62 * (x_high - x_low), y_low + 0.92 * (y_high - y_low))
            widget_point = chart.plot_widget.mapFromScene(chart.view_box.mapViewToScene(point))
            QCursor.setPos(chart.plot_widget.viewport().mapToGlobal(widget_point))
            chart.show_readout_at(point.x(), point.y())

    QTimer.singleShot(2500, arrange)
    if hover_chart:
        QTimer.singleShot(4500, hover)
    _ready_after(app, 6000)
    return app.exec()


# ---- driving the runs ------------------------------------------------------------------------

def _env(home: Path) -> dict[str, str]:
    return dict(os.environ, RANKWATCH_HOME=str(home), RANKWATCH_SOCKET_DIR=tempfile.mkdtemp(prefix="rw-", dir="/tmp"),
                PYTHONPATH=str(REPO))


def _store(home: Path):
    from runner.store.store import RunStore

    return RunStore(home / "data" / "runs.db", readonly=True)


def _run(env: dict[str, str], *args: str, timeout: float = 600) -> None:
    subprocess.run([sys.executable, "-m", "runner", "run", "--plain", *args], env=env, cwd=str(REPO),
                   capture_output=True, timeout=timeout)


def _detach(env: dict[str, str], *args: str) -> dict:
    done = subprocess.run([sys.executable, "-m", "runner", "run", "--detach", "--json", *args], env=env,
                          cwd=str(REPO), capture_output=True, text=True, timeout=120, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def _wait(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(1.0)


def _stop(pid: int, home: Path, run_id: int) -> None:
    try:
        os.kill(pid, signal.SIGINT)
    except ProcessLookupError:
        return
    def ended() -> bool:
        with _store(home) as store:
            return store.stored_run(run_id).ended is not None

    _wait(ended, 120, f"run {run_id} to stop")


def xvfb_shot(out: Path, size: tuple[int, int], command: list[str], env: dict[str, str],
              timeout: float = 180) -> None:
    """The whole screen of an Xvfb of ``size`` once ``command`` says its window is ready (the
    shared screenshot tool's steps, but waiting for the window rather than a fixed time: two
    busy cores can take long to start Qt)."""
    display = f":{150 + os.getpid() % 50}"
    ready = Path(tempfile.mkdtemp()) / "ready"
    xvfb = subprocess.Popen(["Xvfb", display, "-screen", "0", f"{size[0]}x{size[1]}x24"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    log = Path(tempfile.mkdtemp()) / "window.log"
    try:
        time.sleep(1)
        with log.open("w") as output:
            app = subprocess.Popen(command, env={**env, "DISPLAY": display, "QT_QPA_PLATFORM": "xcb",
                                                 "SHOT_READY_FILE": str(ready)}, stdout=output, stderr=output)
            try:
                _wait(lambda: ready.exists() or app.poll() is not None, timeout, f"the window for {out.name}")
                if app.poll() is not None:
                    raise RuntimeError(f"the window for {out.name} exited: {log.read_text()[-2000:]}")
                time.sleep(1.5)
                subprocess.run(["import", "-display", display, "-window", "root", str(out)], check=True)
            finally:
                app.terminate()
                app.wait(10)
    finally:
        xvfb.terminate()
        xvfb.wait(10)
    print(f"saved {out}", flush=True)


def _window_command(run_id: int, tab: str, size: tuple[int, int], hover: str = "", log: str = "") -> list[str]:
    return [sys.executable, str(Path(__file__).resolve()), "window", str(run_id), tab, f"{size[0]}x{size[1]}",
            hover, log]


def shoot_all(selected: set[str]) -> None:
    home = Path(tempfile.mkdtemp(prefix="rw-shot-"))
    env = _env(home)
    if "launch" in selected:
        xvfb_shot(OUT / "launch-panel.png", FULL,
                  [sys.executable, str(Path(__file__).resolve()), "launch-window", "1600x1000"], env)

    # A short finished run to compare with, then the live 8-rank one.
    _run(env, "--nproc-per-node", "2", str(LOGGED_TRAIN), "--steps", "150", "--pause", "0")
    # Slow steps: a window attaching later replays the history, and (hub, 2026-11) a history
    # chunk over the protocol's 1 MiB line bound is dropped by the GUI's link.
    live = _detach(env, "--nproc-per-node", "8", str(LOGGED_TRAIN), "--steps", "1200", "--pause", "0.4")
    live_id = int(live["run_id"])

    def logged_steps() -> bool:
        with _store(home) as store:
            rows = store.metrics(live_id, name="grad_norm")
        return len({row[0] for row in rows}) == 8 and len(rows) >= 8 * 60

    _wait(logged_steps, 600, "8 ranks to log grad_norm")
    if "live" in selected:
        xvfb_shot(OUT / "live-run.png", FULL, _window_command(live_id, "ranks", FULL, "grad_norm", "loss"), env)
        xvfb_shot(OUT / "live-run-1280x720.png", SMALL, _window_command(live_id, "ranks", SMALL, "loss", "loss"),
                  env)
    _stop(int(live["pid"]), home, live_id)

    if "failure" in selected:
        _run(env, "--nproc-per-node", "2", str(SCRIPTS / "diag_exception.py"), timeout=300)
        with _store(home) as store:
            failed = store.runs(limit=1)[0].id
        xvfb_shot(OUT / "failure.png", FULL, _window_command(failed, "diagnosis", FULL), env)

    if "stacks" in selected:
        hang_env = dict(env, DIAG_DIR=tempfile.mkdtemp())
        runner = subprocess.Popen([sys.executable, "-m", "runner", "run", "--plain", "--nproc-per-node", "2",
                                   "--stall-timeout", "5", str(SCRIPTS / "diag_hang.py"), "40"], env=hang_env,
                                  cwd=str(REPO), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            def captured() -> bool:
                with _store(home) as store:
                    runs = store.runs(limit=1)
                    return bool(runs) and runs[0].id > live_id and bool(store.stored_events(runs[0].id, kind="stacks"))

            _wait(captured, 300, "the hang's stack capture")
            with _store(home) as store:
                hang = store.runs(limit=1)[0].id
            xvfb_shot(OUT / "stacks.png", FULL, _window_command(hang, "stacks", FULL), env)
        finally:
            runner.send_signal(signal.SIGINT)
            runner.wait(timeout=120)

    if "history" in selected:
        xvfb_shot(OUT / "history.png", FULL, _window_command(live_id, "history", FULL), env)


def _size(text: str) -> tuple[int, int]:
    width, height = text.split("x")
    return int(width), int(height)


if __name__ == "__main__":
    if sys.argv[1:2] == ["window"]:
        extra = [*sys.argv[5:], "", ""]
        sys.exit(window(int(sys.argv[2]), sys.argv[3], _size(sys.argv[4]), extra[0] or None, extra[1] or None))
    if sys.argv[1:2] == ["launch-window"]:
        sys.exit(launch_window(_size(sys.argv[2])))
    shoot_all(set(sys.argv[1:]) or {"launch", "live", "failure", "stacks", "history"})
