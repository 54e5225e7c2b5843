"""`rankwatch command` for two nodes prints one torchrun line per node; run side by side
by hand (two shells, no Rankwatch), they rendezvous over c10d and finish the same job."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from tests.jobs import SCRIPTS, rankwatch

pytestmark = pytest.mark.torchrun


def test_the_printed_per_node_commands_run_the_job_by_hand(tmp_path):
    printed = rankwatch("command", "--hosts", "localhost:1,127.0.0.1:1", "--gpus", "cpu", "--interpreter",
                        sys.executable, "--omp-num-threads", "1", "--workdir", str(tmp_path),
                        str(SCRIPTS / "hello_ranks.py"), "--size", "3")
    assert printed.returncode == 0, printed.stderr
    lines = printed.stdout.strip().splitlines()
    assert [line for line in lines if line.startswith("#")] == [
        "# node 0: localhost (1 processes)", "# node 1: 127.0.0.1 (1 processes)"]
    commands = [line for line in lines if not line.startswith("#")]
    assert len(commands) == 2 and "RANKWATCH_SOCKET" not in printed.stdout and "--rdzv-backend=c10d" in commands[1]
    clean_env = {k: v for k, v in os.environ.items() if not k.startswith("RANKWATCH")}
    shells = [subprocess.Popen(["bash", "-c", command], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env=clean_env) for command in commands]
    outputs = [shell.communicate(timeout=120) for shell in shells]
    for shell, (_, stderr) in zip(shells, outputs, strict=True):
        assert shell.returncode == 0, stderr[-2000:]
    for rank, (stdout, _) in enumerate(outputs):
        assert re.search(rf"hello from rank {rank} of 2, sum 3, omp 1, .*cwd {re.escape(str(tmp_path))}", stdout)
