"""The nodes table: one row per machine (host, processes); the first row is the head.

Edits go straight to the form model as ``NodeRow``s. What the row does not show
(SSH user and port, per-node python and workdir) is kept from the loaded profile.
"""

from __future__ import annotations

from dataclasses import replace

from PySide6.QtWidgets import (
    QAbstractItemView,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QTableWidget,
    QTableWidgetItem,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from gui.models.launch_form import FormState, LaunchFormModel, NodeRow

HOST_COLUMN = 0
PROCESSES_COLUMN = 1


class NodesTable(QWidget):
    def __init__(self, model: LaunchFormModel, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._model = model
        self._rows: list[NodeRow] = []

        self.table = QTableWidget(0, 2)
        self.table.setHorizontalHeaderLabels(["Host", "Processes"])
        self.table.verticalHeader().setVisible(True)  # the node rank
        self.table.verticalHeader().setDefaultSectionSize(self.fontMetrics().height() + 8)
        self.table.horizontalHeader().setSectionResizeMode(HOST_COLUMN, QHeaderView.ResizeMode.Stretch)
        self.table.horizontalHeader().setSectionResizeMode(PROCESSES_COLUMN, QHeaderView.ResizeMode.ResizeToContents)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setToolTip("Host name or address of each node; processes: a number, or auto "
                              "(= processes per node). Node 0 is where Rankwatch runs.")
        self.table.itemChanged.connect(self._on_item_changed)
        self.add_button = QToolButton()
        self.add_button.setText("+")
        self.add_button.setToolTip("Add a node")
        self.add_button.clicked.connect(self._on_add_clicked)
        self.remove_button = QToolButton()
        self.remove_button.setText("−")
        self.remove_button.setToolTip("Remove the selected node")
        self.remove_button.clicked.connect(self._on_remove_clicked)
        self.summary = QLabel()
        self.summary.setObjectName("hint")

        buttons = QHBoxLayout()
        buttons.setContentsMargins(0, 0, 0, 0)
        buttons.addWidget(self.add_button)
        buttons.addWidget(self.remove_button)
        buttons.addSpacing(6)
        buttons.addWidget(self.summary, 1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(2)
        layout.addWidget(self.table)
        layout.addLayout(buttons)

        model.state_replaced.connect(self._on_state_replaced)
        model.evaluated.connect(self._update_summary)
        self._on_state_replaced(model.state)
        self._update_summary(model.evaluation)

    def set_cell(self, row: int, column: int, text: str) -> None:
        """Type ``text`` into a cell (what a person does by double-clicking it)."""
        self.table.item(row, column).setText(text)

    def _on_state_replaced(self, state: FormState) -> None:
        self._rows = list(state.nodes)
        self._update_table()

    def _update_table(self) -> None:
        self.table.blockSignals(True)
        self.table.setRowCount(len(self._rows))
        for index, node in enumerate(self._rows):
            self.table.setItem(index, HOST_COLUMN, QTableWidgetItem(node.host))
            self.table.setItem(index, PROCESSES_COLUMN, QTableWidgetItem(node.processes))
        self.table.setVerticalHeaderLabels([str(rank) for rank in range(len(self._rows))])
        self.table.blockSignals(False)
        self.remove_button.setEnabled(len(self._rows) > 1)
        visible_rows = min(max(len(self._rows), 2), 5)
        header = self.table.horizontalHeader().height() or self.fontMetrics().height() + 8
        self.table.setFixedHeight(header + visible_rows * self.table.verticalHeader().defaultSectionSize() + 4)

    def _update_summary(self, evaluation) -> None:
        launch = evaluation.launch
        if launch is None:
            self.summary.setText("")
            return
        nodes = len(launch.nodes)
        self.summary.setText(f"{nodes} node{'s' if nodes != 1 else ''} · world size {launch.world_size}")

    def _push(self) -> None:
        self.remove_button.setEnabled(len(self._rows) > 1)
        self._model.update(nodes=tuple(self._rows))

    def _on_item_changed(self, item: QTableWidgetItem) -> None:
        row = item.row()
        if not 0 <= row < len(self._rows):
            return
        text = item.text()
        if item.column() == HOST_COLUMN:
            self._rows[row] = replace(self._rows[row], host=text.strip())
        else:
            self._rows[row] = replace(self._rows[row], processes=text.strip() or "auto")
        self._push()

    def _on_add_clicked(self) -> None:
        self._rows.append(NodeRow(host="", processes="auto"))
        self._update_table()
        self._push()
        # Selected: typing a host name starts editing it.
        self.table.setCurrentCell(len(self._rows) - 1, HOST_COLUMN)
        self.table.setFocus()

    def _on_remove_clicked(self) -> None:
        if len(self._rows) <= 1:
            return
        row = self.table.currentRow()
        if not 0 <= row < len(self._rows):
            row = len(self._rows) - 1
        del self._rows[row]
        self._update_table()
        self._push()
