"""A table of rows the person edits in place, with "+" and "−" buttons under it.

The launch form's environment table and nodes table both keep their rows as a
list, hand the whole list to the form model after every edit, add a row selected
for typing and remove the selected row (or the last one), and size themselves to
show a few rows. :class:`EditableTable` does that once. What differs is said by
a :class:`RowCodec` (what a new row is, the texts of a row's cells, what an edited
cell makes of a row: plain Python) and a ``write`` callback (what the model gets).
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Sequence
from typing import Any

from PySide6.QtWidgets import (
    QAbstractItemView,
    QHBoxLayout,
    QTableWidget,
    QTableWidgetItem,
    QToolButton,
    QVBoxLayout,
    QWidget,
)


class RowCodec(abc.ABC):
    """How one kind of row looks in the table and changes when a cell is typed into."""

    @abc.abstractmethod
    def new(self) -> Any:
        """The row the + button adds."""

    @abc.abstractmethod
    def cells(self, row: Any) -> Sequence[str]:
        """The text of each of the row's cells, in column order."""

    @abc.abstractmethod
    def edited(self, row: Any, column: int, text: str) -> Any:
        """``row`` with the cell in ``column`` typed as ``text``."""


class EditableTable(QWidget):
    """``table`` with ``add_button`` and ``remove_button`` in ``button_row`` below it.

    ``least_rows``: the − button is disabled at this many rows. ``shown_rows``: the
    table is as high as this many rows (least, most), whatever it holds.
    """

    def __init__(self, headers: Sequence[str], codec: RowCodec, write: Callable[[list[Any]], None], *,
                 add_tip: str, remove_tip: str, least_rows: int = 0, shown_rows: tuple[int, int] = (3, 6),
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._rows: list[Any] = []
        self._codec = codec
        self._write = write
        self._least_rows = least_rows
        self._shown_rows = shown_rows

        self.table = QTableWidget(0, len(headers))
        self.table.setHorizontalHeaderLabels(list(headers))
        self.table.verticalHeader().setDefaultSectionSize(self.fontMetrics().height() + 8)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.itemChanged.connect(self._on_item_changed)
        self.add_button = QToolButton()
        self.add_button.setText("+")
        self.add_button.setToolTip(add_tip)
        self.add_button.clicked.connect(self._on_add_clicked)
        self.remove_button = QToolButton()
        self.remove_button.setText("−")
        self.remove_button.setToolTip(remove_tip)
        self.remove_button.clicked.connect(self._on_remove_clicked)

        self.button_row = QHBoxLayout()
        self.button_row.setContentsMargins(0, 0, 0, 0)
        self.button_row.addWidget(self.add_button)
        self.button_row.addWidget(self.remove_button)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(2)
        layout.addWidget(self.table)
        layout.addLayout(self.button_row)

    # ---- shared ----------------------------------------------------------------------

    def _update_table(self) -> None:
        self.table.blockSignals(True)
        self.table.setRowCount(len(self._rows))
        for index, row in enumerate(self._rows):
            for column, text in enumerate(self._codec.cells(row)):
                self.table.setItem(index, column, QTableWidgetItem(text))
        self.table.blockSignals(False)
        self.remove_button.setEnabled(len(self._rows) > self._least_rows)
        least, most = self._shown_rows
        visible_rows = min(max(len(self._rows), least), most)
        header = self.table.horizontalHeader().height() or self.fontMetrics().height() + 8
        self.table.setFixedHeight(header + visible_rows * self.table.verticalHeader().defaultSectionSize() + 4)

    def _push(self) -> None:
        self.remove_button.setEnabled(len(self._rows) > self._least_rows)
        self._write(list(self._rows))

    def _on_item_changed(self, item: QTableWidgetItem) -> None:
        row = item.row()
        if not 0 <= row < len(self._rows):
            return
        self._rows[row] = self._codec.edited(self._rows[row], item.column(), item.text())
        self._push()

    def _on_add_clicked(self) -> None:
        self._rows.append(self._codec.new())
        self._update_table()
        self._push()
        # Selected: typing starts editing its first cell.
        self.table.setCurrentCell(len(self._rows) - 1, 0)
        self.table.setFocus()

    def _on_remove_clicked(self) -> None:
        if len(self._rows) <= self._least_rows:
            return
        row = self.table.currentRow()
        if not 0 <= row < len(self._rows):
            row = len(self._rows) - 1
        del self._rows[row]
        self._update_table()
        self._push()
