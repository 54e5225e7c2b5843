"""Progress of the watched run: epoch and step, elapsed time, and an ETA when the total is known.

Steps ``GradScaler`` skipped count as steps, and the line says how many: ``640/1,200 steps (3 skipped)``.
"""

from __future__ import annotations

import time

from PySide6.QtWidgets import QHBoxLayout, QLabel, QProgressBar, QWidget

from gui.gateway.wording import RunWording
from gui.models.monitor import MonitorModel, Progress


def watched_until(at: float) -> str:
    """When the window stopped watching, in local time: ``17:32:05``, with the date when it was
    not today (a tab left detached overnight would otherwise read as this afternoon)."""
    moment = time.localtime(at)
    if time.strftime("%Y-%m-%d", moment) == time.strftime("%Y-%m-%d"):
        return time.strftime("%H:%M:%S", moment)
    return time.strftime("%Y-%m-%d %H:%M:%S", moment)


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

    def set_detached(self, at: float | None) -> None:
        """The window stopped watching at ``at`` (``None``: watching again): what is shown is
        as of then, and says so; the run itself goes on headless."""
        self.detached_at = at
        self.refresh()

    detached_at: float | None = None

    def refresh(self, now: float | None = None) -> Progress:
        if self.model.run is None:
            self.position_label.setText("no run")
            self.timing_label.clear()
            self.bar.hide()
            return self.model.progress(time.time() if now is None else now)
        if self.detached_at is not None:
            now = self.detached_at
        progress = self.model.progress(now)
        status = self.model.status
        position, timing = RunWording.progress(progress, status)
        skipped = self.model.skipped_steps()
        if skipped and progress.steps_done is not None:
            position += f" ({skipped:,} skipped)"
        if self.detached_at is not None:
            position += " when detached"
            timing = timing.split(" · ETA")[0] + f" · not watched since {watched_until(self.detached_at)}"
        self.position_label.setText(position)
        self.timing_label.setText(timing)
        fraction = progress.fraction
        if fraction is None:
            self.bar.hide()
        else:
            self.bar.setValue(round(1000 * fraction))
            self.bar.setFormat(f"{100 * fraction:.0f}%")
            self.bar.show()
        return progress
