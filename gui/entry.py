"""The ``rankwatch`` command: the desktop app with no arguments, otherwise the runner's CLI.

It lives in ``gui`` because only ``gui`` may depend on both sides: the runner never
imports Qt, so the headless CLI works on machines without a display or PySide6.
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] == "gui":
        from gui.app import main as gui_main

        return gui_main(args[1:] if args else [])
    from runner.cli.main import main as runner_main

    return runner_main(args)


def entry_point() -> None:
    sys.exit(main())
