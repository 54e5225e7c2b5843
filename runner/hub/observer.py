"""What the hub tells the rest of the runner: one observer interface instead of callback slots.

An observer subclasses ``HubObserver`` and overrides what it needs (every method
here does nothing), then ``hub.add_observer(observer)``. The run itself, failure
triage's evidence (``runner.diagnosis.evidence``), the remote nodes
(``runner.remote.head``) and the diagnosis monitors are observers.

Every call comes on the runner's event loop, after the hub has taken the message
in (its records are in the pending batch, the live model is updated). An observer
must not block; one that raises is reported once (a ``warning`` event) and the hub
goes on.
"""

from __future__ import annotations

from collections.abc import Callable

from rankwatch.protocol import AgentHello, Hello, LogLine, Message


class HubObserver:
    def on_hello(self, hello: Hello) -> None:
        """A worker said hello (directly, or forwarded by its node's agent)."""

    def on_message(self, message: Message) -> None:
        """Any other worker or agent message (metrics, heartbeat, exception, exit, node_exit, ...)."""

    def on_log(self, line: LogLine) -> None:
        """A captured output line: a rank's (``line.rank``) or the launcher's (``None``)."""

    def on_worker_lost(self, rank: int, t: float) -> None:
        """A rank ended without an exit message at ``t``: its connection dropped, or its node was lost."""

    def on_agent_connected(self, hello: AgentHello) -> None:
        """A remote node's agent connected over TCP with the run's token."""

    def on_agent_closed(self, node_rank: int | None) -> None:
        """That agent's connection ended."""

    def on_stop_requested(self, force: bool) -> None:
        """A subscriber asked to stop the run (``force``: now, no grace period)."""

    def on_dump_stacks(self) -> None:
        """A subscriber asked for every rank's stacks."""


class Observers(HubObserver):
    """The hub's observers, called in the order they were added."""

    def __init__(self, on_error: Callable[[str], None] | None = None) -> None:
        """``on_error`` gets one line the first time an observer's method raises."""
        self._observers: list[HubObserver] = []
        self._on_error = on_error
        self._failed: set[tuple[str, str]] = set()

    def add(self, observer: HubObserver) -> None:
        """Raises:
            TypeError: ``observer`` is not a ``HubObserver`` (it would miss the methods it does
                not define, each call failing at run time instead of once here).
        """
        if not isinstance(observer, HubObserver):
            raise TypeError(f"{type(observer).__name__} is not a HubObserver: subclass it")
        self._observers.append(observer)

    def remove(self, observer: HubObserver) -> None:
        if observer in self._observers:
            self._observers.remove(observer)

    def _each(self, method: str, *args: object) -> None:
        for observer in list(self._observers):
            try:
                getattr(observer, method)(*args)
            except Exception as error:  # one broken observer must not stop ingestion
                key = (type(observer).__name__, method)
                if key not in self._failed and self._on_error is not None:
                    self._failed.add(key)
                    self._on_error(f"{type(observer).__name__}.{method} failed: {type(error).__name__}: {error}")

    def on_hello(self, hello: Hello) -> None:
        self._each("on_hello", hello)

    def on_message(self, message: Message) -> None:
        self._each("on_message", message)

    def on_log(self, line: LogLine) -> None:
        self._each("on_log", line)

    def on_worker_lost(self, rank: int, t: float) -> None:
        self._each("on_worker_lost", rank, t)

    def on_agent_connected(self, hello: AgentHello) -> None:
        self._each("on_agent_connected", hello)

    def on_agent_closed(self, node_rank: int | None) -> None:
        self._each("on_agent_closed", node_rank)

    def on_stop_requested(self, force: bool) -> None:
        self._each("on_stop_requested", force)

    def on_dump_stacks(self) -> None:
        self._each("on_dump_stacks")

