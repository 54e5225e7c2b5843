"""Test harness for the worker side: a fake hub on a real socket, and real worker processes.

``FakeHub`` stands in for the runner's hub: a server thread on a real Unix (or
TCP) socket that decodes every line as the real hub does (``rankwatch.protocol.decode``,
then the message's own typed ``from_wire``) and keeps the messages, so tests assert
on exactly what a worker put on the wire, and a line the real hub would refuse is
refused here too (``bad_lines``).
Workers are real ``python -m rankwatch._bootstrap`` processes with the
environment the runner would give them.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rankwatch import protocol

REPO_ROOT = Path(__file__).resolve().parents[2]
WORKER_PATH = REPO_ROOT / "runner" / "worker_path"
SCRIPTS = Path(__file__).resolve().parent / "scripts"
PYTHON = sys.executable


class FakeHub:
    """A socket server thread that records every decoded message from workers.

    ``address`` is what a worker gets in ``RANKWATCH_SOCKET``. Each message gets
    ``_connection`` (the number of the connection it came on). ``kick()``
    closes every open connection, as a restarted hub would. A line the real hub
    refuses (not JSON, not a worker's type, a message its ``from_wire`` rejects,
    anything before the connection's hello) is not kept: its reason goes to
    ``bad_lines``.
    """

    def __init__(self, tcp: bool = False, path: str | None = None):
        self.path: str | None = None
        self._own_directory: str | None = None
        if tcp:
            self._server = socket.create_server(("127.0.0.1", 0))
            self.address = f"tcp://127.0.0.1:{self._server.getsockname()[1]}"
        else:
            self._own_directory = None if path else tempfile.mkdtemp(prefix="rwhub-", dir="/tmp")
            self.path = path or os.path.join(self._own_directory, "hub.sock")
            self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self._server.bind(self.path)
            self._server.listen(16)
            self.address = self.path
        self._server.settimeout(0.1)
        self._messages: list[dict[str, Any]] = []
        self.bad_lines: list[str] = []
        self._clients: list[socket.socket] = []
        self._lock = threading.Condition()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept_loop, name="fake-hub", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(2)
        self.kick()
        self._server.close()
        if self.path is not None and os.path.exists(self.path):
            os.unlink(self.path)
        if self._own_directory is not None:
            shutil.rmtree(self._own_directory, ignore_errors=True)

    def __enter__(self) -> FakeHub:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def kick(self) -> None:
        """Close every client connection (the workers must reconnect)."""
        with self._lock:
            clients, self._clients = self._clients, []
        for client in clients:
            try:
                client.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            client.close()

    def say(self, data: bytes) -> None:
        """Write ``data`` to every open connection (what the hub sends a worker: ``pace``)."""
        with self._lock:
            clients = list(self._clients)
        for client in clients:
            client.sendall(data)

    def messages(self, message_type: str | None = None, **match: Any) -> list[dict[str, Any]]:
        with self._lock:
            return [
                message
                for message in self._messages
                if (message_type is None or message["type"] == message_type)
                and all(message.get(key) == value for key, value in match.items())
            ]

    def wait_for(self, predicate: Callable[[], Any], timeout: float = 10.0) -> Any:
        """Wait until ``predicate()`` is truthy; returns its value or raises AssertionError."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while True:
                value = predicate()
                if value:
                    return value
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise AssertionError(f"timed out after {timeout} s; got {self._summary()}")
                self._lock.wait(min(remaining, 0.05))

    def wait_message(
        self, message_type: str, timeout: float = 10.0, **match: Any
    ) -> dict[str, Any]:
        return self.wait_for(lambda: self.messages(message_type, **match), timeout)[0]

    def metric_items(self, rank: int | None = None) -> list[list]:
        """Every record received as ``[t, step, name, value, source]``, in arrival order: the items
        as the hub reads them (a step row is the records of its step, ``protocol.metric_records``)."""
        items = []
        for message in self.messages("metrics"):
            if rank is None or message.get("rank") == rank:
                records = protocol.metric_records(message.get("rank", 0), message["items"], {})
                items.extend(list(record[1:]) for record in records)
        return items

    def _summary(self) -> str:
        counts: dict[str, int] = {}
        for message in self._messages:
            counts[message["type"]] = counts.get(message["type"], 0) + 1
        return repr(counts)

    def _accept_loop(self) -> None:
        number = 0
        while not self._stop.is_set():
            try:
                client, _ = self._server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            number += 1
            with self._lock:
                self._clients.append(client)
            threading.Thread(
                target=self._read_loop,
                args=(client, number),
                name=f"fake-hub-{number}",
                daemon=True,
            ).start()

    def _read_loop(self, client: socket.socket, number: int) -> None:
        hello_rank: int | None = None
        pending = b""
        while True:
            try:
                data = client.recv(1 << 16)
            except OSError:
                return
            if not data:
                return
            pending += data
            *lines, pending = pending.split(b"\n")
            decoded = []
            for line in lines:
                try:
                    message = protocol.decode(line, protocol.WORKER_TYPES)
                    hello_rank = read_as_the_hub_does(message, hello_rank)
                except protocol.ProtocolError as exc:
                    self.bad_lines.append(exc.reason)
                    continue
                message["_connection"] = number
                decoded.append(message)
            with self._lock:
                self._messages.extend(decoded)
                self._lock.notify_all()


def read_as_the_hub_does(message: dict[str, Any], hello_rank: int | None) -> int:
    """Check a decoded worker line as the real hub takes it (``runner.hub.server``): the first
    message of a connection must be a hello; every message goes through its typed ``from_wire``,
    a worker's with its hello's rank whatever it claims. Returns the connection's rank.

    Raises:
        rankwatch.protocol.ProtocolError: the real hub would refuse the message.
    """
    fields = dict(message)
    kind = fields["type"]
    if hello_rank is None:
        if kind != protocol.Hello.TYPE:
            raise protocol.ProtocolError("not_allowed_first", f"{kind} before hello")
        return protocol.Hello.from_wire(fields).rank
    if kind == protocol.Metrics.TYPE:
        protocol.Metrics.from_wire(fields, hello_rank)
        return hello_rank
    fields["rank"] = hello_rank
    protocol.message_from_wire(fields)
    return hello_rank


def worker_environment(
    hub_address: str | None, rank: int = 0, world_size: int = 1, **extra: str
) -> dict[str, str]:
    """The environment the runner and torchrun give a worker (``hub_address`` None: no Rankwatch)."""
    environment = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("RANKWATCH_", "TORCHELASTIC_"))
        and key not in {"RANK", "LOCAL_RANK", "WORLD_SIZE"}
    }
    environment.update(
        PYTHONPATH=str(WORKER_PATH),
        PYTHONUNBUFFERED="1",
        RANK=str(rank),
        LOCAL_RANK=str(rank),
        WORLD_SIZE=str(world_size),
        LOCAL_WORLD_SIZE=str(world_size),
        GROUP_RANK="0",
        TORCHELASTIC_RESTART_COUNT="0",
        OMP_NUM_THREADS="1",
    )
    if hub_address is not None:
        environment.update(
            RANKWATCH_SOCKET=hub_address,
            RANKWATCH_TOKEN="secret-token",
            RANKWATCH_RUN_KEY="run-under-test",
            RANKWATCH_RUN="7",
            RANKWATCH_NODE_RANK="0",
            RANKWATCH_NODE_HOST="testhost",
            RANKWATCH_INSTRUMENT="1",
        )
    environment.update(extra)
    return environment


def bootstrap_command(*arguments: str) -> list[str]:
    return [PYTHON, "-u", "-m", "rankwatch._bootstrap", *arguments]


def start_worker(
    arguments: list[str], environment: dict[str, str], cwd: str | Path = SCRIPTS
) -> subprocess.Popen:
    return subprocess.Popen(
        bootstrap_command(*arguments), env=environment, cwd=str(cwd),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def run_worker(
    arguments: list[str],
    environment: dict[str, str],
    cwd: str | Path = SCRIPTS,
    timeout: float = 60.0,
) -> subprocess.CompletedProcess:
    return subprocess.run(
        bootstrap_command(*arguments), env=environment, cwd=str(cwd),
        capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip


def run_plain(
    arguments: list[str],
    environment: dict[str, str],
    cwd: str | Path = SCRIPTS,
    timeout: float = 60.0,
) -> subprocess.CompletedProcess:
    """The same program run as ``python ARGS`` without Rankwatch, for comparison."""
    return subprocess.run(
        [PYTHON, "-u", *arguments], env=environment, cwd=str(cwd),
        capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip
