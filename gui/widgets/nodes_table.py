"""The nodes table: one row per machine; the first row is the head (where Rankwatch runs).

Columns are the fields of a ``[[nodes]]`` table (``runner.profile.spec.NodeSpec``):
host, processes, and for nodes reached over SSH the user and port, the node's
Python and working directory. An empty cell means the default (shown greyed:
your ssh config's user and port, the form's interpreter and working directory).
Edits go straight to the form model as ``NodeRow``s; the model parses them with
the runner's own parser, and a cell whose field has an error (``nodes[1].port``)
is marked, with the CLI's message as its tooltip.
"""

from __future__ import annotations

from dataclasses import replace

from PySide6.QtCore import QModelIndex, QPersistentModelIndex, Qt
from PySide6.QtGui import QBrush, QColor, QPalette
from PySide6.QtWidgets import (
    QHeaderView,
    QLabel,
    QStyledItemDelegate,
    QStyleOptionViewItem,
    QWidget,
)

from gui.models.launch_form import Evaluation, FormState, LaunchFormModel, NodeRow
from gui.widgets.editable_table import EditableTable, RowCodec
from gui.widgets.filled_items import cell_item, header_item

COLUMNS = ("host", "processes", "user", "port", "python", "workdir")
"""``NodeRow`` fields, in column order (also the spec's field names: ``nodes[i].<field>``)."""
HEADERS = ("Host", "Processes", "User", "Port", "Python", "Workdir")
HOST_COLUMN, PROCESSES_COLUMN, USER_COLUMN, PORT_COLUMN, PYTHON_COLUMN, WORKDIR_COLUMN = range(len(COLUMNS))
PLACEHOLDERS = {USER_COLUMN: "ssh config", PORT_COLUMN: "22", PYTHON_COLUMN: "as the form", WORKDIR_COLUMN: "as the form"}
HEADER_TIPS = (
    "Host name or address (anything `ssh HOST` understands); node 0 is where Rankwatch runs",
    "Worker processes on this node: a number, or auto (= processes per node)",
    "SSH user for this node; empty: your ssh config decides",
    "SSH port for this node; empty: your ssh config decides (22)",
    "This node's Python (with torch and Rankwatch); empty: the form's interpreter",
    "Working directory on this node; empty: the form's working directory",
)
ERROR_TINT = QColor(214, 69, 69, 70)
ERROR_ROLE = Qt.ItemDataRole.UserRole + 7
"""A cell's error message (the CLI's, with the field name)."""


class PlaceholderDelegate(QStyledItemDelegate):
    """Greyed default text in empty cells (a QLineEdit's placeholder, for table cells)."""

    def initStyleOption(self, option: QStyleOptionViewItem, index: QModelIndex | QPersistentModelIndex) -> None:
        super().initStyleOption(option, index)
        placeholder = PLACEHOLDERS.get(index.column())
        if index.row() == 0 and index.column() in (USER_COLUMN, PORT_COLUMN):
            placeholder = None  # the head is not reached over SSH
        if placeholder and not option.text:
            option.text = placeholder
            option.palette.setColor(QPalette.ColorRole.Text, option.palette.color(QPalette.ColorRole.PlaceholderText))


class NodeRows(RowCodec):
    """One ``NodeRow`` per machine; an empty cell means the default (None, or "auto" processes)."""

    def new(self) -> NodeRow:
        return NodeRow(host="", processes="auto")

    def cells(self, node: NodeRow) -> list[str]:
        return ["" if getattr(node, name) is None else str(getattr(node, name)) for name in COLUMNS]

    def edited(self, row: NodeRow, column: int, text: str) -> NodeRow:
        text = text.strip()
        if column == HOST_COLUMN:
            return replace(row, host=text)
        if column == PROCESSES_COLUMN:
            return replace(row, processes=text or "auto")
        default = text or None
        if column == USER_COLUMN:
            return replace(row, user=default)
        if column == PORT_COLUMN:
            return replace(row, port=default)
        if column == PYTHON_COLUMN:
            return replace(row, python=default)
        if column == WORKDIR_COLUMN:
            return replace(row, workdir=default)
        raise IndexError(f"the nodes table has no column {column} (it has {len(COLUMNS)})")


class NodesTable(EditableTable):
    def __init__(self, model: LaunchFormModel, parent: QWidget | None = None) -> None:
        super().__init__(HEADERS, NodeRows(), lambda rows: model.update(nodes=tuple(rows)),
                         add_tip="Add a node", remove_tip="Remove the selected node", least_rows=1,
                         shown_rows=(2, 5), parent=parent)
        self._model = model
        self._rows: list[NodeRow]

        for column, tip in enumerate(HEADER_TIPS):
            header_item(self.table, column).setToolTip(tip)
        self.table.verticalHeader().setVisible(True)  # the node rank
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.Interactive)
        for column in (HOST_COLUMN, PYTHON_COLUMN, WORKDIR_COLUMN):
            header.setSectionResizeMode(column, QHeaderView.ResizeMode.Stretch)
        for column in (PROCESSES_COLUMN, USER_COLUMN, PORT_COLUMN):
            header.setSectionResizeMode(column, QHeaderView.ResizeMode.ResizeToContents)
        self.table.setItemDelegate(PlaceholderDelegate(self.table))
        self.table.setToolTip("One row per machine; node 0 is where Rankwatch runs, the others are "
                              "reached over SSH. Empty cells take the default.")
        self.summary = QLabel()
        self.summary.setObjectName("hint")
        self.button_row.addSpacing(6)
        self.button_row.addWidget(self.summary, 1)

        model.state_replaced.connect(self._on_state_replaced)
        model.evaluated.connect(self._on_evaluated)
        self._on_state_replaced(model.state)
        self._on_evaluated(model.evaluation)

    def set_cell(self, row: int, column: int, text: str) -> None:
        """Type ``text`` into a cell (what a person does by double-clicking it)."""
        cell_item(self.table, row, column).setText(text)

    def cell_error(self, row: int, column: int) -> str:
        """The error shown on a cell (its tooltip when marked), or empty."""
        item = self.table.item(row, column)
        return (item.data(ERROR_ROLE) or "") if item is not None else ""

    def _on_state_replaced(self, state: FormState) -> None:
        self._rows = list(state.nodes)
        self._update_table()

    def _update_table(self) -> None:
        super()._update_table()
        self.table.setVerticalHeaderLabels([str(rank) for rank in range(len(self._rows))])  # node ranks
        self._mark_errors(self._model.evaluation)

    def _on_evaluated(self, evaluation: Evaluation) -> None:
        self._update_summary(evaluation)
        self._mark_errors(evaluation)

    def _mark_errors(self, evaluation: Evaluation) -> None:
        errors: dict[tuple[int, int], str] = {}
        for field, message in evaluation.errors:
            if not field.startswith("nodes["):
                continue
            index_text, _, name = field[len("nodes["):].partition("].")
            if index_text.isdigit() and name in COLUMNS:
                errors[(int(index_text), COLUMNS.index(name))] = f"{field}: {message}"
        self.table.blockSignals(True)
        for row in range(self.table.rowCount()):
            for column in range(self.table.columnCount()):
                item = self.table.item(row, column)
                if item is None:
                    continue
                error = errors.get((row, column))
                item.setData(ERROR_ROLE, error)
                item.setBackground(QBrush(ERROR_TINT) if error else QBrush())
                item.setToolTip(error or HEADER_TIPS[column])
        self.table.blockSignals(False)

    def _update_summary(self, evaluation: Evaluation) -> None:
        launch = evaluation.launch
        if launch is None:
            self.summary.setText("")
            return
        nodes = len(launch.nodes)
        self.summary.setText(f"{nodes} node{'s' if nodes != 1 else ''} · world size {launch.world_size}")
