"""Redraw a panel on a timer, only after its model changed: never once per message.

Several panels of the monitor (the rank table, the log view, the nodes and the
diagnosis tabs) take model events far faster than they can redraw. Each one
used to keep a dirty flag and a QTimer of its own; a :class:`RefreshThrottle`
owns both. The panel tells it which events make it dirty (``watch``) and how to
redraw (the ``refresh`` callable, which calls ``mark_clean`` first, so a direct
call clears the flag too). On each tick the throttle redraws when dirty, or when
``also_when`` says so (heartbeat ages tick on). With ``only_when_visible`` a
hidden panel (a tab not in front) waits, and catches up when it is shown.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QEvent, QObject, QTimer
from PySide6.QtWidgets import QWidget


class RefreshThrottle(QObject):
    """A panel's dirty flag and refresh timer (``hz`` ticks a second, started at once)."""

    def __init__(self, panel: QWidget, refresh: Callable[[], Any], hz: float, *,
                 only_when_visible: bool = False, also_when: Callable[[], bool] | None = None) -> None:
        super().__init__(panel)
        self._panel = panel
        self._refresh = refresh
        self._only_when_visible = only_when_visible
        self._also_when = also_when
        self.dirty = True
        self.timer = QTimer(panel)
        self.timer.setInterval(int(1000 / hz))
        self.timer.timeout.connect(self._on_timeout)
        self.timer.start()
        if only_when_visible:
            panel.installEventFilter(self)  # hidden tabs catch up when shown

    def watch(self, *events: Any) -> None:
        """Mark dirty whenever one of ``events`` (model events or Qt signals) fires."""
        for event in events:
            event.connect(self._on_changed)

    def mark_dirty(self) -> None:
        """Redraw on the next tick."""
        self.dirty = True

    def mark_clean(self) -> None:
        """The panel is redrawing now (the first thing its ``refresh`` does)."""
        self.dirty = False

    def _on_changed(self, *_args: Any) -> None:
        self.dirty = True

    def _on_timeout(self) -> None:
        due = self.dirty or (self._also_when is not None and self._also_when())
        if due and (not self._only_when_visible or self._panel.isVisible()):
            self._refresh()

    def eventFilter(self, _watched: QObject, event: QEvent) -> bool:
        # Installed on the panel only: its Show event, before the panel's own showEvent.
        if event.type() == QEvent.Type.Show and self.dirty:
            self._refresh()
        return False
