"""A flat Qt table model over a fixed tuple of column titles and a list of rows.

The runs list and the rank table each wrapped a list of rows in a
QAbstractTableModel with the same row count, column count and header titles;
:class:`ColumnTableModel` holds those once. A subclass sets ``rows`` (and resets
or signals the change itself) and answers ``data`` for its cells.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from PySide6.QtCore import QAbstractTableModel, QModelIndex, QObject, QPersistentModelIndex, Qt


class ColumnTableModel(QAbstractTableModel):
    """``rows`` under the headers ``columns``; no children, no vertical header texts."""

    def __init__(self, columns: Sequence[str], parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.columns: tuple[str, ...] = tuple(columns)
        self.rows: list[Any] = []

    def rowCount(self, parent: QModelIndex | QPersistentModelIndex = QModelIndex()) -> int:  # noqa: B008
        return 0 if parent.isValid() else len(self.rows)

    def columnCount(self, parent: QModelIndex | QPersistentModelIndex = QModelIndex()) -> int:  # noqa: B008
        return 0 if parent.isValid() else len(self.columns)

    def headerData(self, section: int, orientation: Qt.Orientation,
                   role: int = Qt.ItemDataRole.DisplayRole) -> str | None:
        if orientation == Qt.Orientation.Horizontal and role == Qt.ItemDataRole.DisplayRole:
            return self.columns[section]
        return None
