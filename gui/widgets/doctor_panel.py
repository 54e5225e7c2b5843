"""The Doctor panel: is this machine (and the form's interpreter) ready for a distributed job?

It runs ``python -m runner doctor --json --interpreter PATH`` through the gateway
(``gui.gateway.doctor``: the checks import torch in that interpreter and ask NVML,
which the GUI itself never does; that takes a second or two), and shows each check with its status (ok,
info, warning, failed) and the facts by section: system, interpreter, GPUs,
backends, port, threads, ``CUDA_VISIBLE_DEVICES``, environment. Re-run checks
again (for another interpreter, after fixing something). Nothing blocks the GUI
thread; a doctor that does not answer within the timeout is killed and reported.

``DoctorDialog`` wraps the panel for the window's Tools ▸ Doctor menu.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QBrush, QColor, QFont
from PySide6.QtWidgets import (
    QAbstractItemView,
    QDialog,
    QDialogButtonBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPushButton,
    QSplitter,
    QTableWidget,
    QTableWidgetItem,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from gui.gateway.doctor import DoctorProcess
from gui.gateway.runner_rules import RankState
from gui.models.doctor import DONE, FAIL, FAILED, INFO, OK, WARN, DoctorModel, doctor_arguments
from gui.widgets.filled_items import cell_item, child_item, top_level_item
from gui.widgets.rank_table import STATE_COLORS

STATUS_COLORS = {
    OK: STATE_COLORS[RankState.RUNNING.value],
    INFO: STATE_COLORS[RankState.EXITED.value],
    WARN: STATE_COLORS[RankState.STALLED.value],
    FAIL: STATE_COLORS[RankState.FAILED.value],
}
STATUS_MARKS = {OK: "✔ ok", INFO: "ℹ info", WARN: "▲ warning", FAIL: "✖ failed"}


class DoctorPanel(QWidget):
    """Checks of this machine for the interpreter ``interpreter()`` returns.

    Signals:
        finished(bool): a doctor run ended; True when it produced a report.
    """

    finished = Signal(bool)

    def __init__(self, interpreter: Callable[[], str | None] | None = None, parent: QWidget | None = None, *,
                 command: Sequence[str] | None = None, timeout_ms: int = DoctorProcess.TIMEOUT_MS) -> None:
        super().__init__(parent)
        self.model = DoctorModel()
        self._interpreter = interpreter or (lambda: None)
        self.process = DoctorProcess(self, command=command, timeout_ms=timeout_ms)
        self.process.answered.connect(self._on_answered)
        self.process.failed.connect(self._on_failed)

        self.status = QLabel("Not checked yet.")
        self.status.setWordWrap(True)
        status_font = QFont(self.font())
        status_font.setBold(True)
        self.status.setFont(status_font)
        self.rerun_button = QPushButton("Re-run")
        self.rerun_button.setToolTip("Check again (with the interpreter picked in the launch form)")
        self.rerun_button.clicked.connect(self._on_rerun_clicked)
        top = QHBoxLayout()
        top.addWidget(self.status, 1)
        top.addWidget(self.rerun_button)

        self.checks = QTableWidget(0, 3)
        self.checks.setHorizontalHeaderLabels(["Status", "Check", "Finding"])
        self.checks.verticalHeader().setVisible(False)
        self.checks.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.checks.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.checks.setWordWrap(True)  # a finding is one sentence, often long: wrapped, never cut
        header = self.checks.horizontalHeader()
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(1, QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(2, QHeaderView.ResizeMode.Stretch)
        header.sectionResized.connect(self._on_checks_resized)
        self.sections = QTreeWidget()
        self.sections.setColumnCount(2)
        self.sections.setHeaderLabels(["Fact", "Value"])
        self.sections.setWordWrap(True)
        self.sections.header().setSectionResizeMode(0, QHeaderView.ResizeMode.ResizeToContents)
        self.sections.header().setStretchLastSection(True)
        splitter = QSplitter(Qt.Orientation.Vertical)
        splitter.addWidget(self.checks)
        splitter.addWidget(self.sections)
        splitter.setStretchFactor(0, 1)
        splitter.setStretchFactor(1, 1)

        layout = QVBoxLayout(self)
        layout.addLayout(top)
        layout.addWidget(splitter, 1)
        self._bold = status_font
        self.model.changed.connect(self._on_model_changed)

    # ---- running ---------------------------------------------------------------------

    def is_running(self) -> bool:
        return self.process.is_running()

    def run(self) -> None:
        """Start a doctor run (nothing happens while one is running)."""
        if self.process.is_running():
            return
        interpreter = self._interpreter() or None
        self.model.started(interpreter)
        self.process.start(doctor_arguments(interpreter))

    def shutdown(self) -> None:
        """Kill a running doctor (the window is closing)."""
        self.process.shutdown()

    def _on_rerun_clicked(self) -> None:
        self.run()

    def _on_answered(self, stdout: str, stderr: str, exit_code: int) -> None:
        self.model.finished(stdout, stderr, exit_code)
        self.finished.emit(self.model.report is not None and self.model.error is None)

    def _on_failed(self, message: str) -> None:
        self.model.failed(message)
        self.finished.emit(False)

    # ---- drawing ---------------------------------------------------------------------

    def _on_model_changed(self) -> None:
        model = self.model
        self.status.setText(model.status_text)
        self.rerun_button.setEnabled(not model.running)
        self.rerun_button.setText("Checking…" if model.running else "Re-run")
        report = model.report
        if model.state == FAILED or (model.state == DONE and report is not None and not report.ok):
            self.status.setStyleSheet(f"color: {STATUS_COLORS[FAIL].name()};")
        elif model.state == DONE:
            self.status.setStyleSheet(f"color: {STATUS_COLORS[OK].name()};")
        else:
            self.status.setStyleSheet("")
        if report is None or model.running:
            return
        self.checks.setRowCount(len(report.checks))
        for row, check in enumerate(report.checks):
            color = STATUS_COLORS.get(check.status, STATUS_COLORS[INFO])
            tint = QColor(color)
            tint.setAlpha(40 if check.status in (OK, INFO) else 70)
            for column, text in enumerate((STATUS_MARKS.get(check.status, check.status), check.key, check.message)):
                item = QTableWidgetItem(text)
                item.setBackground(QBrush(tint))
                item.setToolTip(check.message)
                if column == 0:
                    item.setForeground(QBrush(color))
                    item.setFont(self._bold)
                    item.setData(Qt.ItemDataRole.UserRole, check.status.value)
                self.checks.setItem(row, column, item)
        self.checks.resizeRowsToContents()
        self.sections.clear()
        for section in report.sections:
            parent = QTreeWidgetItem([section.title, ""])
            parent.setFont(0, self._bold)
            for label, value in section.rows:
                child = QTreeWidgetItem([label, value])
                child.setToolTip(1, value)
                parent.addChild(child)
            self.sections.addTopLevelItem(parent)
            parent.setExpanded(True)

    def _on_checks_resized(self, index: int, _old: int, _new: int) -> None:
        if index == 2:
            self.checks.resizeRowsToContents()

    # ---- for tests -------------------------------------------------------------------

    def check_rows(self) -> list[tuple[str, str, str]]:
        """(status, key, message) of every check as shown."""
        return [(cell_item(self.checks, row, 0).data(Qt.ItemDataRole.UserRole), cell_item(self.checks, row, 1).text(),
                 cell_item(self.checks, row, 2).text()) for row in range(self.checks.rowCount())]

    def section_titles(self) -> list[str]:
        return [top_level_item(self.sections, i).text(0) for i in range(self.sections.topLevelItemCount())]

    def section_rows(self, title: str) -> list[tuple[str, str]]:
        for index in range(self.sections.topLevelItemCount()):
            item = top_level_item(self.sections, index)
            if item.text(0) == title:
                children = [child_item(item, i) for i in range(item.childCount())]
                return [(child.text(0), child.text(1)) for child in children]
        raise KeyError(title)


class DoctorDialog(QDialog):
    """Tools ▸ Doctor: the panel in its own window (not modal: the main window stays usable)."""

    def __init__(self, interpreter: Callable[[], str | None] | None = None, parent: QWidget | None = None, *,
                 command: Sequence[str] | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Doctor — is this machine ready?")
        self.panel = DoctorPanel(interpreter, self, command=command)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.close)
        layout = QVBoxLayout(self)
        layout.addWidget(self.panel, 1)
        layout.addWidget(buttons)
        self.resize(900, 640)

    def open_and_run(self) -> None:
        """Show the dialog and check again (unless a check is running)."""
        self.show()
        self.raise_()
        self.activateWindow()
        self.panel.run()
