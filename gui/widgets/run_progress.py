"""Progress of the watched run: epoch and step, elapsed time, and an ETA when the total is known."""

from __future__ import annotations

import time

from PySide6.QtWidgets import QHBoxLayout, QLabel, QProgressBar, QWidget

from gui.models.monitor import MonitorModel, Progress, format_duration
from runner.state import RunStatus


def progress_texts(progress: Progress, status: str | None) -> tuple[str, str]:
    """(position, timing) texts, e.g. ``("epoch 2/10 · 121/640 steps", "elapsed 1:05 · ETA 4:31")``.

    Steps are counted as done (the newest step index + 1), so a finished run reads
    "epoch 10/10 · 640/640 steps", not "step 639/640".
    """
    parts = []
    if progress.epoch is not None:
        parts.append(f"epoch {progress.epoch}" + (f"/{progress.total_epochs}" if progress.total_epochs else ""))
    done = progress.steps_done
    if done is not None:
        total = f"/{progress.total_steps:,}" if progress.total_steps else ""
        parts.append(f"{done:,}{total} step{'s' if (progress.total_steps or done) != 1 else ''}")
    timing = []
    if progress.elapsed_s is not None:
        timing.append(f"elapsed {format_duration(progress.elapsed_s)}")
    if progress.eta_s is not None and status in (RunStatus.RUNNING.value, RunStatus.STARTING.value):
        timing.append(f"ETA {format_duration(progress.eta_s)}")
    return " · ".join(parts) or "no steps yet", " · ".join(timing)


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
        position, timing = progress_texts(progress, status)
        if self.detached_at is not None:
            position += " when detached"
            timing = timing.split(" · ETA")[0] + " · not watched since"
        self.position_label.setText(position)
        self.timing_label.setText(timing)
        fraction = progress.fraction
        if fraction is None:
            self.bar.hide()
        else:
            self.bar.setValue(int(round(1000 * fraction)))
            self.bar.setFormat(f"{100 * fraction:.0f}%")
            self.bar.show()
        return progress
