"""Preflight over real ssh: every problem with a node is one line naming the field and the
fix, all nodes are checked in one go, and nothing is launched."""

from __future__ import annotations

import os
import socket
import sys

import pytest

from tests.jobs import SCRIPTS, latest_run, rankwatch

pytestmark = pytest.mark.ssh

PYTHON_WITHOUT_RANKWATCH = "/usr/bin/python3"


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]  # nothing listens there once it is closed


def test_every_unusable_node_is_named_with_its_fix_and_nothing_starts(over_ssh, tmp_path):
    nodes = {
        "unreachable": f'host = "127.0.0.1"\nport = {closed_port()}',
        "no key": 'host = "127.0.0.1"\nuser = "rankwatch-nobody"',
        "no python": 'host = "127.0.0.1"\npython = "/nonexistent/python3"',
        "no rankwatch": f'host = "127.0.0.1"\npython = "{PYTHON_WITHOUT_RANKWATCH}"',
        "no workdir": 'host = "127.0.0.1"\nworkdir = "/nonexistent/workdir"',
        "fine": 'host = "127.0.0.1"',
    }
    if not os.access(PYTHON_WITHOUT_RANKWATCH, os.X_OK):
        del nodes["no rankwatch"]
    tables = "".join(f"\n[[nodes]]\n{body}\nprocesses = 1\n" for body in ['host = "localhost"', *nodes.values()])
    profile = tmp_path / "nodes.toml"
    profile.write_text(f'script = "{SCRIPTS / "hello_ranks.py"}"\ngpus = "cpu"\ninterpreter = "{sys.executable}"\n'
                       f'{tables}\n[rendezvous]\nmode = "c10d"\n')
    result = rankwatch("run", str(profile), timeout=120)
    assert result.returncode == 2, result.stderr
    index = {name: position + 1 for position, name in enumerate(nodes)}
    expected = {
        "unreachable": "host: cannot reach 127.0.0.1 over ssh (ssh: connect to host 127.0.0.1 port",
        "no key": "host: cannot reach 127.0.0.1 over ssh (rankwatch-nobody@127.0.0.1: Permission denied "
                  "(publickey).); set up key-based login: ssh-copy-id rankwatch-nobody@127.0.0.1",
        "no python": "python: /nonexistent/python3 was not found on 127.0.0.1",
        "no rankwatch": f"python: rankwatch is not installed for {PYTHON_WITHOUT_RANKWATCH} on 127.0.0.1; "
                        f"install it there: {PYTHON_WITHOUT_RANKWATCH} -m pip install rankwatch",
        "no workdir": "workdir: /nonexistent/workdir does not exist on 127.0.0.1",
    }
    lines = result.stderr.strip().splitlines()
    for name, text in expected.items():
        if name in index:
            assert any(f"nodes[{index[name]}].{text}" in line for line in lines), f"{name}:\n{result.stderr}"
    assert "Connection refused); is sshd running on 127.0.0.1" in result.stderr
    assert len(lines) == len(index) - 1  # one line per bad node, none for the good one
    assert "Traceback" not in result.stderr
    assert latest_run() is None  # nothing was launched, not even recorded
