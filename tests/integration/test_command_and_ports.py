"""`rankwatch command` prints what runs the same job by hand; taken ports are explained."""

from __future__ import annotations

import os
import re
import socket
import subprocess

import pytest

from tests.jobs import SCRIPTS, rankwatch

pytestmark = pytest.mark.torchrun


def hello_lines(text: str, cwd: str = r"\S+") -> list[str]:
    # Plain torchrun lets two ranks' unbuffered prints share a line; match the greetings, not lines.
    return sorted(re.findall(r"hello from rank .*?cwd " + cwd, text))


def test_pasted_command_runs_the_same_job(tmp_path):
    saved = rankwatch("profiles", "save", "paste", "--nproc-per-node", "2", "--gpus", "cpu", "--omp-num-threads", "1",
                      "--env", "GREETING=hi there", "--workdir", str(tmp_path),
                      str(SCRIPTS / "hello_ranks.py"), "--size", "3")
    assert saved.returncode == 0, saved.stderr
    printed = rankwatch("command", "paste")
    assert printed.returncode == 0, printed.stderr
    [line] = printed.stdout.strip().splitlines()
    # pasted into a shell by hand: no Rankwatch variables, only what the line itself sets
    clean_env = {k: v for k, v in os.environ.items() if not k.startswith("RANKWATCH")}
    by_hand = subprocess.run(["bash", "-c", line], capture_output=True, text=True, timeout=120, env=clean_env)
    assert by_hand.returncode == 0, by_hand.stderr[-2000:]
    through_rankwatch = rankwatch("run", "--plain", "paste")
    assert through_rankwatch.returncode == 0, through_rankwatch.stderr[-2000:]
    expected = [f"hello from rank {r} of 2, sum 3, omp 1, greeting hi there, args ['--size', '3'], cwd {tmp_path}"
                for r in (0, 1)]
    assert hello_lines(by_hand.stdout, re.escape(str(tmp_path))) == expected
    assert hello_lines(through_rankwatch.stdout, re.escape(str(tmp_path))) == expected


def test_a_taken_static_port_is_refused_naming_the_holder(tmp_path):
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    port = holder.getsockname()[1]
    try:
        profile = tmp_path / "static.toml"
        profile.write_text(f'script = "{SCRIPTS / "hello_ranks.py"}"\nnproc_per_node = 2\n'
                           f'[rendezvous]\nmode = "static"\nmaster_addr = "127.0.0.1"\nmaster_port = {port}\n')
        result = rankwatch("run", str(profile))
    finally:
        holder.close()
    assert result.returncode == 2
    assert f"rendezvous.master_port: port {port} on 127.0.0.1 is already in use by pid {os.getpid()}" in result.stderr


def test_standalone_picks_a_free_port_even_when_29500_is_taken():
    holder = socket.socket()
    holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        holder.bind(("", 29500))
        holder.listen()
    except OSError:
        pass  # already taken by someone else: the point stands
    try:
        result = rankwatch("run", "--plain", "--nproc-per-node", "2", str(SCRIPTS / "hello_ranks.py"))
    finally:
        holder.close()
    assert result.returncode == 0, result.stderr[-2000:]
    assert len(hello_lines(result.stdout)) == 2


def test_a_pasted_command_with_a_file_init_method_meets_in_a_fresh_private_folder(tmp_path):
    """Seen: the command named ``/tmp/rankwatch-init-<8 hex>``, a guessable file in the shared /tmp."""
    printed = rankwatch("command", "--nproc-per-node", "2", "--gpus", "cpu", str(SCRIPTS / "seed_tutorial.py"),
                        "--init_method", "{init_method:file}", "--rank", "{rank}", "--world_size", "{world_size}")
    assert printed.returncode == 0, printed.stderr
    [line] = [text for text in printed.stdout.splitlines() if not text.startswith("#")]
    assert "rankwatch-init" not in line
    clean_env = {k: v for k, v in os.environ.items() if not k.startswith("RANKWATCH")}
    by_hand = subprocess.run(["bash", "-c", line], capture_output=True, text=True, timeout=120,
                             env={**clean_env, "TMPDIR": str(tmp_path)})
    trained = re.findall(r"rank (\d) trained", by_hand.stdout)
    assert sorted(trained) == ["0", "1"], by_hand.stderr[-2000:]
    # Torch's own teardown aborts a finished gloo job now and then, by hand too; nothing else may fail.
    assert by_hand.returncode == 0 or "terminate called without an active exception" in by_hand.stderr, \
        by_hand.stderr[-2000:]
    joined = sorted(re.findall(r"rank (\d) of 2 joins file://(\S+?/store)", by_hand.stdout))
    assert [rank for rank, _path in joined] == ["0", "1"] and joined[0][1] == joined[1][1]
    folder = os.path.dirname(joined[0][1])
    assert os.path.dirname(folder) == str(tmp_path) and os.stat(folder).st_mode & 0o777 == 0o700
