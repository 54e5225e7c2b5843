"""The GPU picker: every GPU the runner's probe found, and which ones the job gets.

Three choices, as in the spec's ``gpus`` field: all GPUs, the ticked ones, or CPU
mode. Each row shows the GPU's name, memory, current utilisation and whether
something already runs on it (with the processes), like nvitop, so a busy GPU is
not picked by accident. Without a GPU (or a driver) the table gives way to the
reason, CPU mode is selected (the form turns "all" into "cpu") and the GPU choices
are disabled.
"""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QColor
from PySide6.QtWidgets import (
    QAbstractItemView,
    QButtonGroup,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QRadioButton,
    QTableWidget,
    QTableWidgetItem,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from gui.gateway.launch_rules import LaunchRules
from gui.gateway.launch_spec import GpuSelection
from gui.gateway.runner_rules import GpuReport
from gui.models.gpus import describe_gpus, gpu_rows
from gui.models.launch_form import FormState, LaunchFormModel
from gui.widgets.filled_items import cell_item

MODE_ALL, MODE_PICK, MODE_CPU = 0, 1, 2
COLUMNS = ["GPU", "Name", "Memory", "Util", "Status", "Processes"]
BUSY_COLOR = QColor(214, 140, 40)


class GpuPicker(QWidget):
    """Signals:
        refresh_requested(): the person asked for a fresh GPU reading.
    """

    refresh_requested = Signal()

    def __init__(self, model: LaunchFormModel, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._model = model
        self._updating = False

        self.headline = QLabel(describe_gpus(None))
        self.headline.setObjectName("hint")
        self.headline.setWordWrap(True)
        self.refresh_button = QToolButton()
        self.refresh_button.setText("Refresh")
        self.refresh_button.setToolTip("Read the GPUs again (utilisation, memory, processes)")
        self.refresh_button.clicked.connect(self.refresh_requested)

        self.all_button = QRadioButton("All GPUs")
        self.all_button.setToolTip('Every GPU of the machine (gpus = "all"); CPU mode when there is none')
        self.pick_button = QRadioButton("Selected")
        self.pick_button.setToolTip("Only the ticked GPUs (sets CUDA_VISIBLE_DEVICES)")
        self.cpu_button = QRadioButton("CPU only")
        self.cpu_button.setToolTip('No GPU: gloo backend, CUDA_VISIBLE_DEVICES="" (gpus = "cpu")')
        self.mode_group = QButtonGroup(self)
        for mode, button in ((MODE_ALL, self.all_button), (MODE_PICK, self.pick_button), (MODE_CPU, self.cpu_button)):
            self.mode_group.addButton(button, mode)
        self.mode_group.idClicked.connect(self._on_mode_clicked)
        for button in (self.all_button, self.pick_button):
            button.setProperty("tip", button.toolTip())

        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setHorizontalHeaderLabels(COLUMNS)
        self.table.verticalHeader().setVisible(False)
        self.table.verticalHeader().setDefaultSectionSize(self.fontMetrics().height() + 8)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.NoSelection)
        header = self.table.horizontalHeader()
        for column in range(len(COLUMNS) - 1):
            header.setSectionResizeMode(column, QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(len(COLUMNS) - 1, QHeaderView.ResizeMode.Stretch)
        self.table.itemChanged.connect(self._on_item_changed)

        top = QHBoxLayout()
        top.setContentsMargins(0, 0, 0, 0)
        top.addWidget(self.all_button)
        top.addWidget(self.pick_button)
        top.addWidget(self.cpu_button)
        top.addStretch(1)
        top.addWidget(self.refresh_button)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(4)
        layout.addLayout(top)
        layout.addWidget(self.headline)
        layout.addWidget(self.table)

        model.machine_changed.connect(self._on_machine_changed)
        model.state_replaced.connect(self._on_state_replaced)
        self._on_machine_changed(model.gpu_report)

    def row_of_gpu(self, index: int) -> int:
        """The table row showing GPU ``index`` (-1 when absent)."""
        for row in range(self.table.rowCount()):
            if cell_item(self.table, row, 0).data(Qt.ItemDataRole.UserRole) == index:
                return row
        return -1

    def set_gpu_checked(self, index: int, checked: bool) -> None:
        """Tick or untick GPU ``index`` (as clicking its check box does).

        Raises:
            KeyError: the picker shows no GPU ``index``.
        """
        row = self.row_of_gpu(index)
        if row < 0:
            raise KeyError(f"no GPU {index} in the picker")
        cell_item(self.table, row, 0).setCheckState(Qt.CheckState.Checked if checked else Qt.CheckState.Unchecked)

    def _on_machine_changed(self, report: GpuReport | None) -> None:
        self.headline.setText(describe_gpus(report))
        self._updating = True
        rows = gpu_rows(report) if report is not None else []
        self.table.setRowCount(len(rows))
        for row, gpu in enumerate(rows):
            check = QTableWidgetItem(str(gpu.index))
            check.setData(Qt.ItemDataRole.UserRole, gpu.index)
            check.setFlags(Qt.ItemFlag.ItemIsUserCheckable | Qt.ItemFlag.ItemIsEnabled)
            status = QTableWidgetItem(gpu.busy_text)
            if gpu.busy:
                status.setForeground(BUSY_COLOR)
                status.setToolTip("Something already runs on this GPU: " + (gpu.processes or "high utilisation"))
            processes = QTableWidgetItem(gpu.processes or "—")
            processes.setToolTip(gpu.processes)
            for column, item in enumerate((check, QTableWidgetItem(gpu.name), QTableWidgetItem(gpu.memory),
                                           QTableWidgetItem(gpu.utilization), status, processes)):
                self.table.setItem(row, column, item)
        has_gpus = bool(rows)
        self.table.setVisible(has_gpus)
        self.refresh_button.setEnabled(True)
        visible_rows = min(max(len(rows), 1), 8)
        header = self.table.horizontalHeader().height() or self.fontMetrics().height() + 8
        self.table.setFixedHeight(header + visible_rows * self.table.verticalHeader().defaultSectionSize() + 4)
        self._updating = False
        self._update_selection(self._model.state)

    def _on_state_replaced(self, state: FormState) -> None:
        self._update_selection(state)

    def _update_selection(self, state: FormState) -> None:
        """Show ``state.gpus`` as the radio choice and the ticks."""
        gpus = state.gpus
        report = self._model.gpu_report
        has_gpus = report is not None and report.available
        mode = MODE_CPU if gpus == LaunchRules.CPU_ONLY else MODE_ALL if gpus == LaunchRules.ALL_GPUS else MODE_PICK
        self._updating = True
        self.mode_group.button(mode).setChecked(True)
        # Without a GPU only CPU mode is offered (a profile that picks GPU indices keeps its
        # choice selectable, so its error shows).
        no_gpu = report is not None and not has_gpus
        self.all_button.setEnabled(not no_gpu or mode == MODE_ALL)
        self.pick_button.setEnabled(has_gpus or mode == MODE_PICK)
        reason = f"No GPU here: {report.describe_unavailable()}" if report is not None and no_gpu else ""
        for button in (self.all_button, self.pick_button):
            button.setToolTip(reason or button.property("tip") or button.toolTip())
        picked = set(gpus) if isinstance(gpus, tuple) else set()
        for row in range(self.table.rowCount()):
            item = cell_item(self.table, row, 0)
            index = item.data(Qt.ItemDataRole.UserRole)
            ticked = mode == MODE_ALL or index in picked
            item.setCheckState(Qt.CheckState.Checked if ticked else Qt.CheckState.Unchecked)
            flags = Qt.ItemFlag.ItemIsUserCheckable | Qt.ItemFlag.ItemIsEnabled if mode == MODE_PICK \
                else Qt.ItemFlag.ItemIsUserCheckable
            item.setFlags(flags)
        self._updating = False

    def _ticked(self) -> tuple[int, ...]:
        ticked = []
        for row in range(self.table.rowCount()):
            item = cell_item(self.table, row, 0)
            if item.checkState() == Qt.CheckState.Checked:
                ticked.append(item.data(Qt.ItemDataRole.UserRole))
        return tuple(sorted(ticked))

    def _on_mode_clicked(self, mode: int) -> None:
        gpus: GpuSelection
        if mode == MODE_ALL:
            gpus = LaunchRules.ALL_GPUS
        elif mode == MODE_CPU:
            gpus = LaunchRules.CPU_ONLY
        else:
            current = self._model.state.gpus
            # Start from what was picked before, else every GPU, else GPU 0.
            gpus = current if isinstance(current, tuple) else (self._ticked() or (0,))
        self._model.update(gpus=gpus)
        self._update_selection(self._model.state)

    def _on_item_changed(self, item: QTableWidgetItem) -> None:
        if self._updating or item.column() != 0:
            return
        self._model.update(gpus=self._ticked())
