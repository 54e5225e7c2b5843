"""A legend strip shared by several charts: one entry per rank (or GPU), click to toggle.

With dozens of ranks, a pyqtgraph legend inside every plot covers the data and is
repainted with every frame. This strip is an ordinary widget outside the plots,
painted only when an entry changes: click an entry to show or hide that rank's
curves on every chart, double-click to show only that rank (again: show all).
"""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtCore import QPoint, QRect, QSize, Qt, Signal
from PySide6.QtGui import QColor, QMouseEvent, QPainter, QPaintEvent, QPalette, QResizeEvent
from PySide6.QtWidgets import QSizePolicy, QWidget

_SWATCH = 14
_PAD = 4
_GAP = 10


@dataclass
class _Entry:
    key: int
    label: str
    color: QColor
    visible: bool = True
    rect: QRect | None = None


class LegendBar(QWidget):
    """Entries laid out in rows that wrap with the widget's width.

    Signals:
        visibility_changed(int, bool): an entry was shown or hidden by the user.
    """

    visibility_changed = Signal(int, bool)

    def __init__(self, title: str = "", parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.title = title
        self._entries: dict[int, _Entry] = {}
        self._title_width = 0
        self._layout_width = -1
        self._height = self.fontMetrics().height() + 2 * _PAD
        size_policy = QSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Fixed)
        size_policy.setHeightForWidth(True)
        self.setSizePolicy(size_policy)
        self.setMouseTracking(False)
        self.setToolTip("Click: show or hide on every chart. Double-click: show only this one (again: all)")

    # ---- entries ---------------------------------------------------------------------

    def set_entry(self, key: int, label: str, color: QColor) -> None:
        entry = self._entries.get(key)
        if entry is None:
            self._entries[key] = _Entry(key, label, QColor(color))
            self._entries = dict(sorted(self._entries.items()))
        else:
            entry.label, entry.color = label, QColor(color)
        self._relayout()

    def clear(self) -> None:
        self._entries.clear()
        self._relayout()

    def keep_only(self, keys: set[int] | frozenset[int]) -> None:
        """Drop every entry but ``keys`` (many ranks: only the ones drawn over the band)."""
        if set(self._entries) - set(keys):
            self._entries = {key: entry for key, entry in self._entries.items() if key in keys}
            self._relayout()

    def set_title(self, title: str) -> None:
        if title != self.title:
            self.title = title
            self._relayout()

    @property
    def keys(self) -> list[int]:
        return list(self._entries)

    def labels(self) -> list[str]:
        return [entry.label for entry in self._entries.values()]

    def is_visible(self, key: int) -> bool:
        return self._entries[key].visible

    def set_visible(self, key: int, visible: bool) -> None:
        """Show or hide ``key`` (emits ``visibility_changed`` when it changes)."""
        entry = self._entries.get(key)
        if entry is None or entry.visible == visible:
            return
        entry.visible = visible
        self.update()
        self.visibility_changed.emit(key, visible)

    def entry_rect(self, key: int) -> QRect:
        """Where ``key`` is drawn (for tests and tooltips)."""
        self._ensure_layout()
        rect = self._entries[key].rect
        assert rect is not None, "_ensure_layout places every entry"
        return QRect(rect)

    # ---- layout and painting -----------------------------------------------------------

    def _relayout(self) -> None:
        self._layout_width = -1
        self.updateGeometry()
        self.update()

    def _ensure_layout(self) -> None:
        if self._layout_width != self.width():
            self._height = self._place(self.width())
            self._layout_width = self.width()

    def _place(self, width: int, store: bool = True) -> int:
        """The height the entries take at ``width``; with ``store``, where each one goes (the
        layout asks ``heightForWidth`` of other widths too: those must not move the entries)."""
        metrics = self.fontMetrics()
        line = metrics.height() + _PAD
        self._title_width = metrics.horizontalAdvance(self.title) + _GAP if self.title else 0
        x, y = _PAD + self._title_width, _PAD // 2
        for entry in self._entries.values():
            entry_width = _SWATCH + _PAD + metrics.horizontalAdvance(entry.label) + _PAD
            if x + entry_width > width - _PAD and x > _PAD + self._title_width:
                x, y = _PAD + self._title_width, y + line
            if store:
                entry.rect = QRect(x, y, entry_width, line)
            x += entry_width + _GAP
        return y + line + _PAD // 2

    def hasHeightForWidth(self) -> bool:  # noqa: N802 - Qt override
        return True

    def heightForWidth(self, width: int) -> int:  # noqa: N802 - Qt override
        return self._place(max(50, width), store=False)

    def sizeHint(self) -> QSize:  # noqa: N802 - Qt override
        return QSize(400, self.heightForWidth(max(400, self.width())))

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802 - Qt override
        super().resizeEvent(event)
        self._layout_width = -1
        height = self._place(self.width())
        if height != self.height():
            self.setFixedHeight(height)

    def paintEvent(self, event: QPaintEvent) -> None:  # noqa: N802 - Qt override
        self._ensure_layout()
        if self.height() != self._height:
            self.setFixedHeight(self._height)
        painter = QPainter(self)
        text_color = self.palette().color(QPalette.ColorRole.Text)
        faded = QColor(text_color)
        faded.setAlpha(90)
        metrics = self.fontMetrics()
        if self.title:
            painter.setPen(text_color)
            painter.drawText(QRect(_PAD, _PAD // 2, self._title_width, metrics.height() + _PAD),
                             Qt.AlignmentFlag.AlignVCenter | Qt.AlignmentFlag.AlignLeft, self.title)
        for entry in self._entries.values():
            rect = entry.rect
            if rect is None:
                continue
            swatch = QRect(rect.x(), rect.center().y() - 2, _SWATCH, 4)
            color = QColor(entry.color)
            if not entry.visible:
                color.setAlpha(50)
            painter.fillRect(swatch, color)
            painter.setPen(text_color if entry.visible else faded)
            label_rect = QRect(rect.x() + _SWATCH + _PAD, rect.y(), rect.width() - _SWATCH - _PAD, rect.height())
            painter.drawText(label_rect, Qt.AlignmentFlag.AlignVCenter | Qt.AlignmentFlag.AlignLeft, entry.label)
        painter.end()

    # ---- mouse -------------------------------------------------------------------------

    def _entry_at(self, point: QPoint) -> _Entry | None:
        self._ensure_layout()
        for entry in self._entries.values():
            if entry.rect is not None and entry.rect.contains(point):
                return entry
        return None

    def mousePressEvent(self, event: QMouseEvent) -> None:  # noqa: N802 - Qt override
        entry = self._entry_at(event.position().toPoint())
        if entry is not None and event.button() == Qt.MouseButton.LeftButton:
            self.set_visible(entry.key, not entry.visible)
            event.accept()
            return
        super().mousePressEvent(event)

    def mouseDoubleClickEvent(self, event: QMouseEvent) -> None:  # noqa: N802 - Qt override
        entry = self._entry_at(event.position().toPoint())
        if entry is None or event.button() != Qt.MouseButton.LeftButton:
            super().mouseDoubleClickEvent(event)
            return
        others_hidden = all(not e.visible for e in self._entries.values() if e is not entry)
        # The press before this double click toggled the entry; make it visible again.
        for other in self._entries.values():
            self.set_visible(other.key, True if others_hidden else other is entry)
        event.accept()
