"""An agent takes its own ranks' stacks when the head asks (``stack_request``) and sends them back.

The head cannot signal a process on another machine. The agent can: it knows its
ranks' pids from their hellos (``relay.pids``), and their faulthandler files are in
its workspace. As the runner does on a single machine (``runner.diagnosis.stack_capture``):
note each file's size, ask the ranks that carry the run's marker for a dump (their
reporters answer with the GIL held), send ``STACK_SIGNAL`` to those that did not take the
ask within ``ASK_SECONDS``, wait until the files stop growing (at most ``WAIT_SECONDS``),
and send each rank's new text as a ``remote_stacks`` message, or an empty one that says
why there is none.
Each signalled rank's reporter also sends its Flight Recorder, through the relay.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
from collections.abc import Callable
from pathlib import Path

from rankwatch._stacks import (
    ASK_SECONDS,
    STACK_SIGNAL,
    ask_file_path,
    ask_for_dump,
    signal_unless_answered,
    stacks_file_path,
)
from rankwatch.protocol import RemoteStacks
from runner.launch.process_tree import carries_marker
from runner.processes import why_not_signalled

POLL_SECONDS = 0.2
WAIT_SECONDS = ASK_SECONDS + 1.8
"""Under the head's own wait (``stack_capture.WAIT_SECONDS``), so the answer arrives in time."""
MAX_TEXT_BYTES = 512 << 10
"""The newest part of a dump, well under a protocol line."""


async def capture_node_stacks(ranks: list[int], pids: dict[int, int], stacks_dir: Path, run_key: str,
                              node_rank: int, host: str, send: Callable[[RemoteStacks], None]) -> None:
    """Ask ``ranks`` (those of this node) for a dump, signal those that do not answer, then
    ``send`` one ``RemoteStacks`` per rank."""
    offsets: dict[int, int] = {}
    asked: dict[int, int] = {}
    for rank in ranks:
        pid = pids.get(rank)
        path = stacks_file_path(str(stacks_dir), rank)
        why = None
        if pid is None:
            why = "this node has no process for it (no hello)"
        elif not carries_marker(pid, run_key):
            why = f"refused to signal pid {pid}: it is not a process of this run"
        else:
            try:
                offsets[rank] = Path(path).stat().st_size
            except FileNotFoundError:
                why = "no stack handler (its stack file does not exist)"
            else:
                why = why_not_signalled(pid, lambda pid: os.kill(pid, 0))  # gone, or not ours to signal
                if why is None:
                    try:
                        ask_for_dump(path)
                        asked[rank] = pid
                    except OSError:  # no ask can be left: signal now
                        why = why_not_signalled(pid, lambda pid: os.kill(pid, STACK_SIGNAL))
            if why is not None:
                offsets.pop(rank, None)
        if why is not None:
            send(RemoteStacks(node_rank, rank, host, "", why))
    loop = asyncio.get_running_loop()
    started = loop.time()
    sizes: dict[int, int] = {}
    while offsets and loop.time() < started + WAIT_SECONDS:
        await asyncio.sleep(POLL_SECONDS)
        if asked and loop.time() >= started + ASK_SECONDS:
            for rank, pid in asked.items():  # did not take the ask: the signal
                unanswered = functools.partial(signal_unless_answered, stacks_path=stacks_file_path(str(stacks_dir), rank))
                why = why_not_signalled(pid, unanswered)
                if why is not None:
                    offsets.pop(rank, None)
                    send(RemoteStacks(node_rank, rank, host, "", why))
            asked.clear()
        now = {rank: _size(stacks_dir, rank) for rank in offsets}
        if all(now[rank] > offsets[rank] for rank in offsets) and now == sizes:
            break
        sizes = now
    for rank in asked:  # asks still out: taken back
        with contextlib.suppress(OSError):
            os.unlink(ask_file_path(stacks_file_path(str(stacks_dir), rank)))
    for rank, offset in offsets.items():
        text = _read_from(stacks_dir, rank, offset)
        send(RemoteStacks(node_rank, rank, host, text, None if text.strip() else
                          f"no dump within {WAIT_SECONDS:.1f} s"))


def _size(stacks_dir: Path, rank: int) -> int:
    try:
        return Path(stacks_file_path(str(stacks_dir), rank)).stat().st_size
    except OSError:
        return 0


def _read_from(stacks_dir: Path, rank: int, offset: int) -> str:
    try:
        with Path(stacks_file_path(str(stacks_dir), rank)).open("rb") as handle:
            size = handle.seek(0, os.SEEK_END)
            handle.seek(max(offset, size - MAX_TEXT_BYTES))
            return handle.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
