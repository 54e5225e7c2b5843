"""An agent takes its own ranks' stacks when the head asks (``stack_request``) and sends them back.

The head cannot signal a process on another machine. The agent can: it knows its
ranks' pids from their hellos (``relay.pids``), and their faulthandler files are in
its workspace. As the runner does on a single machine (``runner.diagnosis.stack_capture``):
note each file's size, send ``STACK_SIGNAL`` to the ranks that carry the run's marker,
wait until the files stop growing (at most ``WAIT_SECONDS``), and send each rank's
new text as a ``remote_stacks`` message, or an empty one that says why there is none.
Each signalled rank's reporter also sends its Flight Recorder, through the relay.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from pathlib import Path

from rankwatch._stacks import STACK_SIGNAL, stacks_file_path
from rankwatch.protocol import RemoteStacks
from runner.launch.process_tree import carries_marker

POLL_SECONDS = 0.2
WAIT_SECONDS = 1.8
"""Under the head's own wait (``stack_capture.WAIT_SECONDS``), so the answer arrives in time."""
MAX_TEXT_BYTES = 512 << 10
"""The newest part of a dump, well under a protocol line."""


async def capture_node_stacks(ranks: list[int], pids: dict[int, int], stacks_dir: Path, run_key: str,
                              node_rank: int, host: str, send: Callable[[RemoteStacks], None]) -> None:
    """Signal ``ranks`` (those of this node), then ``send`` one ``RemoteStacks`` per rank."""
    offsets: dict[int, int] = {}
    for rank in ranks:
        pid = pids.get(rank)
        path = Path(stacks_file_path(str(stacks_dir), rank))
        why = None
        if pid is None:
            why = "this node has no process for it (no hello)"
        elif not carries_marker(pid, run_key):
            why = f"refused to signal pid {pid}: it is not a process of this run"
        else:
            try:
                offsets[rank] = path.stat().st_size
                os.kill(pid, STACK_SIGNAL)
            except FileNotFoundError:
                why = "no stack handler (its stack file does not exist)"
            except ProcessLookupError:
                why = f"process {pid} is gone"
            except OSError as error:
                why = f"cannot signal process {pid}: {error.strerror or error}"
            if why is not None:
                offsets.pop(rank, None)
        if why is not None:
            send(RemoteStacks(node_rank, rank, host, "", why))
    loop = asyncio.get_running_loop()
    deadline = loop.time() + WAIT_SECONDS
    sizes: dict[int, int] = {}
    while offsets and loop.time() < deadline:
        await asyncio.sleep(POLL_SECONDS)
        now = {rank: _size(stacks_dir, rank) for rank in offsets}
        if all(now[rank] > offsets[rank] for rank in offsets) and now == sizes:
            break
        sizes = now
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
