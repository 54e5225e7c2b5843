"""The items of table and tree widgets that their widget filled itself.

``QTableWidget.item`` and ``QTreeWidgetItem.child`` answer None for an empty slot, so
every read of a cell would need a check; a widget that fills every cell of its rows
reads them through these instead, and an empty slot (a bug, not a state) fails with
the row and column named rather than with an ``AttributeError`` on None.
"""

from __future__ import annotations

from PySide6.QtWidgets import QTableWidget, QTableWidgetItem, QTreeWidget, QTreeWidgetItem


class EmptySlot(LookupError):
    """A widget's slot that its widget should have filled holds no item."""


def cell_item(table: QTableWidget, row: int, column: int) -> QTableWidgetItem:
    """The item in cell (``row``, ``column``) of ``table``.

    Raises:
        EmptySlot: the cell holds no item (or is outside the table).
    """
    item = table.item(row, column)
    if item is None:
        raise EmptySlot(f"cell ({row}, {column}) of {_name(table)} holds no item "
                        f"({table.rowCount()} rows, {table.columnCount()} columns)")
    return item


def header_item(table: QTableWidget, column: int) -> QTableWidgetItem:
    """The horizontal header item of ``column`` (set by ``setHorizontalHeaderLabels``).

    Raises:
        EmptySlot: the column has no header item.
    """
    item = table.horizontalHeaderItem(column)
    if item is None:
        raise EmptySlot(f"column {column} of {_name(table)} has no header item")
    return item


def top_level_item(tree: QTreeWidget, index: int) -> QTreeWidgetItem:
    """The ``index``-th top-level item of ``tree``.

    Raises:
        EmptySlot: the tree has no such item.
    """
    item = tree.topLevelItem(index)
    if item is None:
        raise EmptySlot(f"{_name(tree)} has no top-level item {index} ({tree.topLevelItemCount()} items)")
    return item


def child_item(parent: QTreeWidgetItem, index: int) -> QTreeWidgetItem:
    """The ``index``-th child of ``parent``.

    Raises:
        EmptySlot: ``parent`` has no such child.
    """
    item = parent.child(index)
    if item is None:
        raise EmptySlot(f"tree item {parent.text(0)!r} has no child {index} ({parent.childCount()} children)")
    return item


def _name(widget: QTableWidget | QTreeWidget) -> str:
    return repr(widget.objectName()) if widget.objectName() else f"the {type(widget).__name__}"
