"""Qt-free view models of the Rankwatch window.

A view model holds what a panel shows and decides what an edit means; widgets
take it in ``__init__``, subscribe to its events and stay thin. Nothing here
imports Qt (an import-linter contract in ``pyproject.toml`` enforces it), so the
models are tested as plain Python.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

NOT_MEASURED = "–"
"""What a value that was not measured (``None``) reads as, everywhere."""


class Event:
    """A list of callbacks: the plain-Python stand-in for a Qt signal.

    Callbacks run synchronously, in connection order, on the thread that emits
    (always the GUI thread for these models).
    """

    def __init__(self) -> None:
        self._callbacks: list[Callable[..., Any]] = []

    def connect(self, callback: Callable[..., Any]) -> None:
        self._callbacks.append(callback)

    def disconnect(self, callback: Callable[..., Any]) -> None:
        """Raises: ValueError when ``callback`` was not connected."""
        self._callbacks.remove(callback)

    def emit(self, *args: Any) -> None:
        for callback in list(self._callbacks):
            callback(*args)
