"""Start the desktop app: ``rankwatch``, ``rankwatch gui [--example | --profile NAME]``.

Without a display there is no window to open: ``rankwatch gui --example`` then runs
the bundled example headless in the terminal instead (so a first try on a server
still shows something), and plain ``rankwatch gui`` says how to get a display and
exits with code 2.

The window follows the system's light or dark colour scheme (Qt 6.5+ reports it
through ``QStyleHints.colorScheme``) and switches when the system does.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Mapping

from gui.gateway.files import RankwatchFiles

APP_ID = "rankwatch"
"""The program name the desktop sees: X11 WM_CLASS instance, Wayland app id (the .desktop file's name)."""
HEADLESS_PLATFORMS = frozenset({"offscreen", "minimal", "minimalegl", "vnc", "eglfs", "linuxfb", "vkkhrdisplay"})
NO_DISPLAY_EXIT = 2


def missing_display_reason(environ: Mapping[str, str] | None = None, platform: str | None = None) -> str | None:
    """Why Qt could not open a window here (e.g. ``DISPLAY is not set``), or ``None`` when it can.

    Only X11 / Wayland systems need a display server; ``QT_QPA_PLATFORM=offscreen``
    (tests) or ``minimal`` needs none.
    """
    environ = os.environ if environ is None else environ
    platform = sys.platform if platform is None else platform
    if not platform.startswith(("linux", "freebsd", "openbsd", "netbsd", "dragonfly", "sunos")):
        return None
    requested = [name.split(":")[0].strip().lower()
                 for name in environ.get("QT_QPA_PLATFORM", "").split(";") if name.strip()]
    has_x11 = bool(environ.get("DISPLAY"))
    has_wayland = bool(environ.get("WAYLAND_DISPLAY"))
    if not requested:
        return None if has_x11 or has_wayland else "DISPLAY is not set"
    for name in requested:
        if name in HEADLESS_PLATFORMS or (name == "xcb" and has_x11) or (name.startswith("wayland") and has_wayland):
            return None
    if all(name.startswith("wayland") for name in requested):
        return "WAYLAND_DISPLAY is not set"
    return "DISPLAY is not set"


def _parse_arguments(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="rankwatch gui",
        description="Open the Rankwatch window: launch torchrun jobs and watch every rank live.")
    choice = parser.add_mutually_exclusive_group()
    choice.add_argument("--example", action="store_true",
                        help="open with the bundled example profile selected "
                             "(without a display: run the example headless)")
    choice.add_argument("--profile", metavar="NAME", help="open with this saved profile selected")
    parser.add_argument("--theme", choices=("system", "light", "dark"), default="system",
                        help="colour scheme (default: follow the system)")
    return parser.parse_args(argv)


def _run_example_headless() -> int:
    """Become `rankwatch run --example` (exec: the GUI process never loads the runner's CLI)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, [sys.executable, "-m", "runner", "run", "--example"])
    return 1  # not reached


def _explain_no_display(reason: str) -> None:
    print(f"No display found ({reason}): the Rankwatch window cannot open here.\n"
          "  To get a window: run it in a desktop session, over SSH with `ssh -X`, "
          "or on a virtual display: `xvfb-run rankwatch`.\n"
          "  Without a window: `rankwatch run PROFILE` shows the job live in the terminal; "
          "`rankwatch gui --example` runs the bundled example headless.", file=sys.stderr)


BROKEN_QT_EXIT = 3
BROKEN_PYSIDE = {"6.12.0"}
"""PySide6 releases that return borrowed references to True/False from ``Signal.emit`` on
CPython < 3.12 (immortal singletons hide it on 3.12+): after a few thousand signals the
interpreter aborts with "bool_dealloc". pyproject.toml excludes them; this catches an
environment where one was installed anyway."""


def broken_qt_binding() -> str | None:
    """Why this environment's PySide6 cannot run the app, or None."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        installed = version("PySide6-Essentials")
    except PackageNotFoundError:
        try:
            installed = version("PySide6")
        except PackageNotFoundError:
            return "PySide6 is not installed: pip install 'PySide6-Essentials!=6.12.0'"
    if installed in BROKEN_PYSIDE and sys.version_info < (3, 12):
        return (f"PySide6 {installed} has a reference-counting bug on Python {sys.version_info.major}."
                f"{sys.version_info.minor} that crashes the app after a few seconds; install another release: "
                f"pip install 'PySide6-Essentials>=6.5,!=6.12.0'")
    return None


def main(argv: list[str] | None = None) -> int:
    """Run the app; returns the exit code.

    Args:
        argv: arguments after ``rankwatch gui`` (default: ``sys.argv[1:]``).
    """
    args = _parse_arguments(list(sys.argv[1:] if argv is None else argv))
    reason = missing_display_reason()
    if reason is not None:
        if args.example:
            print(f"No display found ({reason}): running the bundled example headless instead", flush=True)
            return _run_example_headless()
        _explain_no_display(reason)
        return NO_DISPLAY_EXIT

    broken = broken_qt_binding()
    if broken is not None:
        print(broken, file=sys.stderr)
        return BROKEN_QT_EXIT

    from PySide6.QtCore import QTimer
    from PySide6.QtWidgets import QApplication

    from gui.gateway.profiles import ProfileLibrary

    # Qt is imported only now: a server without a display often lacks libGL too.
    from gui.main_window import (
        MainWindow,
        app_icon,
        app_version,
        apply_color_scheme,
        follow_system_color_scheme,
    )

    # argv[0] names the X11 window class's instance (WM_CLASS "rankwatch", "Rankwatch"): taskbars
    # show it, so it is ours, whatever started the app (`python gui/app.py`, `python -m runner gui`).
    existing = QApplication.instance()
    app = existing if isinstance(existing, QApplication) else QApplication([APP_ID])
    app.setApplicationName("Rankwatch")
    app.setApplicationDisplayName("Rankwatch")
    app.setApplicationVersion(app_version())
    app.setOrganizationName("rankwatch")
    app.setDesktopFileName(APP_ID)
    app.setWindowIcon(app_icon())
    apply_color_scheme(app, args.theme)
    if args.theme == "system":
        follow_system_color_scheme(app)

    window = MainWindow(initial_profile=ProfileLibrary.EXAMPLE if args.example else args.profile)
    window.show()

    # Ctrl-C in the terminal closes the window (asking about a live job like the close button).
    signal.signal(signal.SIGINT, lambda *_: QTimer.singleShot(0, window.close))
    heartbeat = QTimer()
    heartbeat.timeout.connect(lambda: None)  # lets Python run its signal handlers
    heartbeat.start(250)
    return app.exec()


def entry_point() -> None:
    RankwatchFiles.keep_private()  # what Rankwatch writes is private; the user's code keeps the user's umask
    sys.exit(main())


if __name__ == "__main__":
    entry_point()
