"""Worker-side tests import ``rankwatch`` from ``runner/worker_path``, the folder workers get.

The folder goes first on ``sys.path`` so the tests exercise exactly the files the
runner puts on the workers' ``PYTHONPATH``, whether or not the project is installed.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

WORKER_PATH = Path(__file__).resolve().parents[2] / "runner" / "worker_path"

if str(WORKER_PATH) not in sys.path:
    sys.path.insert(0, str(WORKER_PATH))


@pytest.fixture
def measured():
    """The real instrumentation installed into the test process (``in_process``); imports torch."""
    from in_process import instrumented

    with instrumented() as measured:
        yield measured
