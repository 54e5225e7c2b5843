"""Extra environment variables for every worker (name, value).

Names torchrun or Rankwatch set themselves (``RANK``, ``CUDA_VISIBLE_DEVICES``, ...)
are refused by ``runner.profile.check`` with a message saying where to set them instead;
the error appears under the table.
"""

from __future__ import annotations

from PySide6.QtWidgets import QHeaderView, QWidget

from gui.models.launch_form import FormState, LaunchFormModel
from gui.widgets.editable_table import EditableTable, RowCodec
from gui.widgets.filled_items import cell_item

NAME_COLUMN = 0
VALUE_COLUMN = 1


class EnvRows(RowCodec):
    """(name, value) pairs; names are stripped, values kept as typed."""

    def new(self) -> tuple[str, str]:
        return ("", "")

    def cells(self, row: tuple[str, str]) -> tuple[str, str]:
        return row

    def edited(self, row: tuple[str, str], column: int, text: str) -> tuple[str, str]:
        name, value = row
        return (text.strip(), value) if column == NAME_COLUMN else (name, text)


class EnvTable(EditableTable):
    def __init__(self, model: LaunchFormModel, parent: QWidget | None = None) -> None:
        super().__init__(("Name", "Value"), EnvRows(), lambda rows: model.update(env=tuple(rows)),
                         add_tip="Add a variable", remove_tip="Remove the selected variable",
                         shown_rows=(3, 6), parent=parent)
        self._rows: list[tuple[str, str]]

        self.table.verticalHeader().setVisible(False)
        self.table.horizontalHeader().setSectionResizeMode(NAME_COLUMN, QHeaderView.ResizeMode.Interactive)
        self.table.horizontalHeader().setSectionResizeMode(VALUE_COLUMN, QHeaderView.ResizeMode.Stretch)
        self.table.horizontalHeader().resizeSection(NAME_COLUMN, 170)
        self.table.setToolTip("Variables set for every worker, e.g. NCCL_DEBUG = INFO")
        self.button_row.addStretch(1)

        model.state_replaced.connect(self._on_state_replaced)
        self._on_state_replaced(model.state)

    def add_variable(self, name: str, value: str) -> None:
        """Add a row and type ``name`` and ``value`` into it (as a person would)."""
        self._on_add_clicked()
        row = self.table.rowCount() - 1
        cell_item(self.table, row, NAME_COLUMN).setText(name)
        cell_item(self.table, row, VALUE_COLUMN).setText(value)

    def _on_state_replaced(self, state: FormState) -> None:
        self._rows = [(name, value) for name, value in state.env]
        self._update_table()
