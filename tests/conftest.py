"""Shared test setup: every test gets its own Rankwatch home, and Qt runs offscreen.

``RANKWATCH_HOME`` points config, data (the run store) and run folders at a fresh
temporary folder, so tests never touch the user's real profiles or runs, and tests
running side by side never see each other's records. Sockets get a short private
folder of their own (Unix socket paths must stay under ~100 bytes).
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import pytest

pytest_plugins = ["tests.small_disks"]  # the ``small_disk`` fixture of the full-disk tests

REPO_ROOT = Path(__file__).resolve().parent.parent
PYTHON = sys.executable

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")


@pytest.fixture(autouse=True)
def rankwatch_home(tmp_path_factory, monkeypatch) -> Path:
    home = tmp_path_factory.mktemp("rankwatch-home")
    sockets = Path(tempfile.mkdtemp(prefix="rw-", dir="/tmp"))
    monkeypatch.setenv("RANKWATCH_HOME", str(home))
    monkeypatch.setenv("RANKWATCH_SOCKET_DIR", str(sockets))
    monkeypatch.delenv("RANKWATCH_STORE", raising=False)
    return home
