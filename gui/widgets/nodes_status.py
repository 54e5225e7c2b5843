"""The monitor's nodes table: one row per machine, its state coloured, since when, its ranks.

Rows come from the hub's NODE rows (``MonitorModel.nodes``) through the Qt-free
``gui.models.nodes``; a node that dropped out reads "lost at 12:03:04". Double-click
a node to see its log lines only.
"""

from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtGui import QBrush, QColor, QFont
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHeaderView,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from gui.gateway.runner_rules import NodeState, RankState
from gui.models.monitor import MonitorModel
from gui.models.nodes import NODE_COLUMNS, node_cells, node_rows, ranks_by_node
from gui.widgets.filled_items import cell_item
from gui.widgets.rank_table import STATE_COLORS, TINT_ALPHA
from gui.widgets.throttled import RefreshThrottle

NODE_STATE_COLORS: dict[str, QColor] = {
    NodeState.PREFLIGHT.value: STATE_COLORS[RankState.WAITING.value],
    NodeState.STARTING.value: STATE_COLORS[RankState.WAITING.value],
    NodeState.RUNNING.value: STATE_COLORS[RankState.RUNNING.value],
    NodeState.EXITED.value: STATE_COLORS[RankState.EXITED.value],
    NodeState.FAILED.value: STATE_COLORS[RankState.FAILED.value],
    NodeState.STOPPED.value: STATE_COLORS[RankState.STOPPED.value],
    NodeState.LOST.value: STATE_COLORS[RankState.LOST.value],
}
STATE_COLUMN = NODE_COLUMNS.index("State")
HOST_COLUMN = NODE_COLUMNS.index("Host")


def node_tint(state: str | None) -> QColor | None:
    """The translucent row tint of a node state (the rank table's tints, so both read alike)."""
    color = NODE_STATE_COLORS.get(state or "")
    if color is None:
        return None
    tint = QColor(color)
    tint.setAlpha(TINT_ALPHA)
    return tint


class NodesStatus(QWidget):
    """Per-node status of the watched run.

    Signals:
        node_activated(str): a node's row was double-clicked (its host label).
    """

    node_activated = Signal(str)

    def __init__(self, model: MonitorModel, parent: QWidget | None = None, refresh_hz: float = 2.0) -> None:
        super().__init__(parent)
        self.model = model
        self.table = QTableWidget(0, len(NODE_COLUMNS))
        self.table.setHorizontalHeaderLabels(list(NODE_COLUMNS))
        self.table.verticalHeader().setVisible(False)
        self.table.verticalHeader().setDefaultSectionSize(22)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        header.setStretchLastSection(True)
        self.table.cellDoubleClicked.connect(self._on_cell_double_clicked)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.table)
        self._bold = QFont(self.font())
        self._bold.setBold(True)
        self._throttle = RefreshThrottle(self, self.refresh, refresh_hz, only_when_visible=True)
        self.timer = self._throttle.timer
        self._throttle.watch(model.nodes_changed, model.ranks_changed, model.reset)
        self.refresh()

    def refresh(self) -> None:
        self._throttle.mark_clean()
        nodes = node_rows(self.model)
        ranks = ranks_by_node(self.model)
        self.table.setRowCount(len(nodes))
        for row, node in enumerate(nodes):
            cells = node_cells(node, ranks.get(node.node_rank, []))
            tint = node_tint(node.state)
            for column, text in enumerate(cells):
                item = self.table.item(row, column)
                if item is None:
                    item = QTableWidgetItem()
                    self.table.setItem(row, column, item)
                item.setText(text)
                item.setToolTip(node.detail or text)
                item.setBackground(QBrush(tint) if tint is not None else QBrush())
                if column == STATE_COLUMN:
                    item.setFont(self._bold)

    def cell_text(self, node_rank: int, column: str) -> str:
        for row in range(self.table.rowCount()):
            if cell_item(self.table, row, 0).text() == str(node_rank):
                return cell_item(self.table, row, NODE_COLUMNS.index(column)).text()
        raise KeyError(f"no row for node {node_rank}")

    def row_brush(self, node_rank: int) -> QBrush:
        for row in range(self.table.rowCount()):
            if cell_item(self.table, row, 0).text() == str(node_rank):
                return cell_item(self.table, row, STATE_COLUMN).background()
        raise KeyError(f"no row for node {node_rank}")

    def _on_cell_double_clicked(self, row: int, _column: int) -> None:
        item = self.table.item(row, HOST_COLUMN)
        if item is not None and item.text():
            self.node_activated.emit(item.text())

