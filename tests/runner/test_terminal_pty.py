"""The live table on a real 80x24 terminal (a tmux pane) with eight ranks: every step and loss
legible, and no column that is all "–"."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.runner.terminal_in_pty import FIRST_STEP, RANKS, STEPS, loss_of

REPO = Path(__file__).resolve().parents[2]
CHILD = Path(__file__).with_name("terminal_in_pty.py")

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None and os.environ.get("CI") != "true",
                                reason="needs tmux (apt-get install tmux; .ci/run installs it, and CI fails without)")


def tmux(server: str, *args: str) -> str:
    return subprocess.run(["tmux", "-L", server, *args], check=True, capture_output=True, text=True).stdout


def screen_of_the_view(tmp_path: Path, columns: int, lines: int) -> str:
    """The pane's text once the view drew its last frame, in a tmux pane of ``columns`` x ``lines``."""
    server = f"rankwatch-test-{os.getpid()}"
    done = tmp_path / "drawn"
    env_path = os.pathsep.join([str(REPO), str(REPO / "runner" / "worker_path"), os.environ.get("PYTHONPATH", "")])
    command = (f"cd {REPO} && env -u COLUMNS -u LINES PYTHONPATH={env_path} "
               f"{sys.executable} {CHILD} {tmp_path} {done} 2>{tmp_path / 'stderr'}")
    tmux(server, "-f", "/dev/null", "new-session", "-d", "-x", str(columns), "-y", str(lines), command)
    try:
        deadline = time.monotonic() + 60
        while not done.exists():
            if time.monotonic() > deadline:
                raise AssertionError(f"the view drew no last frame: {(tmp_path / 'stderr').read_text()}\n"
                                     + tmux(server, "capture-pane", "-p"))
            time.sleep(0.1)
        return tmux(server, "capture-pane", "-p")
    finally:
        subprocess.run(["tmux", "-L", server, "kill-server"], capture_output=True)


def test_eight_ranks_at_80x24_show_whole_steps_and_losses_and_no_column_of_dashes(tmp_path):
    screen = screen_of_the_view(tmp_path, 80, 24)
    lines = screen.splitlines()
    assert all(len(line) <= 80 for line in lines)
    header = next((line for line in lines if line.split()[:2] == ["rank", "state"]), None)
    assert header is not None, screen
    rows = {int(line.split()[0]): line.split() for line in lines if re.match(r"\s*\d+\s+running\s", line)}
    assert sorted(rows) == list(range(RANKS)), screen
    last_step = FIRST_STEP + STEPS - 1
    for rank, cells in rows.items():
        step, loss = cells[2], cells[3]
        assert step == str(last_step + 1), screen  # steps done: the index of the last one plus one
        assert "…" not in step and "…" not in loss, screen
        assert float(loss) == pytest.approx(loss_of(rank, last_step), rel=1e-3), screen
    # nothing measured CPU, memory or a GPU, and no rank ended: no such column
    assert not {"CPU", "RSS", "GPU", "exit"} & set(header.split()), header
    assert not any("–" in cells for cells in rows.values()), screen
    assert "…" not in screen
