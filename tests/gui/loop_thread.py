"""An asyncio event loop in a named daemon thread: where a GUI test runs the real runner.

The runner is its own process in real life; in a GUI test it runs in this process, on
its own loop in its own thread, so the test can drive it (end a rank, make it vanish)
while the Qt event loop runs the window under test on the main thread.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

Result = TypeVar("Result")
CALL_TIMEOUT_S = 30.0


class LoopThread:
    """One event loop, started at once, run until :meth:`stop`."""

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_forever()
        finally:
            self.loop.close()

    def run(self, coroutine: Awaitable[Result], timeout: float = CALL_TIMEOUT_S) -> Result:
        """Run ``coroutine`` on the loop and wait for its result (from any other thread).

        Raises:
            TimeoutError: it did not finish within ``timeout`` seconds.
            Whatever the coroutine raises.
        """
        return asyncio.run_coroutine_threadsafe(_awaited(coroutine), self.loop).result(timeout)

    def call(self, function: Callable[..., Result], *args: Any, timeout: float = CALL_TIMEOUT_S) -> Result:
        """Call ``function(*args)`` on the loop's thread and wait for its result."""

        async def call() -> Result:
            return function(*args)

        return self.run(call(), timeout)

    def stop(self, timeout: float = 10.0) -> None:
        """Cancel what is still pending on the loop, stop it and join the thread."""
        if not self.thread.is_alive():
            return

        async def cancel_pending() -> None:
            tasks = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        try:
            self.run(cancel_pending(), timeout)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(timeout)


async def _awaited(awaitable: Awaitable[Result]) -> Result:
    return await awaitable
