"""Extra environment variables for every worker (name, value).

Names torchrun or Rankwatch set themselves (``RANK``, ``CUDA_VISIBLE_DEVICES``, ...)
are refused by ``runner.spec.check`` with a message saying where to set them instead;
the error appears under the table.
"""

from __future__ import annotations

from PySide6.QtWidgets import (
    QAbstractItemView,
    QHBoxLayout,
    QHeaderView,
    QTableWidget,
    QTableWidgetItem,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from gui.models.launch_form import FormState, LaunchFormModel

NAME_COLUMN = 0
VALUE_COLUMN = 1


class EnvTable(QWidget):
    def __init__(self, model: LaunchFormModel, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._model = model
        self._pairs: list[list[str]] = []

        self.table = QTableWidget(0, 2)
        self.table.setHorizontalHeaderLabels(["Name", "Value"])
        self.table.verticalHeader().setVisible(False)
        self.table.verticalHeader().setDefaultSectionSize(self.fontMetrics().height() + 8)
        self.table.horizontalHeader().setSectionResizeMode(NAME_COLUMN, QHeaderView.ResizeMode.Interactive)
        self.table.horizontalHeader().setSectionResizeMode(VALUE_COLUMN, QHeaderView.ResizeMode.Stretch)
        self.table.horizontalHeader().resizeSection(NAME_COLUMN, 170)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setToolTip("Variables set for every worker, e.g. NCCL_DEBUG = INFO")
        self.table.itemChanged.connect(self._on_item_changed)
        self.add_button = QToolButton()
        self.add_button.setText("+")
        self.add_button.setToolTip("Add a variable")
        self.add_button.clicked.connect(self._on_add_clicked)
        self.remove_button = QToolButton()
        self.remove_button.setText("−")
        self.remove_button.setToolTip("Remove the selected variable")
        self.remove_button.clicked.connect(self._on_remove_clicked)

        buttons = QHBoxLayout()
        buttons.setContentsMargins(0, 0, 0, 0)
        buttons.addWidget(self.add_button)
        buttons.addWidget(self.remove_button)
        buttons.addStretch(1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(2)
        layout.addWidget(self.table)
        layout.addLayout(buttons)

        model.state_replaced.connect(self._on_state_replaced)
        self._on_state_replaced(model.state)

    def add_variable(self, name: str, value: str) -> None:
        """Add a row and type ``name`` and ``value`` into it (as a person would)."""
        self._on_add_clicked()
        row = self.table.rowCount() - 1
        self.table.item(row, NAME_COLUMN).setText(name)
        self.table.item(row, VALUE_COLUMN).setText(value)

    def _on_state_replaced(self, state: FormState) -> None:
        self._pairs = [[name, value] for name, value in state.env]
        self._update_table()

    def _update_table(self) -> None:
        self.table.blockSignals(True)
        self.table.setRowCount(len(self._pairs))
        for row, (name, value) in enumerate(self._pairs):
            self.table.setItem(row, NAME_COLUMN, QTableWidgetItem(name))
            self.table.setItem(row, VALUE_COLUMN, QTableWidgetItem(value))
        self.table.blockSignals(False)
        self.remove_button.setEnabled(bool(self._pairs))
        visible_rows = min(max(len(self._pairs), 3), 6)
        header = self.table.horizontalHeader().height() or self.fontMetrics().height() + 8
        self.table.setFixedHeight(header + visible_rows * self.table.verticalHeader().defaultSectionSize() + 4)

    def _push(self) -> None:
        self.remove_button.setEnabled(bool(self._pairs))
        self._model.update(env=tuple((name, value) for name, value in self._pairs))

    def _on_item_changed(self, item: QTableWidgetItem) -> None:
        row = item.row()
        if not 0 <= row < len(self._pairs):
            return
        self._pairs[row][item.column()] = item.text().strip() if item.column() == NAME_COLUMN else item.text()
        self._push()

    def _on_add_clicked(self) -> None:
        self._pairs.append(["", ""])
        self._update_table()
        self._push()
        # Selected: typing a name starts editing it.
        self.table.setCurrentCell(len(self._pairs) - 1, NAME_COLUMN)
        self.table.setFocus()

    def _on_remove_clicked(self) -> None:
        if not self._pairs:
            return
        row = self.table.currentRow()
        if not 0 <= row < len(self._pairs):
            row = len(self._pairs) - 1
        del self._pairs[row]
        self._update_table()
        self._push()
