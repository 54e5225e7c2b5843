"""Small tmpfs disks for the full-disk tests: mounted per test, so a disk can really fill.

The tests run as root here and in CI; without the right to mount, a test is skipped and says so.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest


def mount_tmpfs(folder: Path, size: str, mode: str = "0700") -> None:
    """Mount a tmpfs of ``size`` (``"3m"``) on ``folder`` (created if missing), or skip the test."""
    folder.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode={mode}", "tmpfs", str(folder)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here (needs root): {mounted.stderr.strip()}")


def unmount(folder: Path) -> None:
    subprocess.run(["umount", "-l", str(folder)], capture_output=True, check=False)


@pytest.fixture
def small_disk(tmp_path: Path):
    """A 3 MiB tmpfs of the test's own (its path): small enough to fill in a second."""
    folder = tmp_path / "small-disk"
    mount_tmpfs(folder, "3m")
    yield folder
    unmount(folder)
