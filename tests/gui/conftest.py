"""Fixtures the GUI tests share."""

from __future__ import annotations

import pytest
from live_run import LiveRun


@pytest.fixture
def live_run():
    """Start a real runner whose ranks are fake workers (``LiveRun``); each is closed after the test."""
    runs: list[LiveRun] = []

    def start(**options) -> LiveRun:
        run = LiveRun(**options).start()
        runs.append(run)
        return run

    yield start
    for run in runs:
        run.close()
