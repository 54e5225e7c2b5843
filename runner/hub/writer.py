"""The hub's writer: the one thread, and the one SQLite connection, that writes the run store.

Every write and every history read runs on the thread "rankwatch-store", in the
order asked (a ``sqlite3`` connection must not be shared between threads), so a
replay that reads "everything so far" is ordered exactly against the commits.

What can go wrong, and what happens then (nothing here ever raises into the hub):

* **A row the store refuses** (ingest validates, so this is a backstop: a bug, a
  value no check foresaw): the batch's transaction is rolled back whole, so the
  batch is cut in halves and each half written again, down to single rows; only
  the refused rows are dropped, counted in ``refused_rows``. Good rows are never
  lost for a bad one.
* **The disk is full, or the store became unwritable** (SQLITE_FULL, an I/O error,
  read-only): the writer stops writing records and says why in ``incomplete``;
  every later record is counted in ``unstored`` instead. The run goes on (training
  must not suffer for telemetry), the hub tells the user once, and small writes
  (the run's end) are still tried, so the run can end recorded where there is room.
  To make that room, the writer keeps ``RESERVE_BYTES`` allocated next to the store
  (``runs.db-reserve``) and gives them back only when the run's end does not fit
  (``write_the_end``). Given back earlier, at the first refusal, the room went to
  whatever was filling the disk (a checkpoint still being written), and the end
  still found no room: seen in CI, a run left "running" after it ended.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import sqlite3
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from runner.store.store import ColumnValue, RecordBatch, RunStore, is_store_full

Result = TypeVar("Result")
BAD_ROW_ERRORS = (sqlite3.Error, ValueError, TypeError, OverflowError, UnicodeError)
"""What a row the store cannot take raises (sqlite3 binds values before SQLite sees them)."""
RESERVE_BYTES = 1 << 20
"""Room kept on the store's disk for the run's end (its row, its rank rows, a few events)."""
SWITCH_INTERVAL_SECONDS = 0.0005
"""The interpreter's switch interval in a process that runs a hub (``Hub.start``); Python's default
is 5 ms. SQLite runs without the GIL, and the writer thread gives the GIL up around every statement
it runs and every row it reads; taking it back waits for the busy event loop to let go, up to the
switch interval. Beside a thread running Python without pause, commits of 1,024 ranks' step
records (``tests/bench/bench_writer_convoy.py``) stored 21-22 k records/s at 5 ms, 56-64 k at
0.5 ms, 75-85 k with no busy thread; the busy thread did 14-33 % less meanwhile. A history read on
this thread took 0.9-43 s at 5 ms and 1.2-1.5 s at 0.5 ms (``tests/bench/PERFORMANCE.md``)."""
WRITER_CACHE_KIB = 16 << 10
"""The writer's page cache (SQLite's default is 2 MiB). Every commit of a big run touches one index
page per series it holds records of (``metrics_by_series``: 12,288 series at 1,024 ranks, spread
over ~48 MiB of index); with the default cache most of them were read back from the file, and the
writer thread spent more time in the kernel than in Python. 16 MiB took as much off as 64 MiB did
(``tests/bench/PERFORMANCE.md``), for a quarter of the memory; only pages in use are held."""


class StoreWriter:
    def __init__(self, store_path: Path) -> None:
        self.store_path = Path(store_path)
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rankwatch-store")
        self._store: RunStore | None = None
        self.incomplete: str | None = None
        """Why the store stopped taking records ("disk full", ...), or None while it takes them."""
        self.unstored = 0
        """Records not written because the store stopped taking them."""
        self.refused_rows = 0
        """Rows the store refused one by one (dropped; the rest of their batch was written)."""
        self.reserve_given_back = False
        """The reserve went to the run's end: rows refused before it may fit now."""

    async def call(self, function: Callable[..., Result], *args: Any) -> Result:
        """Run ``function(store, *args)`` on the writer thread (the store opened on first use)."""
        call = functools.partial(self._with_store, function, *args)
        return await asyncio.get_running_loop().run_in_executor(self._executor, call)

    def _with_store(self, function: Callable[..., Result], *args: Any) -> Result:
        if self._store is None:
            self._store = RunStore(self.store_path)
            self._store.connection.execute(f"PRAGMA cache_size=-{WRITER_CACHE_KIB}")
            self._keep_reserve()
        return function(self._store, *args)

    @property
    def reserve_path(self) -> Path:
        return self.store_path.with_name(self.store_path.name + "-reserve")

    def _keep_reserve(self) -> None:
        """Allocate the reserve (once per store; a disk already too full for it goes without)."""
        if self.reserve_path.exists():
            return
        try:
            descriptor = os.open(self.reserve_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except OSError:
            return
        try:
            os.posix_fallocate(descriptor, 0, RESERVE_BYTES)
        except (OSError, AttributeError):
            with contextlib.suppress(OSError):
                os.unlink(self.reserve_path)
        finally:
            os.close(descriptor)

    def _release_reserve(self) -> None:
        with contextlib.suppress(OSError):
            os.unlink(self.reserve_path)

    # ---- on the writer thread ---------------------------------------------------------------

    def commit(self, store: RunStore, run_id: int, batch: RecordBatch,
               rank_rows: list[tuple[int, dict[str, ColumnValue]]]) -> None:
        """Write ``batch`` and ``rank_rows`` in one transaction; see the module docstring for failures."""
        if self.incomplete is not None:
            self.unstored += len(batch)
            self._write_small(store, run_id, RecordBatch(), rank_rows)
            return
        try:
            store.write_batch(run_id, batch, rank_rows)
        except BAD_ROW_ERRORS as error:
            if self._stop_if_full(error, len(batch)):
                self._write_small(store, run_id, RecordBatch(), rank_rows)
                return
            self._write_in_halves(store, run_id, batch)
            self._write_small(store, run_id, RecordBatch(), rank_rows)

    def _write_in_halves(self, store: RunStore, run_id: int, batch: RecordBatch) -> None:
        if len(batch) == 0:
            return
        if len(batch) == 1:
            try:
                store.write_batch(run_id, batch)
            except BAD_ROW_ERRORS as error:
                if not self._stop_if_full(error, 1):
                    self.refused_rows += 1
            return
        for half in batch.halves():
            if self.incomplete is not None:
                self.unstored += len(half)
                continue
            try:
                store.write_batch(run_id, half)
            except BAD_ROW_ERRORS as error:
                if not self._stop_if_full(error, len(half)):
                    self._write_in_halves(store, run_id, half)

    def _write_small(self, store: RunStore, run_id: int, batch: RecordBatch,
                     rank_rows: list[tuple[int, dict[str, ColumnValue]]]) -> None:
        """Rank rows (and other small writes) are tried even on a full disk: they may fit."""
        if not rank_rows and not batch:
            return
        try:
            store.write_batch(run_id, batch, rank_rows)
        except BAD_ROW_ERRORS:
            for rank, values in rank_rows:  # one refused row must not keep the others out
                try:
                    store.write_batch(run_id, RecordBatch(), [(rank, values)])
                except BAD_ROW_ERRORS:
                    self.refused_rows += 1

    def _stop_if_full(self, error: BaseException, records: int) -> bool:
        if not self._note_if_full(error):
            return False
        self.unstored += records
        return True

    def _note_if_full(self, error: BaseException) -> bool:
        """Whether ``error`` says the store is full (or unwritable); the first such says why in ``incomplete``."""
        if not is_store_full(error):
            return False
        if self.incomplete is None:
            self.incomplete = describe_full(error)
        return True

    def try_write(self, function: Callable[..., Result], *args: Any, **kwargs: Any) -> Result | None:
        """``function(*args, **kwargs)``, a write of the run's own rows (its end, a node's state);
        None when the store refused it (when full: noted in ``incomplete``)."""
        try:
            return function(*args, **kwargs)
        except BAD_ROW_ERRORS as error:
            self._note_if_full(error)
            return None

    def write_the_end(self, function: Callable[..., object], *args: Any, **kwargs: Any) -> bool:
        """``function(*args, **kwargs)``, the write of the run's end; True when written. When the
        store refuses it for want of room, the reserve is given back (the room it kept is for
        this) and the end is tried once more."""
        for last_try in (False, True):
            try:
                function(*args, **kwargs)
                return True
            except BAD_ROW_ERRORS as error:
                if not self._note_if_full(error) or last_try or not self.reserve_path.exists():
                    return False
                self._release_reserve()
                self.reserve_given_back = True
        return False

    def close(self) -> None:
        """Close the store (on the writer thread) and end the thread."""
        def close_store() -> None:
            if self._store is not None:
                self._store.close()
                self._store = None

        self._executor.submit(close_store).result()
        self._executor.shutdown(wait=True)


def describe_full(error: BaseException) -> str:
    """``disk full`` / ``store unwritable (...)``: how a run's summary names it."""
    text = str(error).lower()
    code = getattr(error, "sqlite_errorcode", None)
    if (code is not None and code & 0xFF == 13) or "disk is full" in text or "no space" in text:
        return "disk full"
    return f"store unwritable ({error})"
