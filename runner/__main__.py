"""``python -m runner ...``: the headless CLI (the same as ``rankwatch ...`` minus the GUI)."""

from runner.cli.main import entry_point

entry_point()
