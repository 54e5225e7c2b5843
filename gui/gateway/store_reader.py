"""The GUI's one way into the run store: one background thread reads, the GUI thread gets the results.

Widgets and models never open SQLite. They hand the reader a *read* (a function of a
read-only ``RunStore``, from ``gui.gateway.store_reads``) and get its result, or the
words of what went wrong, back on the GUI thread through a queued signal. Reads run one
at a time, in the order they were asked for, on the thread ``rankwatch-store-reader``;
periodic reads (the runs list) run between them at their interval. A read opens the
store for itself (``RANKWATCH_HOME`` decides which one; opening is cheap), so no
connection outlives it and no two threads share one.

A result for an object Qt has deleted meanwhile (a closed panel) is dropped, not
delivered. What can fail is the read's business: its exception's message goes to
``on_error`` (never a traceback dialog); a store that does not exist yet can be read as
a default value instead (``when_no_store``).
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar

import shiboken6
from PySide6.QtCore import QCoreApplication, QObject, QThread, Signal

from runner.store.store import RunNotFound, RunStore

THREAD_NAME = "rankwatch-store-reader"

__all__ = ["Poll", "StoreReader", "store_reader"]

Result = TypeVar("Result")
Read = Callable[[RunStore], Result]
_NO_DEFAULT: Any = object()


@dataclass(eq=False)
class _Job(Generic[Result]):
    read: Read[Result]
    on_done: Callable[[Result], None]
    on_error: Callable[[str], None] | None
    owner: QObject | None
    when_no_store: Any = _NO_DEFAULT
    store_path: Path | None = None


@dataclass(eq=False)
class Poll(Generic[Result]):
    """A read repeated every ``interval_s`` seconds; its result is delivered when it changed."""

    job: _Job[Result]
    interval_s: float
    reader: StoreReader
    due: float = 0.0
    last: Any = _NO_DEFAULT
    stopped: bool = False
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def now(self) -> None:
        """Read at once, and deliver the result even when it did not change."""
        with self._lock:
            self.last = _NO_DEFAULT
            self.due = 0.0
        self.reader._wake()

    def stop(self) -> None:
        """No more reads (one under way is not delivered)."""
        self.stopped = True
        self.reader._forget(self)

    def _changed(self, value: Any) -> bool:
        with self._lock:
            if self.last is not _NO_DEFAULT and value == self.last:
                return False
            self.last = value
            return True


class StoreReader(QObject):
    """The one background reader (see the module); :func:`store_reader` gives the shared one."""

    _delivered = Signal(object)

    def __init__(self) -> None:
        super().__init__()
        self._jobs: queue.SimpleQueue[_Job[Any] | None] = queue.SimpleQueue()
        self._polls: list[Poll[Any]] = []
        self._polls_lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()
        self._delivered.connect(self._on_delivered)

    # ---- what the GUI asks for ---------------------------------------------------------------

    def read(self, read: Read[Result], on_done: Callable[[Result], None],
             on_error: Callable[[str], None] | None = None, *, owner: QObject | None = None,
             when_no_store: Any = _NO_DEFAULT) -> None:
        """Run ``read`` on the reader's thread; ``on_done(result)`` or ``on_error(message)`` on the
        GUI thread (neither once ``owner`` has been deleted)."""
        self._start()
        self._jobs.put(_Job(read, on_done, on_error, owner, when_no_store))

    def every(self, interval_s: float, read: Read[Result], on_result: Callable[[Result], None],
              on_error: Callable[[str], None] | None = None, *, owner: QObject | None = None,
              when_no_store: Any = _NO_DEFAULT, store_path: Path | None = None) -> Poll[Result]:
        """Run ``read`` now and every ``interval_s`` seconds until the poll is stopped; a result
        equal to the last one delivered is not delivered again."""
        poll = Poll(_Job(read, on_result, on_error, owner, when_no_store, store_path), interval_s, self)
        with self._polls_lock:
            self._polls.append(poll)
        self._start()
        self._wake()
        return poll

    # ---- the reader's thread ---------------------------------------------------------------

    def _start(self) -> None:
        with self._start_lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._serve, name=THREAD_NAME, daemon=True)
                self._thread.start()

    def _wake(self) -> None:
        self._jobs.put(None)

    def _forget(self, poll: Poll[Any]) -> None:
        with self._polls_lock:
            if poll in self._polls:
                self._polls.remove(poll)

    def _serve(self) -> None:
        while True:
            for poll in self._due_polls():
                self._run(poll.job, poll)
            try:
                job = self._jobs.get(timeout=self._until_next_poll())
            except queue.Empty:
                continue
            if job is not None:
                self._run(job, None)

    def _due_polls(self) -> list[Poll[Any]]:
        now = time.monotonic()
        with self._polls_lock:
            due = [poll for poll in self._polls if poll.due <= now]
        for poll in due:
            poll.due = now + poll.interval_s
        return due

    def _until_next_poll(self) -> float | None:
        with self._polls_lock:
            if not self._polls:
                return None
            return max(0.0, min(poll.due for poll in self._polls) - time.monotonic())

    def _run(self, job: _Job[Any], poll: Poll[Any] | None) -> None:
        try:
            with RunStore(job.store_path, readonly=True) as store:
                value = job.read(store)
        except RunNotFound as error:
            if job.when_no_store is _NO_DEFAULT:
                self._deliver(job, poll, error=str(error))
            else:
                self._deliver(job, poll, value=job.when_no_store)
        except Exception as error:  # any read's failure is told, never raised into Qt
            self._deliver(job, poll, error=str(error) or type(error).__name__)
        else:
            self._deliver(job, poll, value=value)

    def _deliver(self, job: _Job[Any], poll: Poll[Any] | None, *, value: Any = None, error: str | None = None) -> None:
        if poll is not None and (poll.stopped or (error is None and not poll._changed(value))):
            return
        callback, result = (job.on_done, value) if error is None else (job.on_error, error)
        if callback is None:
            return
        try:
            self._delivered.emit((job, poll, callback, result))
        except RuntimeError:  # the reader itself was deleted (the window closed) during the read: nobody to tell
            pass

    # ---- the GUI thread ----------------------------------------------------------------------

    def _on_delivered(self, payload: tuple[_Job[Any], Poll[Any] | None, Callable[[Any], None], Any]) -> None:
        job, poll, callback, value = payload
        if poll is not None and poll.stopped:
            return
        if job.owner is not None and not shiboken6.isValid(job.owner):
            if poll is not None:
                poll.stop()  # its panel was closed meanwhile: no more reads for it
            return
        callback(value)


_reader: StoreReader | None = None


def store_reader() -> StoreReader:
    """The process's one reader (created on the GUI thread at first use).

    Raises:
        RuntimeError: there is no QApplication yet, or this is not its thread.
    """
    global _reader
    application = QCoreApplication.instance()
    if application is None or QThread.currentThread() != application.thread():
        raise RuntimeError("the store reader is created on the GUI thread, once the application exists")
    if _reader is None:
        _reader = StoreReader()
    return _reader
