"""The reporter: one daemon thread that carries a worker's telemetry to the hub.

Shape (as every background producer in Rankwatch): a named daemon thread
("rankwatch-reporter") with a stop event. It drains the record buffer into
``metrics`` batches, sends queued control messages (exception, param_hash,
stacks, exit) and, every ``HEARTBEAT_EVERY``, a ``heartbeat`` with the current
step and the cumulative drop count; at the same beat it answers a runner's ask
for the rank's stacks (``_stacks``: dumped here, with the GIL held).

When it wakes (every wake-up of a thread preempts a rank on a busy
machine, and the all-reduce makes every other rank wait for it): never on a fixed
short tick. It sleeps until the first record arrives (the buffer wakes it), then
lets records gather for at most ``flush_latency`` and sends them in one batch;
while records keep coming it wakes once per ``flush_latency``, and an idle worker
wakes only for its heartbeat. ``flush_latency`` is ``FLUSH_LATENCY`` (40 ms) while
someone watches the run live and longer while nobody does: the hub says which in a
``pace`` message, read at each heartbeat. A burst that fills the buffer to
``_buffer.WAKE_THRESHOLD``, a control message and ``close`` wake it at once. The
thread also runs under ``SCHED_BATCH`` (Linux): its wake-ups do not preempt the
training thread; it still gets its fair share of the CPU.

Failure handling, because telemetry must never hurt training:

* hub unreachable or connection broken: reconnect with exponential backoff
  (``BACKOFF_MIN`` .. ``BACKOFF_MAX``); every connection starts with ``hello``.
  Records stay in the bounded buffer meanwhile; beyond its bound they are
  dropped and counted, and the count reaches the hub in a later heartbeat.
* a batch whose send failed is sent again first on the next connection, so a
  broken connection loses nothing that was already taken from the buffer.
* device values (``_values.Pending``) are held back until their copy is done.
* ``close(timeout)`` flushes with a hard deadline and never hangs exit.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections import deque
from typing import Any

from rankwatch import _flight_recorder, _stacks, protocol
from rankwatch._activity import TrainingActivity
from rankwatch._buffer import KIND_GPU_MEMORY, KIND_LOG, KIND_STEP, WAKE_THRESHOLD, RecordBuffer
from rankwatch._connection import Connection
from rankwatch._threads import settle_background_thread
from rankwatch._values import Pending

THREAD_NAME = "rankwatch-reporter"
FLUSH_LATENCY = 0.04
"""The longest a record waits in the worker before it is sent, until the hub says
otherwise (``pace``). With the hub's own publishing cap (at most every 50 ms per
subscriber) it gives a p95 freshness of about 75 ms (``tests/bench/bench_freshness.py``,
target <= 100 ms); a 20 ms tick gave 62 ms at twice the wake-ups."""
MAX_FLUSH_LATENCY = 2.0
"""A ``pace`` asking for more is taken as this: records must still reach the hub well
within a heartbeat or two (the stall monitor reads progress from them)."""
DEVICE_POLL = 0.01
"""How often the final flush looks again at device copies still in flight."""
HEARTBEAT_EVERY = 1.0
BACKOFF_MIN = 0.2
BACKOFF_MAX = 5.0
CONNECT_TIMEOUT = 2.0
SEND_TIMEOUT = 5.0
"""A hub that does not read for this long is treated as gone (reconnect)."""
MAX_ITEMS_PER_MESSAGE = 2000
"""About 150 KB per ``metrics`` line, far below ``protocol.MAX_LINE_BYTES``."""
MAX_DEFERRED = 10000
"""Records waiting for device copies beyond this are dropped (a stuck device)."""
MAX_CONTROL = 1000
"""Control messages held while disconnected (thread exceptions, hashes, ...)."""
MAX_RECEIVED = 65536
"""Bytes kept of an unfinished line from the hub (a ``pace`` line is ~60): more is not
a message this worker reads, and is dropped rather than held for the whole run."""


class _NotReady(Exception):
    """A record still waits for a device-to-host copy."""


class Reporter:
    """Sends one worker's hello, metrics, heartbeats and control messages to the hub.

    ``send`` and ``close`` may be called from any thread; everything else runs on
    the reporter thread.
    """

    def __init__(
        self,
        address: str,
        hello: protocol.Hello,
        buffer: RecordBuffer,
        rank: int,
        stacks_path: str | None = None,
    ):
        self._address = address
        self._hello = hello
        self._buffer = buffer
        self._rank = rank
        self._stacks_path = stacks_path
        self._stacks_size = _file_size(stacks_path)
        self._control: deque[bytes] = deque()
        self._early: list[protocol.Message] | None = None
        """Control messages sent before ``identify`` (a spawned rank learning its rank): encoded then."""
        self._early_lock = threading.Lock()
        self._connection: Connection | None = None
        self._unsent: deque[tuple[bytes, int]] = deque()
        """Encoded ``metrics`` lines not yet sent, with the number of records they hold."""
        self._sent = 0
        """Metric records handed to the socket so far (reported in heartbeats as ``sent``): a step
        row counts the records the hub makes of it (``protocol.step_row_size``)."""
        self._deferred: list[tuple] = []
        self._lost = 0
        self._last_step: Any = None
        self._last_step_at = time.monotonic()
        """When ``_last_step`` last went up (or the reporter started): how long the rank has gone stepless."""
        self._activity = TrainingActivity(_training_thread, _batches_fetched)
        self._streaming = False
        """The last drain found records: more are likely within ``flush_latency``."""
        self.flush_latency = FLUSH_LATENCY
        """How long records may gather before a batch is sent: the hub's latest ``pace``."""
        self._received = b""
        """Bytes from the hub not yet a whole line."""
        self._next_connect = 0.0
        self._backoff = BACKOFF_MIN
        self._next_heartbeat = 0.0
        self._deadline: float | None = None
        self._last_message: bytes | None = None
        self._owner_pid = os.getpid()
        self._torch_version_known = False
        self._stop = threading.Event()
        self._wake = threading.Event()
        """Set by the buffer (first record, burst), ``send`` and ``close``."""
        self._thread = threading.Thread(target=self._run, name=THREAD_NAME, daemon=True)
        self.connections = 0
        """How many times a connection was made (tests and diagnostics)."""

    # -- any thread -----------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    def hold_until_identified(self) -> None:
        """Keep control messages (a parameter digest) unencoded until ``identify`` gives the rank
        they carry; records wait in the buffer anyway, as the thread has not started."""
        if self._early is None:
            self._early = []

    def identify(self, hello: protocol.Hello, rank: int, stacks_path: str | None) -> None:
        """Before ``start``: the process turned out to be ``rank`` (``_spawn.LateRank``)."""
        self._hello = hello
        self._rank = rank
        self._stacks_path = stacks_path
        self._stacks_size = _file_size(stacks_path)
        with self._early_lock:
            for message in self._early or ():
                if hasattr(message, "rank"):
                    message.rank = rank
                self._control.append(message.encode())
            self._early = None

    @property
    def rank(self) -> int:
        return self._rank

    def send(self, message: protocol.Message) -> None:
        """Queue a control message; sent in order, before ``close`` returns."""
        if len(self._control) + len(self._early or ()) >= MAX_CONTROL:
            self._lost += 1
            return
        if self._early is not None:
            with self._early_lock:
                if self._early is not None:
                    self._early.append(message)
                    return
        self._control.append(message.encode())
        self._wake.set()

    @property
    def dropped(self) -> int:
        """Records lost so far: queue overflow plus device copies that never completed."""
        return self._buffer.dropped + self._lost

    def close(self, timeout: float = 2.0, last_message: bytes | None = None) -> bool:
        """Flush what is queued, send ``last_message`` (the ``exit``) and stop.

        Waits at most ``timeout`` seconds. Returns True when the thread finished
        in time; otherwise the daemon thread is abandoned and cannot delay the
        interpreter's exit.
        """
        if os.getpid() != self._owner_pid or not self._thread.is_alive():
            return False
        self._last_message = last_message
        self._deadline = time.monotonic() + max(0.0, timeout - 0.05)
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def forget_in_child(self) -> None:
        """After ``fork()`` in the child: no thread runs here, so drop the socket and state."""
        connection, self._connection = self._connection, None
        if connection is not None:
            connection.detach_in_child()
        self._control.clear()
        self._unsent.clear()
        self._deferred.clear()

    # -- reporter thread ------------------------------------------------------------

    def _run(self) -> None:
        settle_background_thread(THREAD_NAME)
        self._buffer.waker = self._wake.set
        try:
            while not self._stop.is_set():
                self._tick()
                self._wait_for_work()
            self._final_flush()
        except Exception as exc:  # a bug here must not reach the user's training
            _warn(f"telemetry stopped ({type(exc).__name__}: {exc})")
        finally:
            self._disconnect()

    def _wait_for_work(self) -> None:
        """Sleep until something is worth sending, the heartbeat is due, or ``close``.

        Records gather for at most ``flush_latency`` after the first one arrived (a
        burst, a control message or ``close`` end the wait early). While the last send
        carried records (a training loop logging steadily) the thread does not ask the
        buffer to wake it for the next record: it sleeps ``flush_latency`` and sends what
        came, one wake-up per batch instead of two. Nothing spins: every wait is on
        ``_wake`` with a timeout.
        """
        buffer, wake = self._buffer, self._wake
        if self._connection is None:  # records and control messages wait; the next try is the backoff's
            wake.clear()
            if not self._stop.is_set():
                wake.wait(max(0.0, min(self._next_connect - time.monotonic(), HEARTBEAT_EVERY)))
            return
        if not (len(buffer) or self._deferred or self._control or self._streaming):
            wake.clear()
            buffer.wake_at = 1  # the first record wakes this thread
            if not (len(buffer) or self._control or self._stop.is_set()):
                wake.wait(max(0.0, self._next_heartbeat - time.monotonic()))
            buffer.wake_at = WAKE_THRESHOLD
            if not (len(buffer) or self._deferred):
                return  # the heartbeat is due, a control message or close
        deadline = time.monotonic() + self.flush_latency
        while True:
            wake.clear()
            if self._stop.is_set() or self._control or len(buffer) >= WAKE_THRESHOLD:
                return
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            wake.wait(remaining)

    def _tick(self) -> None:
        if self._connection is None:
            self._try_connect(CONNECT_TIMEOUT)
        if self._connection is None:
            return
        self._pump(SEND_TIMEOUT)
        now = time.monotonic()
        if self._connection is not None and now >= self._next_heartbeat:
            self._next_heartbeat = now + HEARTBEAT_EVERY
            if not self._read_from_hub():
                self._disconnect()
                return
            if self._stacks_path is not None:
                _stacks.answer_ask(self._stacks_path)
            self._note_stack_dump()
            self._send_heartbeat(SEND_TIMEOUT)

    def _final_flush(self) -> None:
        """Send everything left, then the last message, before the deadline.

        A connection that breaks meanwhile is reopened (a hub restarting); a hub
        that does not accept at once is given up on, so exit is never delayed.
        """
        deadline = self._deadline if self._deadline is not None else time.monotonic() + 1.0
        for _ in range(3):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            if self._connection is None:
                self._next_connect = 0.0
                self._try_connect(max(0.01, min(CONNECT_TIMEOUT, remaining)))
                if self._connection is None:
                    return
            if self._flush_once(deadline):
                return

    def _flush_once(self, deadline: float) -> bool:
        """One attempt at the final flush; False when the connection broke on the way."""
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return True
            self._pump(remaining, include_control=False)
            if self._connection is None:
                return False
            if not self._deferred:
                break
            time.sleep(DEVICE_POLL)  # device copies still in flight
        # The last heartbeat carries the final drop count; the last message (``exit``) ends the stream.
        self._note_stack_dump(max(0.01, deadline - time.monotonic()))
        self._send_heartbeat(max(0.01, deadline - time.monotonic()))
        self._pump(max(0.01, deadline - time.monotonic()))
        if self._connection is None:
            return False
        if self._last_message is not None and not self._control:
            return self._send(self._last_message, deadline)
        return True

    def _try_connect(self, timeout: float) -> None:
        now = time.monotonic()
        if now < self._next_connect:
            return
        try:
            connection = Connection.open(self._address, timeout)
        except (OSError, ValueError):
            self._next_connect = now + self._backoff
            self._backoff = min(self._backoff * 2, BACKOFF_MAX)
            return
        if not self._torch_version_known:
            self._hello.torch = _torch_version()
            self._torch_version_known = True
        self._connection = connection
        self._received = b""
        self.flush_latency = FLUSH_LATENCY  # until this hub says otherwise
        try:
            connection.send(self._hello.encode(), SEND_TIMEOUT)
        except OSError:
            self._disconnect()
            self._next_connect = now + self._backoff
            self._backoff = min(self._backoff * 2, BACKOFF_MAX)
            return
        self.connections += 1
        self._backoff = BACKOFF_MIN
        self._next_heartbeat = 0.0

    def _disconnect(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            try:
                connection.close()
            except OSError:
                pass

    def _pump(self, timeout: float, include_control: bool = True) -> None:
        """Send, in order: batches left over from a broken connection, metrics, control messages."""
        deadline = time.monotonic() + timeout
        if self._unsent and not self._send_unsent(deadline):
            return
        items, sizes = self._drain_items()
        self._streaming = bool(items)
        for start in range(0, len(items), MAX_ITEMS_PER_MESSAGE):
            end = start + MAX_ITEMS_PER_MESSAGE
            self._unsent.append((protocol.encode_metric_items(self._rank, items[start:end]), sum(sizes[start:end])))
        if self._unsent and not self._send_unsent(deadline):
            return
        control = self._control
        while include_control and control and self._connection is not None:
            if not self._send(control[0], deadline):
                return
            control.popleft()

    def _send_unsent(self, deadline: float) -> bool:
        while self._unsent:
            payload, count = self._unsent[0]
            if not self._send(payload, deadline):
                return False
            self._unsent.popleft()
            self._sent += count
        return True

    def _read_from_hub(self) -> bool:
        """Take what the hub sent (its ``pace``); False when it closed the connection.

        Read once per heartbeat, not by a thread of its own: a change of pace can wait
        a second, a wake-up per message could not. Anything else the hub
        might send is ignored, as before ``pace`` existed.
        """
        connection = self._connection
        if connection is None:
            return False
        data = connection.read_available()
        if data is None:
            return False
        if not data:
            return True
        *lines, self._received = (self._received + data).split(b"\n")
        if len(self._received) > MAX_RECEIVED:
            self._received = b""
        for line in lines:
            try:
                message = protocol.decode_message(line, frozenset({protocol.Pace.TYPE}))
            except protocol.ProtocolError:
                continue
            if isinstance(message, protocol.Pace):
                self.flush_latency = min(MAX_FLUSH_LATENCY, message.flush_latency)
        return True

    def _send(self, payload: bytes, deadline: float) -> bool:
        connection = self._connection
        if connection is None:
            return False
        try:
            connection.send(payload, max(0.01, deadline - time.monotonic()))
        except OSError:
            self._disconnect()
            return False
        return True

    def _send_heartbeat(self, timeout: float) -> None:
        working = self._activity.sample(time.monotonic() - self._last_step_at)
        heartbeat = protocol.Heartbeat(self._rank, time.time(), self._last_step, self.dropped, self._sent, working)
        self._send(heartbeat.encode(), time.monotonic() + timeout)

    def _note_stack_dump(self, timeout: float = SEND_TIMEOUT) -> None:
        """Tell the hub when the faulthandler file grew (a dump was written on ``STACK_SIGNAL``).

        Sent directly, not queued, so that it precedes an ``exit`` already queued.
        """
        if self._stacks_path is None:
            return
        size = _file_size(self._stacks_path)
        if size is not None and size != self._stacks_size:
            self._stacks_size = size
            notice = protocol.StacksWritten(self._rank, time.time(), self._stacks_path)
            self._send(notice.encode(), time.monotonic() + timeout)
            record = _flight_recorder.snapshot()  # the same request asks for the collectives' view
            if record is not None:
                self._send(protocol.FlightRecord(self._rank, time.time(), record).encode(),
                           time.monotonic() + timeout)

    # -- records to protocol items ----------------------------------------------------

    def _drain_items(self) -> tuple[list[list], list[int]]:
        """The wire items of every record ready now, and how many records each makes at the hub.

        A ``rankwatch.log`` call is one item per value; a step of the zero-code instrumentation is one
        step row (``protocol.STEP_ROW_LENGTH``: the buffer's step record less its kind, the loss and
        the phases read),
        which the hub expands into the step's records and derives samples per second and compute time
        from. Records whose device values are still being copied wait for a later call.
        """
        records = self._deferred
        self._deferred = []
        records.extend(self._buffer.drain())
        items: list[list] = []
        sizes: list[int] = []
        last_step = self._last_step
        longest = protocol.MAX_NAME_CHARS
        for record in records:
            try:
                step = record[2]
                if isinstance(step, Pending):
                    step = _read(step)
                if type(step) is int and (last_step is None or step > last_step):
                    last_step = step  # progress, even while the record's values are still being copied
                if record[0] == KIND_STEP:
                    _kind, t, _step, loss, step_time, data_wait, samples, cpu_wait, skipped, phases = record
                    loss = _read(loss)
                    row = [t, step, loss, step_time, data_wait, samples, cpu_wait, skipped, _read(phases)]
                    items.append(row)
                    sizes.append(protocol.step_row_size(row))
                elif record[0] == KIND_GPU_MEMORY:
                    t, auto = record[1], protocol.SOURCE_AUTO
                    measured = [[t, step, name, value, auto]
                                for name, value in zip(protocol.GPU_MEMORY_METRICS, record[3:], strict=False) if value is not None]
                    items += measured
                    sizes += [1] * len(measured)
                elif record[0] == KIND_LOG:
                    ready = {name: _read(value) for name, value in record[3].items()}
                    t, source = record[1], protocol.SOURCE_LOG
                    # a name too long for the store goes cut just past the bound: the hub rejects that record
                    # alone and says so (whole, it could make the line too long, costing every record in it)
                    items += ([t, step, name if len(name) <= longest else name[:longest + 1], value, source]
                              for name, value in ready.items())
                    sizes += [1] * len(ready)
            except _NotReady:
                self._deferred.append(record)
        if last_step != self._last_step:
            self._last_step = last_step
            self._last_step_at = time.monotonic()
        overflow = len(self._deferred) - MAX_DEFERRED
        if overflow > 0:
            del self._deferred[:overflow]
            self._lost += overflow
        return items, sizes


def _read(value: Any) -> Any:
    """A plain number from a captured value.

    Raises:
        _NotReady: a device copy is still in flight.
    """
    if isinstance(value, Pending):
        if not value.ready():
            raise _NotReady
        return value.value()
    return value


def _torch_version() -> str | None:
    """torch's installed version, read from package metadata: importing torch costs seconds."""
    try:
        from importlib.metadata import PackageNotFoundError, version
    except ImportError:
        return None
    try:
        return version("torch")
    except PackageNotFoundError:
        return None
    except Exception:
        return None


def _file_size(path: str | None) -> int | None:
    if path is None:
        return None
    try:
        return os.stat(path).st_size
    except OSError:
        return None


def _warn(message: str) -> None:
    """One line on stderr, never a traceback: the user's output stays readable."""
    try:
        sys.stderr.write(f"rankwatch: {message}\n")
    except Exception:
        pass


def _training_thread() -> int | None:
    """The thread that ran the last step, as the instrumentation's clock knows it (None: unknown)."""
    return getattr(getattr(sys.modules.get("rankwatch"), "_clock", None), "thread", None)


def _batches_fetched() -> int | None:
    """DataLoader batches fetched so far, as the instrumentation counts them (None without it)."""
    data = getattr(getattr(sys.modules.get("rankwatch"), "_clock", None), "data", None)
    return getattr(data, "batches", None)
