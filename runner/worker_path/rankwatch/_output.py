"""A worker's stdout and stderr go straight to the runner, attributed to the rank.

torchrun's ``--tee`` sends a worker's output to a log file and tails that file: when
the disk holding it fills, the worker's next ``print`` fails with ENOSPC and the
rank dies. Under Rankwatch, the runner listens instead on a private Unix socket
(``RANKWATCH_OUTPUT_SOCKET``, in the user's 0700 socket folder). First thing, the
bootstrap connects to it once per stream, says which rank and stream the connection
carries, and puts the connection in place of file descriptor 1 or 2 (``dup2``).

Everything the process writes from then on (Python, C extensions, NCCL, and forked
or spawned children such as DataLoader workers, which inherit the descriptors)
reaches the runner with its rank, and no disk is involved. A write blocks only when
the runner falls behind by more than the socket's buffer, as a write to a terminal
does.

If the socket cannot be reached the descriptors stay as they were: the output still
reaches the runner, through torchrun, only without its rank.

Standard library only.
"""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Mapping

OUTPUT_SOCKET = "RANKWATCH_OUTPUT_SOCKET"
HEADER_WORD = "rankwatch-output"
HEADER_VERSION = 1
CONNECT_TIMEOUT_SECONDS = 10.0
SEND_BUFFER_BYTES = 1 << 20
"""Asked for (the kernel caps it at ``net.core.wmem_max``): how far the runner may fall behind."""
STREAMS = (("stdout", 1), ("stderr", 2))


def header(rank: int, local_rank: int, stream: str) -> bytes:
    """The first line of a connection: ``rankwatch-output 1 <rank> <local rank> <stream>``."""
    return f"{HEADER_WORD} {HEADER_VERSION} {rank} {local_rank} {stream}\n".encode("ascii")


def attach_output(environ: Mapping[str, str] | None = None) -> bool:
    """Send this process's stdout and stderr to the runner's output socket.

    Returns True when both streams now go there; False (nothing changed) when no
    socket was asked for, the rank is unknown, or the socket cannot be reached.
    """
    environ = os.environ if environ is None else environ
    path = environ.get(OUTPUT_SOCKET)
    try:
        rank, local_rank = int(environ.get("RANK", "")), int(environ.get("LOCAL_RANK", ""))
    except ValueError:
        return False
    if not path:
        return False
    connections: list[socket.socket] = []
    try:
        for stream, _ in STREAMS:
            connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            connections.append(connection)
            connection.settimeout(CONNECT_TIMEOUT_SECONDS)
            connection.connect(path)
            try:
                connection.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER_BYTES)
            except OSError:
                pass
            connection.sendall(header(rank, local_rank, stream))
            connection.setblocking(True)  # the descriptor becomes fd 1/2: plain blocking writes, as to a pipe
    except OSError:
        for connection in connections:
            connection.close()
        return False
    for index, (stream, descriptor) in enumerate(STREAMS):
        connection = connections[index]
        python_stream = getattr(sys, stream)
        try:
            if python_stream is not None:
                python_stream.flush()
        except (OSError, ValueError):
            pass
        os.dup2(connection.fileno(), descriptor)
        connection.close()
    return True
