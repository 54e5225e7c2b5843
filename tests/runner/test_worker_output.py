"""Workers' stdout and stderr reach the runner over a private socket, attributed to their rank,
without a file on the data disk in between (issue 10: a full disk killed the ranks).

Real worker processes (``python -m rankwatch._bootstrap``, no torch) write to a real
``WorkerOutput`` socket: from Python, straight to the file descriptor as C code does, and
from a forked child and an exec'd subprocess, which inherit the descriptors.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import textwrap
import time

import pytest

from rankwatch._output import attach_output, header
from runner import paths
from runner.launch.output import MAX_LINE_CHARS
from runner.launch.worker_output import LineAssembler, WorkerOutput, parse_header
from tests.jobs import REPO

WORKER_PATH = REPO / "runner" / "worker_path"

WORKER = textwrap.dedent("""
    import os, subprocess, sys
    print("from python")
    print("to stderr", file=sys.stderr)
    os.write(1, b"straight to fd 1\\n")
    print("no newline yet", end="")
    sys.stdout.flush()
    if os.fork() == 0:
        print("from a forked child", flush=True)
        os._exit(0)
    os.wait()
    subprocess.run([sys.executable, "-c", "import sys; print('from a subprocess'); sys.stderr.write('sub err\\\\n')"])
    print(" ... and its end")
    print("naïve ünïcode ✓")
""")


def texts(lines) -> list[tuple[int | None, str, str]]:
    return [(line.rank, line.stream, line.text) for line in lines]


# ---- assembling lines ----------------------------------------------------------------------------


def test_lines_are_split_and_a_partial_line_waits_for_its_newline():
    assembler = LineAssembler(2, "stdout")
    assert texts(assembler.feed(b"one\ntwo\r\nthr", 1.0)) == [(2, "stdout", "one"), (2, "stdout", "two")]
    assert assembler.feed(b"ee", 1.2) == []
    [line] = assembler.feed(b"\n", 1.4)
    assert (line.text, line.t) == ("three", 1.0)  # timed when it started to arrive


def test_a_character_cut_between_two_reads_is_not_mangled():
    encoded = "ünï ✓\n".encode()
    assembler = LineAssembler(0, "stdout")
    assert assembler.feed(encoded[:2], 1.0) == [] and assembler.feed(encoded[2:6], 1.0) == []
    assert texts(assembler.feed(encoded[6:], 1.0)) == [(0, "stdout", "ünï ✓")]


def test_a_progress_bar_without_newline_is_delivered_when_stale():
    assembler = LineAssembler(1, "stderr")
    assembler.feed(b"50%|#####", 10.0)
    assert assembler.flush_stale(10.5) == []
    assert texts(assembler.flush_stale(11.0)) == [(1, "stderr", "50%|#####")]
    assert assembler.flush_stale(20.0) == []


def test_an_endless_line_is_cut_so_it_cannot_hold_the_hub():
    assembler = LineAssembler(0, "stdout")
    lines = assembler.feed(b"x" * (MAX_LINE_CHARS * 2 + 10), 1.0) + assembler.feed(b"\n", 1.0)
    assert [len(line.text) for line in lines] == [MAX_LINE_CHARS, MAX_LINE_CHARS, 10]


def test_a_line_rewritten_with_carriage_returns_is_its_last_state():
    assembler = LineAssembler(0, "stderr")
    bar = b"\rGPU0 epoch 1/3:   0%|          | 0/9\rGPU0 epoch 1/3:  50%|#####     | 4/9\rGPU0 epoch 1/3: 100%|##########| 9/9"
    assert assembler.feed(bar, 1.0) == []
    assert texts(assembler.feed(b"\nnext line\n", 2.0)) == [
        (0, "stderr", "GPU0 epoch 1/3: 100%|##########| 9/9"), (0, "stderr", "next line")]


def test_a_progress_bar_that_keeps_changing_is_delivered_as_it_stands_at_a_bounded_rate():
    """Live: its state after a second, then at most every PROGRESS_SNAPSHOT_SECONDS while it
    changes; stored, that is all of it: no state twice, the last one at its newline."""
    assembler = LineAssembler(1, "stderr")
    delivered = []
    for tenth in range(0, 200):  # 20 s of a bar updated ten times a second, checked twice a second
        now = 100.0 + tenth / 10
        delivered += assembler.feed(f"\rtrain: {tenth // 2}%|  ".encode(), now)
        if tenth % 5 == 0:
            delivered += assembler.flush_stale(now)
    delivered += assembler.feed(b"\rtrain: 100%|  \n", 120.0)

    assert [line.text for line in delivered] == [
        "train: 5%|", "train: 30%|", "train: 55%|", "train: 80%|", "train: 100%|"]
    assert [line.t for line in delivered] == [101.0, 106.0, 111.0, 116.0, 120.0]  # when each state was written
    assert assembler.flush_stale(130.0) == [] and assembler.flush_all(130.0) == []


def test_an_unchanged_or_erased_bar_is_not_delivered_again():
    assembler = LineAssembler(0, "stdout")
    assembler.feed(b"\r 10%|#", 1.0)
    assert texts(assembler.flush_stale(2.0)) == [(0, "stdout", " 10%|#")]
    assert assembler.flush_stale(10.0) == []  # the same state
    assembler.feed(b"\r       \r", 11.0)  # tqdm(leave=False) clears its line
    assert assembler.flush_stale(20.0) == []
    assert texts(assembler.feed(b"done\n", 21.0)) == [(0, "stdout", "done")]


def test_the_end_of_a_line_delivered_in_part_is_not_an_empty_line():
    assembler = LineAssembler(0, "stdout")
    assembler.feed(b"Loading...", 1.0)
    assert texts(assembler.flush_stale(2.0)) == [(0, "stdout", "Loading...")]
    assert texts(assembler.feed(b" done\nwaiting", 3.0)) == [(0, "stdout", " done")]
    assert texts(assembler.flush_stale(5.0)) == [(0, "stdout", "waiting")]
    assert assembler.feed(b"\n", 6.0) == []
    assert texts(assembler.feed(b"\n", 7.0)) == [(0, "stdout", "")]  # print() is still an empty line


@pytest.mark.parametrize("read_size", [1, 7, 4096])
def test_bars_at_a_position_move_the_cursor_between_lines_without_ending_them(read_size):
    """tqdm's ``position=`` and nested bars go down a line with a newline and back up with ESC[A;
    those newlines end no line, and the escape sequences never reach the text."""
    outer = "\repochs:  {}%|".format
    inner = "\rbatches: {}%|".format
    stream = outer(0) + "".join(f"\n{inner(percent)}\x1b[A" for percent in (0, 50, 100))
    stream += f"\n\r{' ' * 12}\x1b[A" + outer(50) + f"\n{inner(0)}\x1b[A{outer(100)}\ndone\n"
    assembler = LineAssembler(0, "stderr")
    data = stream.encode()
    lines = [line for start in range(0, len(data), read_size)
             for line in assembler.feed(data[start:start + read_size], 1.0)] + assembler.flush_all(2.0)

    assert [line.text for line in lines] == ["epochs:  0%|", "epochs:  100%|", "done"]


def test_escape_sequences_that_are_not_cursor_moves_stay():
    assembler = LineAssembler(0, "stdout")
    assert texts(assembler.feed(b"\x1b[31mred\x1b[0m\r\x1b[2Kreplaced\n", 1.0)) == [(0, "stdout", "replaced")]
    assert texts(assembler.feed(b"\x1b[31mred\x1b[0m\n", 1.0)) == [(0, "stdout", "\x1b[31mred\x1b[0m")]


def test_only_our_header_opens_a_connection():
    assert parse_header(header(5, 1, "stderr", pid=42)) == (5, "stderr", 42)
    assert parse_header(header(None, None, "stdout", pid=42)) == (None, "stdout", 42)  # pending: rank not known yet
    assert parse_header(header(None, None, "launcher", pid=42)) == (None, "launcher", 42)
    for bad in (b"GET / HTTP/1.1\r\n", b"rankwatch-output 1 5 1 stdout\n", b"rankwatch-output 2 5 1 stdout\n",
                b"rankwatch-output 2 x 1 stdout 42\n", b"rankwatch-output 2 5 1 stdin 42\n",
                b"rankwatch-output 2 5 1 launcher 42\n", b"\xff\xfe\n", b""):
        assert parse_header(bad) is None


# ---- real workers --------------------------------------------------------------------------------


async def _run_worker(socket_path, env_extra: dict[str, str], script: str):
    received = []
    output = WorkerOutput(socket_path, received.extend)
    await output.start()
    env = {**os.environ, "PYTHONPATH": str(WORKER_PATH), "PYTHONUNBUFFERED": "1", **output.environment, **env_extra}
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "rankwatch._bootstrap", script,
        env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    stdout, stderr = await process.communicate()
    await asyncio.wait_for(output.drained(), 10)
    await output.close()
    return received, stdout.decode(), stderr.decode(), process.returncode


def test_every_line_of_a_worker_and_its_children_reaches_the_runner_with_its_rank(tmp_path):
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    socket_path = paths.socket_dir() / "out-test.sock"

    received, stdout, stderr, code = asyncio.run(
        _run_worker(socket_path, {"RANK": "3", "LOCAL_RANK": "1"}, str(script)))

    assert code == 0 and stdout == "" and stderr == ""  # nothing went around the socket
    assert {line.rank for line in received} == {3}
    out = [line.text for line in received if line.stream == "stdout"]
    err = [line.text for line in received if line.stream == "stderr"]
    # in order: the forked child writes on the same connection, after the parent's partial line
    assert out == ["from python", "straight to fd 1", "no newline yetfrom a forked child", "from a subprocess",
                   " ... and its end", "naïve ünïcode ✓"]
    assert err == ["to stderr", "sub err"]
    assert not socket_path.exists()


def test_without_the_socket_a_worker_prints_as_usual(tmp_path):
    script = tmp_path / "worker.py"
    script.write_text("print('plain')\n")
    gone = paths.socket_dir() / "nobody-listens.sock"
    env = {**os.environ, "PYTHONPATH": str(WORKER_PATH), "RANK": "0", "LOCAL_RANK": "0",
           "RANKWATCH_OUTPUT_SOCKET": str(gone)}
    completed = subprocess.run([sys.executable, "-m", "rankwatch._bootstrap", str(script)], env=env,
                               capture_output=True, text=True, timeout=30)
    assert completed.returncode == 0 and completed.stdout == "plain\n"
    assert attach_output({"RANKWATCH_OUTPUT_SOCKET": str(gone), "RANK": "0", "LOCAL_RANK": "0"}) is False
    assert attach_output({"RANK": "0", "LOCAL_RANK": "0"}) is False


def test_a_connection_that_does_not_introduce_itself_is_dropped():
    async def scenario():
        received = []
        output = WorkerOutput(paths.socket_dir() / "out-stranger.sock", received.extend)
        await output.start()
        reader, writer = await asyncio.open_unix_connection(str(output.path))
        writer.write(b"hello there\nsome text\n")
        await writer.drain()
        closed = await asyncio.wait_for(reader.read(), 5)  # the runner hangs up
        writer.close()
        await output.close()
        return received, closed

    received, closed = asyncio.run(scenario())
    assert received == [] and closed == b""


def test_lines_arrive_while_the_worker_runs_not_when_it_ends(tmp_path):
    script = tmp_path / "slow.py"
    script.write_text("import time\nprint('first', flush=True)\ntime.sleep(3)\nprint('second')\n")

    async def scenario():
        arrivals = []
        output = WorkerOutput(paths.socket_dir() / "out-slow.sock",
                              lambda lines: arrivals.extend((line.text, time.monotonic()) for line in lines))
        await output.start()
        env = {**os.environ, "PYTHONPATH": str(WORKER_PATH), "PYTHONUNBUFFERED": "1", "RANK": "0",
               "LOCAL_RANK": "0", **output.environment}
        started = time.monotonic()
        process = await asyncio.create_subprocess_exec(sys.executable, "-m", "rankwatch._bootstrap", str(script),
                                                        env=env)
        await process.wait()
        await output.drained()
        await output.close()
        return started, arrivals

    _started, arrivals = asyncio.run(scenario())
    assert [text for text, _ in arrivals] == ["first", "second"]
    assert arrivals[1][1] - arrivals[0][1] > 2.5  # the first line did not wait for the process to end


def test_a_real_tqdm_bar_shows_live_and_leaves_its_states_not_its_carriage_returns(tmp_path):
    """A real tqdm bar (on stderr, its default) in a real worker, with the runner's stale-line
    check every half second (``supervisor``): its state arrives while it runs, then its last."""
    script = tmp_path / "bar.py"
    script.write_text(textwrap.dedent("""
        import time
        from tqdm import tqdm
        for _ in tqdm(range(30), desc="GPU0 epoch 1/1", mininterval=0):
            time.sleep(0.1)
        print("trained", flush=True)
    """))

    async def scenario():
        arrivals = []
        output = WorkerOutput(paths.socket_dir() / "out-tqdm.sock",
                              lambda lines: arrivals.extend((line.text, time.monotonic()) for line in lines))
        await output.start()
        env = {**os.environ, "PYTHONPATH": str(WORKER_PATH), "PYTHONUNBUFFERED": "1", "RANK": "0",
               "LOCAL_RANK": "0", **output.environment}
        process = await asyncio.create_subprocess_exec(sys.executable, "-m", "rankwatch._bootstrap", str(script),
                                                        env=env)
        while process.returncode is None:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(process.wait(), 0.5)
            output.flush_stale(time.time())
        await output.drained()
        await output.close()
        return arrivals, time.monotonic()

    arrivals, ended = asyncio.run(scenario())
    texts_only = [text for text, _ in arrivals]
    bar = [(text, at) for text, at in arrivals if text.startswith("GPU0 epoch 1/1:")]
    assert not any("\r" in text or "\x1b" in text for text in texts_only), texts_only
    assert texts_only[-1] == "trained"
    assert "100%" in bar[-1][0] and "30/30" in bar[-1][0]
    assert " 100%" not in bar[0][0] and bar[0][1] < arrivals[-1][1] - 1.0  # seen live, a second before the end
    assert 2 <= len(bar) <= 3  # a 3 s bar at ten states a second: its first state, maybe one more, its last
    assert ended - arrivals[0][1] < 10


@pytest.mark.parametrize("stream", ["stdout", "stderr"])
def test_header_names_rank_and_stream(stream):
    assert header(7, 3, stream, pid=99) == f"rankwatch-output 2 7 3 {stream} 99\n".encode()
    assert header(None, None, stream, pid=99) == f"rankwatch-output 2 - - {stream} 99\n".encode()


PENDING = textwrap.dedent("""
    import sys, time
    from rankwatch._output import attach_output, declare_launcher
    attach_output(pending=True)
    print("before anyone knows whose", flush=True)
    if sys.argv[1] == "launcher":
        declare_launcher()
    print("ready", flush=True)
    sys.stdin.readline()  # wait for the test's turn
    print("after", flush=True)
""")


def test_pending_output_waits_for_its_rank_and_is_the_launchers_when_none_comes(tmp_path):
    """A self-spawned process's lines before its hello are held, then its rank's once claimed;
    a launcher's (declared) or an unclaimed process's (at its end) are the launcher's, none lost."""
    script = tmp_path / "pending.py"
    script.write_text(PENDING)

    async def scenario() -> dict[str, list]:
        received: list = []
        output = WorkerOutput(paths.socket_dir() / "out-pending.sock", received.extend)
        await output.start()
        env = {**os.environ, "PYTHONPATH": str(WORKER_PATH), **output.environment}
        processes = {}
        for role in ("claimed", "launcher", "unclaimed"):
            processes[role] = await asyncio.create_subprocess_exec(
                sys.executable, str(script), role, env=env, stdin=asyncio.subprocess.PIPE)
        deadline = time.monotonic() + 30
        while sum(line.text == "ready" for line in received) < 1 and time.monotonic() < deadline:
            await asyncio.sleep(0.05)  # only the launcher's "ready" can arrive: the others are held
        await asyncio.sleep(0.5)
        held = [(line.rank, line.text) for line in received]
        output.claim(processes["claimed"].pid, 3)
        for process in processes.values():
            await process.communicate(b"go\n")
        await asyncio.wait_for(output.drained(), 10)
        await output.close()
        return {"held": held, "all": [(line.rank, line.text) for line in received]}

    seen = asyncio.run(scenario())
    assert sorted(seen["held"]) == [(None, "before anyone knows whose"), (None, "ready")]  # the launcher's only
    everything = seen["all"]
    assert [text for rank, text in everything if rank == 3] == ["before anyone knows whose", "ready", "after"]
    assert sorted(text for rank, text in everything if rank is None) == sorted(
        ["before anyone knows whose", "ready", "after"] * 2)  # the launcher's, and the unclaimed one's at its end


def test_closing_while_a_straggler_holds_a_pipe_ends_it_quietly_and_at_once(tmp_path):
    """A dead rank's child that still holds the rank's output pipe: ``close`` ends that
    connection without asyncio's tracebacks (a cancelled server task prints one per pipe) and without
    waiting for the straggler."""
    script = tmp_path / "straggler.py"
    script.write_text("import subprocess, sys\nprint('rank says bye', flush=True)\n"
                      "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(5)'])\n")

    async def scenario():
        problems = []
        asyncio.get_running_loop().set_exception_handler(lambda loop, context: problems.append(context))
        received = []
        output = WorkerOutput(paths.socket_dir() / "out-straggler.sock", received.extend)
        await output.start()
        env = {**os.environ, "PYTHONPATH": str(WORKER_PATH), "RANK": "0", "LOCAL_RANK": "0", **output.environment}
        process = await asyncio.create_subprocess_exec(sys.executable, "-m", "rankwatch._bootstrap", str(script),
                                                        env=env)
        await process.wait()
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(output.drained(), 0.5)  # the straggler holds both pipes
        started = time.monotonic()
        await output.close()
        closed_in = time.monotonic() - started
        await asyncio.sleep(0.1)  # the done callbacks of the server's tasks run
        return received, problems, closed_in

    received, problems, closed_in = asyncio.run(scenario())
    assert [line.text for line in received] == ["rank says bye"]
    assert problems == []
    assert closed_in < 1.0
