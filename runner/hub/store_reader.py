"""The replay reader: a read-only connection to the store on a thread of its own.

A history replay reads its window a chunk at a time (``runner.hub.publisher``). On the
writer thread every read waited in line behind the ingest commits queued before it: at
1,024 ranks ~0.3 s a read for ~0.1 s of reading, so ~25 reads took ~10 s, longer than the
live updates queued behind the replay could wait (the subscriber was caught up from the
store again and again, then dropped: no ``history_end``). The store is in WAL mode, so a
reader on its own connection reads while the writer commits, and waits for no commit.

Only what a replay reads after its plan comes here: the plan (which rows are committed,
through which batch) stays on the writer thread, ordered exactly against the commits; the
rows it names (key at or below the last committed one) are in the store already, and read
here they are the same rows.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from runner.store.store import RunStore

Result = TypeVar("Result")


class StoreReader:
    """Runs read-only store functions on the ``rankwatch-replay`` thread (opened on first use)."""

    def __init__(self, store_path: Path) -> None:
        self.store_path = Path(store_path)
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rankwatch-replay")
        self._store: RunStore | None = None
        self._closed = False

    async def call(self, function: Callable[..., Result], *args: Any) -> Result:
        """Run ``function(store, *args)`` on the reader thread.

        Raises:
            RunNotFound, sqlite3.Error: the store cannot be opened read-only (``RunStore``).
        """
        call = functools.partial(self._with_store, function, *args)
        return await asyncio.get_running_loop().run_in_executor(self._executor, call)

    def _with_store(self, function: Callable[..., Result], *args: Any) -> Result:
        if self._store is None:
            self._store = RunStore(self.store_path, readonly=True)
        return function(self._store, *args)

    def close(self) -> None:
        """Close the connection after the reads already handed over; does not wait for them."""
        if self._closed:
            return
        self._closed = True

        def close_store() -> None:
            if self._store is not None:
                self._store.close()
                self._store = None

        self._executor.submit(close_store)
        self._executor.shutdown(wait=False)
