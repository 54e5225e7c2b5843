"""Take the README's screenshots from real runs: ``python tests/gui/data/screenshots.py [live|failure|stacks]``.

* ``assets/screenshots/live-run.png``: the bundled example launched from the window (a live run);
* ``assets/screenshots/failure.png``: a real failing run (``tests/scripts/diag_exception.py``,
  2 ranks; rank 1 raises) opened in the window, its banner and the Diagnosis tab;
* ``assets/screenshots/stacks.png``: a real hang (``tests/scripts/diag_hang.py``, 2 ranks,
  stall timeout 5 s) watched live, with the Stacks tab showing the stall's capture.

The jobs run in a throwaway ``RANKWATCH_HOME``; the window is a real one under Xvfb
(``/work/shared/tools/screenshot``). The hang's runner is stopped (SIGINT, by its
pid) once the picture is taken. ``window RUN_ID TAB`` is the part that runs under
Xvfb: the main window, attached to the run, on the given bottom tab.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO))
SCREENSHOT_TOOL = "/work/shared/tools/screenshot"
OUT = REPO / "assets" / "screenshots"


def launch_example_window() -> int:
    """The window with the bundled example, launched as a user would (Ctrl+R) once the
    probe has answered; the live monitor is what the screenshot catches."""
    from PySide6.QtCore import QTimer
    from PySide6.QtWidgets import QApplication

    from gui.main_window import MainWindow, apply_color_scheme

    app = QApplication(sys.argv[:1])
    apply_color_scheme(app, "light")
    main = MainWindow(initial_profile="example")
    main.move(0, 0)
    main.resize(1600, 1000)
    main.show()

    def launch_when_ready() -> None:
        if main.launch_panel.launch_button.isEnabled():
            main.launch_panel.launch_button.click()
        else:
            QTimer.singleShot(250, launch_when_ready)

    QTimer.singleShot(500, launch_when_ready)
    return app.exec()


def window(run_id: int, tab: str) -> int:
    from PySide6.QtCore import QTimer
    from PySide6.QtWidgets import QApplication

    from gui.main_window import MainWindow, apply_color_scheme

    app = QApplication(sys.argv[:1])
    apply_color_scheme(app, "light")
    main = MainWindow(initial_profile="example")
    main.move(0, 0)
    main.resize(1600, 1000)
    main.show()
    main.monitor.attach(run_id)
    main.tabs.setCurrentWidget(main.monitor)

    def arrange() -> None:
        monitor = main.monitor
        if tab == "diagnosis":
            monitor.failure_banner.details_button.setChecked(True)
        else:
            monitor.tabs.setCurrentWidget(monitor.stacks_view)
            total = sum(monitor.splitter.sizes())
            monitor.splitter.setSizes([int(total * 0.62), total - int(total * 0.62)])

    QTimer.singleShot(2500, arrange)
    return app.exec()


def _env(home: Path) -> dict[str, str]:
    return dict(os.environ, RANKWATCH_HOME=str(home), RANKWATCH_SOCKET_DIR=tempfile.mkdtemp(prefix="rw-", dir="/tmp"),
                PYTHONPATH=str(REPO))


def _latest_run(home: Path) -> dict | None:
    from runner.store.store import RunStore

    store_file = home / "data" / "runs.db"
    if not store_file.exists():
        return None
    try:
        with RunStore(store_file, readonly=True) as store:
            runs = store.runs(limit=1)
            return runs[0] if runs else None
    except Exception:
        return None


def _shoot(name: str, env: dict[str, str], run_id: int, tab: str, seconds: int = 9) -> None:
    subprocess.run([SCREENSHOT_TOOL, str(OUT / name), str(seconds), sys.executable, str(Path(__file__).resolve()),
                    "window", str(run_id), tab], env=env, check=True)


def live() -> None:
    """``assets/screenshots/live-run.png``: the bundled example launched from the window."""
    home = Path(tempfile.mkdtemp(prefix="rw-shot-"))
    subprocess.run([SCREENSHOT_TOOL, str(OUT / "live-run.png"), "11", sys.executable, str(Path(__file__).resolve()),
                    "launch-example"], env=_env(home), check=True)


def failure() -> None:
    home = Path(tempfile.mkdtemp(prefix="rw-shot-"))
    env = _env(home)
    subprocess.run([sys.executable, "-m", "runner", "run", "--plain", "--nproc-per-node", "2",
                    str(REPO / "tests" / "scripts" / "diag_exception.py")], env=env, cwd=str(REPO),
                   capture_output=True, timeout=300)
    _shoot("failure.png", env, _latest_run(home)["id"], "diagnosis")


def stacks() -> None:
    home = Path(tempfile.mkdtemp(prefix="rw-shot-"))
    env = _env(home)
    env["DIAG_DIR"] = tempfile.mkdtemp()
    runner = subprocess.Popen([sys.executable, "-m", "runner", "run", "--plain", "--nproc-per-node", "2",
                               "--stall-timeout", "5", str(REPO / "tests" / "scripts" / "diag_hang.py"), "40"],
                              env=env, cwd=str(REPO), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        from runner.store.store import RunStore

        deadline = time.monotonic() + 180
        run = None
        while time.monotonic() < deadline:
            run = _latest_run(home)
            if run is not None:
                with RunStore(home / "data" / "runs.db", readonly=True) as store:
                    if store.events(run["id"], kind="stacks"):
                        break
            time.sleep(0.5)
        _shoot("stacks.png", env, run["id"], "stacks", seconds=10)
    finally:
        runner.send_signal(signal.SIGINT)
        runner.wait(timeout=60)


if __name__ == "__main__":
    if sys.argv[1:2] == ["window"]:
        sys.exit(window(int(sys.argv[2]), sys.argv[3]))
    if sys.argv[1:2] == ["launch-example"]:
        sys.exit(launch_example_window())
    for shot in sys.argv[1:] or ["live", "failure", "stacks"]:
        {"live": live, "failure": failure, "stacks": stacks}[shot]()
