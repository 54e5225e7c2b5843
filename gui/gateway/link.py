"""The GUI's line to one runner: a QLocalSocket on the event loop, speaking ``rankwatch.protocol``.

:class:`RunnerLink` connects to the runner's Unix socket, sends ``subscribe`` and
emits every hub message it reads (``snapshot``, ``update``, ``history_end``,
``bye``). Nothing blocks: connecting and reading are signal driven, and reading
works in slices of at most ``SLICE_S`` seconds, so a long history replay never
freezes the window (the rest is picked up on the next turn of the event loop).
The socket's read buffer is bounded, so a GUI that falls behind pushes back on the
hub, which then thins the metrics it sends this subscriber (``decimated``).

If the connection drops without ``bye`` (the runner is restarting its socket, or
is gone), the link retries a few times and re-subscribes with history; the hub's
new ``snapshot`` tells the model to start over. Failing that it reports
``connection_lost``.
"""

from __future__ import annotations

import time
from typing import Any

from PySide6.QtCore import QObject, QTimer, Signal
from PySide6.QtNetwork import QLocalSocket

from rankwatch import protocol
from runner.runstate.messages import Bye, decode_hub_line

SLICE_S = 0.02
"""Seconds of reading and handling messages before yielding to the event loop."""
READ_CHUNK = 256 * 1024
READ_BUFFER = 4 * 1024 * 1024

__all__ = ["RunnerLink"]


class RunnerLink(QObject):
    """Subscribe to one runner and relay its messages as Qt signals.

    Signals:
        subscribed: connected and ``subscribe`` sent (again after each reconnect).
        message_received(object): one hub message, typed (``runner.runstate.messages``: snapshot,
            update, history_end, bye; other types are not a run's and are not emitted).
        run_ended(str): the hub said ``bye`` (the run is over); the link then closes.
        connection_lost(str): could not connect, or the runner vanished without ``bye``.
    """

    subscribed = Signal()
    message_received = Signal(object)
    run_ended = Signal(str)
    connection_lost = Signal(str)

    def __init__(self, parent: QObject | None = None, *, connect_timeout_s: float = 15.0,
                 reconnect_attempts: int = 3, retry_interval_ms: int = 250) -> None:
        super().__init__(parent)
        self.socket_path: str | None = None
        self.lines_dropped = 0
        self.messages_received = 0
        self._history = True
        self._from_store = False
        self._connect_timeout_s = connect_timeout_s
        self._reconnect_attempts = reconnect_attempts
        self._retry_interval_ms = retry_interval_ms
        self._deadline = 0.0
        self._reconnects_left = 0
        self._was_subscribed = False
        self._closing = False
        self._ended = False
        self._pending = bytearray()
        self._draining = False
        self._socket = QLocalSocket(self)
        self._socket.setReadBufferSize(READ_BUFFER)
        self._socket.connected.connect(self._on_connected)
        self._socket.readyRead.connect(self._on_ready_read)
        self._socket.disconnected.connect(self._on_disconnected)
        self._socket.errorOccurred.connect(self._on_error)
        self._retry_timer = QTimer(self)
        self._retry_timer.setSingleShot(True)
        self._retry_timer.timeout.connect(self._connect_now)

    # ---- public --------------------------------------------------------------------

    def open(self, socket_path: str, history: bool = True, from_store: bool = False) -> None:
        """Connect to ``socket_path`` and subscribe; retries until ``connect_timeout_s``.
        ``from_store``: the hub replays no history, its ``history_end`` says where the store's
        ends (``Subscribe.from_store``; the caller reads it: ``StoreReads.stored_history``)."""
        self.close()
        self.socket_path = str(socket_path)
        self._history = history
        self._from_store = from_store
        self._closing = False
        self._ended = False
        self._was_subscribed = False
        self._reconnects_left = self._reconnect_attempts
        self._deadline = time.monotonic() + self._connect_timeout_s
        self._connect_now()

    def close(self) -> None:
        """Disconnect (the run goes on; nothing is sent to the runner)."""
        self._closing = True
        self._retry_timer.stop()
        self._pending.clear()
        if self._socket.state() != QLocalSocket.LocalSocketState.UnconnectedState:
            self._socket.abort()

    def is_connected(self) -> bool:
        return self._socket.state() == QLocalSocket.LocalSocketState.ConnectedState

    def send_stop(self, force: bool = False) -> bool:
        return self.send("stop", force=force)

    def send_dump_stacks(self) -> bool:
        return self.send("dump_stacks")

    def send(self, message_type: str, **fields: Any) -> bool:
        """Send one subscriber message; False when not connected."""
        if not self.is_connected():
            return False
        self._socket.write(protocol.encode(message_type, **fields))
        self._socket.flush()
        return True

    # ---- connection ------------------------------------------------------------------

    def _connect_now(self) -> None:
        if self._closing or not self.socket_path:
            return
        self._socket.abort()
        self._socket.connectToServer(self.socket_path)

    def _on_connected(self) -> None:
        self._pending.clear()
        self._socket.write(protocol.Subscribe(history=self._history, logs=True,
                                              from_store=self._from_store).encode())
        self._socket.flush()
        self._was_subscribed = True
        self._reconnects_left = self._reconnect_attempts
        self.subscribed.emit()

    def _on_error(self, error: QLocalSocket.LocalSocketError) -> None:
        if self._closing or self._ended:
            return
        if error == QLocalSocket.LocalSocketError.PeerClosedError:
            return  # handled by _on_disconnected
        if self._socket.state() == QLocalSocket.LocalSocketState.ConnectedState:
            return
        self._retry_or_give_up(self._socket.errorString())

    def _on_disconnected(self) -> None:
        if self._closing or self._ended:
            return
        # Read what is still buffered (a final update, bye) before deciding.
        self._drain()
        if self._ended or self._closing:
            return
        self._retry_or_give_up("the runner closed the connection without saying bye")

    def _retry_or_give_up(self, reason: str) -> None:
        if self._retry_timer.isActive():
            return
        if self._was_subscribed:
            if self._reconnects_left > 0:
                self._reconnects_left -= 1
                self._retry_timer.start(self._retry_interval_ms * 4)
                return
        elif time.monotonic() < self._deadline:
            self._retry_timer.start(self._retry_interval_ms)
            return
        self._closing = True
        self.connection_lost.emit(reason)

    # ---- reading ---------------------------------------------------------------------

    def _on_ready_read(self) -> None:
        if not self._draining:
            self._drain()

    def _drain(self) -> None:
        """Handle complete lines for at most ``SLICE_S``; continue later if more are waiting."""
        self._draining = True
        try:
            deadline = time.monotonic() + SLICE_S
            scan_from = 0
            while True:
                newline = self._pending.find(b"\n", scan_from)
                if newline < 0:
                    scan_from = len(self._pending)
                    if scan_from > protocol.MAX_LINE_BYTES:
                        # An oversized line: drop what we have and skip to its end.
                        self.lines_dropped += 1
                        self._pending.clear()
                        scan_from = 0
                    chunk = bytes(self._socket.read(READ_CHUNK).data()) if self._socket.bytesAvailable() else b""
                    if not chunk:
                        break
                    self._pending += chunk
                    continue
                line = bytes(self._pending[:newline])
                del self._pending[: newline + 1]
                scan_from = 0
                self._handle_line(line)
                if self._closing or self._ended:
                    break
                if time.monotonic() > deadline:
                    QTimer.singleShot(0, self._drain)
                    return
        finally:
            self._draining = False

    def _handle_line(self, line: bytes) -> None:
        if not line.strip():
            return
        try:
            message = decode_hub_line(line)
        except protocol.ProtocolError:
            self.lines_dropped += 1
            return
        self.messages_received += 1
        if message is None:
            return
        self.message_received.emit(message)
        if isinstance(message, Bye):
            self._ended = True
            self.run_ended.emit(message.reason)
            self._closing = True
            self._retry_timer.stop()
            self._socket.disconnectFromServer()
