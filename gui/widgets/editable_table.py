"""A table of rows the person edits in place, with "+" and "−" buttons under it.

The launch form's environment table and nodes table both keep their rows as a
list, hand the whole list to the form model after every edit, add a row selected
for typing and remove the selected row (or the last one), and size themselves to
show a few rows. :class:`EditableTable` does that once; a subclass says what a
new row is (``_new_row``), how a row fills the table (``_fill_table``), what an
edited cell makes of a row (``_edited_row``) and what the model gets (``_write_rows``).
"""

from __future__ import annotations

from collections.abc import Sequence
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


class EditableTable(QWidget):
    """``table`` with ``add_button`` and ``remove_button`` in ``button_row`` below it.

    ``least_rows``: the − button is disabled at this many rows. ``shown_rows``: the
    table is as high as this many rows (least, most), whatever it holds.
    """

    def __init__(self, headers: Sequence[str], *, add_tip: str, remove_tip: str, least_rows: int = 0,
                 shown_rows: tuple[int, int] = (3, 6), parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._rows: list[Any] = []
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

    # ---- for subclasses --------------------------------------------------------------

    def _new_row(self) -> Any:
        """The row the + button adds."""
        raise NotImplementedError

    def _fill_table(self) -> None:
        """Put ``_rows`` into the table's cells (its row count is set, its signals blocked)."""
        raise NotImplementedError

    def _edited_row(self, row: Any, column: int, text: str) -> Any:
        """``row`` with the cell in ``column`` typed as ``text``."""
        raise NotImplementedError

    def _write_rows(self) -> None:
        """Hand ``_rows`` to the model."""
        raise NotImplementedError

    # ---- shared ----------------------------------------------------------------------

    def _update_table(self) -> None:
        self.table.blockSignals(True)
        self.table.setRowCount(len(self._rows))
        self._fill_table()
        self.table.blockSignals(False)
        self.remove_button.setEnabled(len(self._rows) > self._least_rows)
        least, most = self._shown_rows
        visible_rows = min(max(len(self._rows), least), most)
        header = self.table.horizontalHeader().height() or self.fontMetrics().height() + 8
        self.table.setFixedHeight(header + visible_rows * self.table.verticalHeader().defaultSectionSize() + 4)

    def _push(self) -> None:
        self.remove_button.setEnabled(len(self._rows) > self._least_rows)
        self._write_rows()

    def _on_item_changed(self, item: QTableWidgetItem) -> None:
        row = item.row()
        if not 0 <= row < len(self._rows):
            return
        self._rows[row] = self._edited_row(self._rows[row], item.column(), item.text())
        self._push()

    def _on_add_clicked(self) -> None:
        self._rows.append(self._new_row())
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
