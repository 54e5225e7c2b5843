"""A worker's stdout and stderr go straight to the runner, attributed to the rank.

torchrun's ``--tee`` sends a worker's output to a log file and tails that file: when
the disk holding it fills, the worker's next ``print`` fails with ENOSPC and the
rank dies. Under Rankwatch, the runner listens instead on a private Unix socket
(``RANKWATCH_OUTPUT_SOCKET``, in the user's 0700 socket folder). First thing, the
bootstrap connects to it once per stream and says which rank and stream it is; the
runner answers with the write end of a pipe of its own (passed over the socket,
``SCM_RIGHTS``), which the bootstrap puts in place of file descriptor 1 or 2
(``dup2``). A pipe, not the socket itself: a write to a pipe costs half as much,
which a flood of unbuffered prints notices.

Everything the process writes from then on (Python, C extensions, NCCL, and forked
or spawned children such as DataLoader workers, which inherit the descriptors)
reaches the runner with its rank, and no disk is involved. A write blocks only when
the runner falls behind by more than the pipe's buffer, as a write to a terminal
does.

If the socket cannot be reached the descriptors stay as they were: the output still
reaches the runner, through torchrun, only without its rank.

A process that does not know its rank yet (a self-spawning script's main process and
the processes it starts, ``rankwatch._spawn``) attaches its output *pending*: the header
names its pid instead of a rank, and the runner holds its lines until the process says
``hello`` (then they are that rank's), declares itself the launcher (``declare_launcher``:
its lines are the launcher's, as torchrun's are), ends, or a few seconds pass.

Header: ``rankwatch-output 2 <rank> <local rank> <stream> <pid>``, ``-`` for an unknown
rank; the stream ``launcher`` is a declaration (no pipe is passed back).

Standard library only.
"""

from __future__ import annotations

import array
import os
import socket
import sys
from collections.abc import Mapping

OUTPUT_SOCKET = "RANKWATCH_OUTPUT_SOCKET"
HEADER_WORD = "rankwatch-output"
HEADER_VERSION = 2
CONNECT_TIMEOUT_SECONDS = 10.0
PIPE_ANSWER = b"pipe\n"
"""The runner's answer, with the pipe's write end attached."""
STREAMS = (("stdout", 1), ("stderr", 2))
UNKNOWN = "-"
"""In a header: the rank is not known yet (the runner waits for the process's hello)."""
LAUNCHER_STREAM = "launcher"
"""A header with this stream declares the process a launcher: its pending output is not a rank's."""


def header(rank: int | None, local_rank: int | None, stream: str, pid: int | None = None) -> bytes:
    """The first line of a connection: ``rankwatch-output 2 <rank> <local rank> <stream> <pid>``."""
    words = [UNKNOWN if value is None else str(value) for value in (rank, local_rank)]
    pid = os.getpid() if pid is None else pid
    return f"{HEADER_WORD} {HEADER_VERSION} {words[0]} {words[1]} {stream} {pid}\n".encode("ascii")


def receive_pipe(connection: socket.socket) -> int:
    """The write end of the pipe the runner passes after the header.

    Raises:
        OSError: no descriptor came (the runner hung up, or answered something else).
    """
    item = array.array("i")
    data, ancillary, _, _ = connection.recvmsg(len(PIPE_ANSWER), socket.CMSG_SPACE(item.itemsize))
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            item.frombytes(payload[: len(payload) - len(payload) % item.itemsize])
    if data != PIPE_ANSWER or len(item) != 1:
        for descriptor in item:
            os.close(descriptor)
        raise OSError("the runner did not pass a pipe")
    return item[0]


def attach_output(environ: Mapping[str, str] | None = None, *, pending: bool = False) -> bool:
    """Send this process's stdout and stderr to the runner.

    ``pending``: the rank is not known yet; the runner attributes the lines once it is
    (see the module docstring). Returns True when both streams now go there; False
    (nothing changed) when no socket was asked for, the rank is unknown (and not
    ``pending``), or the runner cannot be reached.
    """
    environ = os.environ if environ is None else environ
    path = environ.get(OUTPUT_SOCKET)
    rank: int | None = None
    local_rank: int | None = None
    if not pending:
        try:
            rank, local_rank = int(environ.get("RANK", "")), int(environ.get("LOCAL_RANK", ""))
        except ValueError:
            return False
    if not path:
        return False
    pipes: list[int] = []
    try:
        for stream, _ in STREAMS:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
                connection.settimeout(CONNECT_TIMEOUT_SECONDS)
                connection.connect(path)
                connection.sendall(header(rank, local_rank, stream))
                pipes.append(receive_pipe(connection))
    except OSError:
        for descriptor in pipes:
            os.close(descriptor)
        return False
    for index, (stream, descriptor) in enumerate(STREAMS):
        python_stream = getattr(sys, stream)
        try:
            if python_stream is not None:
                python_stream.flush()
        except (OSError, ValueError):
            pass
        os.dup2(pipes[index], descriptor)
        os.close(pipes[index])
    return True


def declare_launcher(environ: Mapping[str, str] | None = None) -> bool:
    """Tell the runner this process's pending output is a launcher's, not a rank's (it
    started the ranks). Returns False when there is no socket or it cannot be reached."""
    environ = os.environ if environ is None else environ
    path = environ.get(OUTPUT_SOCKET)
    if not path:
        return False
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
            connection.settimeout(CONNECT_TIMEOUT_SECONDS)
            connection.connect(path)
            connection.sendall(header(None, None, LAUNCHER_STREAM))
    except OSError:
        return False
    return True
