"""One stream connection to the hub: a Unix socket path or ``tcp://HOST:PORT``.

Only the reporter thread uses a connection. Sends use ``MSG_NOSIGNAL`` so that
a hub that went away gives ``BrokenPipeError`` instead of a SIGPIPE that would
kill a script which restored SIGPIPE's default action.
"""

from __future__ import annotations

import socket

_NO_SIGPIPE = getattr(socket, "MSG_NOSIGNAL", 0)
TCP_PREFIX = "tcp://"
MAX_READ_BYTES = 1 << 20
"""More unread data from the hub than this is not the hub speaking: the connection is dropped."""


def parse_address(address: str) -> tuple[int, object]:
    """``(family, socket address)`` for a hub address.

    ``tcp://HOST:PORT`` (``tcp://[::1]:PORT`` for IPv6) is TCP; anything else is a
    Unix socket path.

    Raises:
        ValueError: a ``tcp://`` address without a valid port.
    """
    if address.startswith(TCP_PREFIX):
        host, separator, port = address[len(TCP_PREFIX) :].rpartition(":")
        if not separator or not port.isdigit():
            raise ValueError(f"bad hub address {address!r}: expected tcp://HOST:PORT")
        return socket.AF_INET, (host.strip("[]") or "127.0.0.1", int(port))
    return socket.AF_UNIX, address


class Connection:
    """A connected socket with bounded sends."""

    def __init__(self, sock: socket.socket):
        self._socket = sock

    @classmethod
    def open(cls, address: str, timeout: float) -> Connection:
        """Connect within ``timeout`` seconds.

        Raises:
            OSError: the hub is not listening, unreachable, or too slow to accept.
            ValueError: a malformed ``tcp://`` address.
        """
        family, target = parse_address(address)
        if family == socket.AF_UNIX:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.settimeout(timeout)
                sock.connect(target)
            except BaseException:
                sock.close()
                raise
        else:
            sock = socket.create_connection(target, timeout=timeout)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return cls(sock)

    def send(self, payload: bytes, timeout: float) -> None:
        """Send all of ``payload`` within ``timeout`` seconds.

        Raises:
            OSError: the hub went away or stopped reading (``TimeoutError``).
        """
        self._socket.settimeout(timeout)
        self._socket.sendall(payload, _NO_SIGPIPE)

    def read_available(self) -> bytes | None:
        """What the hub sent since the last call, without waiting; None when it closed its end.

        The hub writes little to a worker (``pace``), so one call reads it all.
        """
        received = bytearray()
        try:
            self._socket.settimeout(0.0)  # with a timeout set, recv would wait for it
            while True:
                data = self._socket.recv(65536)
                if not data:
                    return None
                received += data
                if len(received) > MAX_READ_BYTES:  # a peer that floods is not a hub
                    return None
        except (BlockingIOError, InterruptedError):
            return bytes(received)
        except OSError:
            return None

    def close(self) -> None:
        """Finish sending (the hub reads everything, then end of stream) and close."""
        try:
            self._socket.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        self._socket.close()

    def detach_in_child(self) -> None:
        """Close this process's copy of the socket after ``fork()``; the parent's stays open."""
        self._socket.close()
