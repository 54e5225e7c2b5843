"""Progress of the watched run: epoch and step, elapsed time, and an ETA when the total is known."""

from __future__ import annotations

import time

from PySide6.QtWidgets import QHBoxLayout, QLabel, QProgressBar, QWidget

from gui.models.monitor import MonitorModel, Progress
from runner.state import RunStatus
from runner.view.progress import progress_texts


class RunProgress(QWidget):
    """A line of text and a bar (shown only when the number of steps is known)."""

    def __init__(self, model: MonitorModel, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.model = model
        self.position_label = QLabel("no run")
        self.timing_label = QLabel()
        self.bar = QProgressBar()
        self.bar.setRange(0, 1000)
        self.bar.setTextVisible(True)
        self.bar.setMaximumWidth(220)
        self.bar.setMaximumHeight(16)
        self.bar.hide()
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.position_label)
        layout.addWidget(self.bar)
        layout.addWidget(self.timing_label)

    def set_model(self, model: MonitorModel) -> None:
        self.model = model
        self.refresh()

    def refresh(self, now: float | None = None) -> Progress:
        if self.model.run is None:
            self.position_label.setText("no run")
            self.timing_label.clear()
            self.bar.hide()
            return self.model.progress(time.time() if now is None else now)
        progress = self.model.progress(now)
        status = self.model.status
        position, timing = progress_texts(progress, status)
        self.position_label.setText(position)
        self.timing_label.setText(timing)
        fraction = progress.fraction
        if status == RunStatus.SUCCEEDED.value and progress.total_steps:
            fraction = 1.0
        if fraction is None:
            self.bar.hide()
        else:
            self.bar.setValue(round(1000 * fraction))
            self.bar.setFormat(f"{100 * fraction:.0f}%")
            self.bar.show()
        return progress
