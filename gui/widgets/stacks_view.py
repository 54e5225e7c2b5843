"""The stacks view: every rank's Python stack side by side, identical ones collapsed.

One column per group of ranks with the same main-thread stack (the ranks in the
column header), oldest call first, rows aligned by call depth. The group that
differs from the majority is tinted and its first differing frame is marked with
file:line -- for a hang, that is where the odd rank waits (rank 0 in a
``dist.barrier()`` the others never reach). Ranks that gave no stack are listed
with the reason. The layout is :func:`gui.models.stacks.layout_capture`'s.

The monitor's Dump stacks button asks the runner for a capture
(``set_waiting``); the capture arrives as a ``stacks`` event and replaces the view.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtGui import QBrush, QColor, QFont, QFontDatabase
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHeaderView,
    QLabel,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from gui.models.stacks import StacksLayout, layout_capture
from gui.widgets.rank_table import STATE_COLORS
from runner.state import RankState

DIFFERS_COLOR = STATE_COLORS[RankState.STALLED.value]
FIRST_DIFFERENCE_COLOR = STATE_COLORS[RankState.FAILED.value]
FIRST_DIFFERENCE_MARK = "  ◀ differs here"
NO_CAPTURE = ("No stack capture yet. Press Dump stacks to see where every rank is now; one is also taken "
              "automatically when ranks stall.")


def _tint(color: QColor, alpha: int) -> QBrush:
    return QBrush(QColor(color.red(), color.green(), color.blue(), alpha))


class StacksView(QWidget):
    """The latest stack capture of the watched run."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.layout_shown: StacksLayout | None = None
        self.capture: dict[str, Any] | None = None
        self.waiting = False
        self.verdict = QLabel(NO_CAPTURE)
        self.verdict.setWordWrap(True)
        self.verdict.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.heading = QLabel()
        self.heading.setObjectName("hint")
        self.table = QTableWidget(0, 0)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.setWordWrap(False)
        self.table.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        self.table.verticalHeader().setDefaultSectionSize(22)
        self.table.setVerticalScrollMode(QAbstractItemView.ScrollMode.ScrollPerPixel)
        self.table.setHorizontalScrollMode(QAbstractItemView.ScrollMode.ScrollPerPixel)
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        header.setStretchLastSection(True)
        header.setDefaultAlignment(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter)
        self.missing = QLabel()
        self.missing.setWordWrap(True)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.setSpacing(4)
        layout.addWidget(self.verdict)
        layout.addWidget(self.heading)
        layout.addWidget(self.table, 1)
        layout.addWidget(self.missing)
        self._bold = QFont(self.table.font())
        self._bold.setBold(True)
        self._update_empty()

    # ---- public ----------------------------------------------------------------------

    def set_waiting(self, waiting: bool = True) -> None:
        """A capture was asked for: say so until it arrives."""
        self.waiting = waiting
        if waiting:
            self.heading.setText("Asked every rank for its stack; waiting for the capture…")
            self.heading.show()
        elif self.layout_shown is not None:
            self.heading.setText(self.layout_shown.heading)
        else:
            self._update_empty()

    def show_capture(self, capture: dict[str, Any] | None) -> None:
        """Draw a ``stacks`` event's analysis (``None``: no capture yet)."""
        self.waiting = False
        self.capture = capture
        if capture is None:
            self.layout_shown = None
            self._update_empty()
            return
        layout = layout_capture(capture)
        self.layout_shown = layout
        self._update_table(layout)

    def column_titles(self) -> list[str]:
        return [self.table.horizontalHeaderItem(c).text() for c in range(self.table.columnCount())]

    def column_frames(self, column: int) -> list[str]:
        """The frame texts of one column, oldest call first (empty cells left out)."""
        texts = []
        for row in range(self.table.rowCount()):
            item = self.table.item(row, column)
            if item is not None and item.text():
                texts.append(item.text())
        return texts

    def marked_cells(self) -> list[tuple[int, int, str]]:
        """(row, column, text) of every cell marked as a group's first differing frame."""
        found = []
        for column in range(self.table.columnCount()):
            for row in range(self.table.rowCount()):
                item = self.table.item(row, column)
                if item is not None and item.data(Qt.ItemDataRole.UserRole) == "first_difference":
                    found.append((row, column, item.text()))
        return found

    # ---- drawing ---------------------------------------------------------------------

    def _update_empty(self) -> None:
        self.table.clear()
        self.table.setRowCount(0)
        self.table.setColumnCount(0)
        self.verdict.setText(NO_CAPTURE)
        self.verdict.setStyleSheet("")
        self.heading.setVisible(self.waiting)
        self.missing.hide()

    def _update_table(self, layout: StacksLayout) -> None:
        self.verdict.setText(layout.verdict)
        differs = layout.outlier is not None or any(column.differs for column in layout.columns)
        self.verdict.setStyleSheet(f"font-weight: 600; color: {FIRST_DIFFERENCE_COLOR.name()};" if differs
                                   else "font-weight: 600;")
        self.heading.setText(layout.heading)
        self.heading.setToolTip(str((self.capture or {}).get("text_path") or ""))
        self.heading.show()
        table = self.table
        table.clear()
        table.setColumnCount(len(layout.columns))
        table.setRowCount(layout.row_count)
        for column_index, column in enumerate(layout.columns):
            header = QTableWidgetItem(column.title)
            header.setToolTip(f"{len(column.ranks)} rank(s) with this stack: "
                              + ", ".join(map(str, column.ranks)))
            if column.differs:
                header.setFont(self._bold)
                header.setForeground(QBrush(FIRST_DIFFERENCE_COLOR))
            table.setHorizontalHeaderItem(column_index, header)
            for row, frame in enumerate(column.frames):
                text = frame.text + (FIRST_DIFFERENCE_MARK if frame.first_difference else "")
                item = QTableWidgetItem(text)
                item.setToolTip(f"{frame.full_location} in {frame.function}")
                if frame.first_difference:
                    item.setData(Qt.ItemDataRole.UserRole, "first_difference")
                    item.setFont(self._bold)
                    item.setBackground(_tint(FIRST_DIFFERENCE_COLOR, 90))
                elif frame.differs:
                    item.setBackground(_tint(DIFFERS_COLOR, 60))
                elif column.differs:
                    item.setBackground(_tint(DIFFERS_COLOR, 25))
                table.setItem(row, column_index, item)
        table.setVerticalHeaderLabels([str(depth) for depth in range(layout.row_count)])
        first = next(((row, column) for row, column, _text in self.marked_cells()), None)
        if first is not None:
            table.scrollToItem(table.item(*first), QAbstractItemView.ScrollHint.EnsureVisible)
        if layout.missing:
            self.missing.setText("No stack from " + "; ".join(f"rank {rank}: {why}" for rank, why in layout.missing))
            self.missing.show()
        else:
            self.missing.hide()
