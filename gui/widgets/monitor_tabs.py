"""Several runs at once: one :class:`~gui.widgets.monitor_panel.MonitorPanel` per run, in tabs.

Launching while a run is live opens a new tab for the new run (the live one keeps
going and keeps being watched), as a terminal opens a new tab for a second job;
opening a run from History switches to its tab when it is already open, reuses a
tab that watches nothing live, or opens a new one. A tab's title is the run and a
dot in its status colour. Closing a tab that watches a live run asks whether to
stop the run or leave it running headless. The tab bar hides while there is only
one tab.
"""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import Signal
from PySide6.QtGui import QColor, QIcon, QPixmap
from PySide6.QtWidgets import QMessageBox, QTabWidget, QWidget

from gui.widgets.monitor_panel import (
    DETACHED,
    DETACHED_COLOR,
    LAUNCHING,
    STATUS_COLORS,
    MonitorPanel,
)

STOP_RUN, LEAVE_RUNNING, CANCEL = "stop", "leave", "cancel"
PanelFactory = Callable[[], MonitorPanel]


def status_icon(color: QColor | None) -> QIcon:
    pixmap = QPixmap(10, 10)
    pixmap.fill(color if color is not None else QColor(0, 0, 0, 0))
    return QIcon(pixmap)


class MonitorTabs(QTabWidget):
    """The Monitor tab's content: a tab per watched run.

    Signals:
        panel_state_changed(MonitorPanel, str): a panel's run changed state (``run_state_changed``).
        current_panel_changed(MonitorPanel): another run's tab is in front.
        panel_closed(MonitorPanel): a tab was closed (the panel is deleted later).
    """

    panel_state_changed = Signal(object, str)
    current_panel_changed = Signal(object)
    panel_closed = Signal(object)

    def __init__(self, parent: QWidget | None = None, panel_factory: PanelFactory = MonitorPanel) -> None:
        super().__init__(parent)
        self._factory = panel_factory
        self.setDocumentMode(True)
        self.setTabsClosable(True)
        self.setMovable(True)
        self.setTabBarAutoHide(True)
        self.tabCloseRequested.connect(self._on_close_requested)
        self.currentChanged.connect(self._on_current_changed)
        self.add_panel()

    # ---- panels ----------------------------------------------------------------------

    @property
    def current(self) -> MonitorPanel:
        return self.panel_at(self.currentIndex())

    def panels(self) -> list[MonitorPanel]:
        return [self.panel_at(index) for index in range(self.count())]

    def panel_at(self, index: int) -> MonitorPanel:
        """The panel in tab ``index`` (every tab holds one: ``add_panel`` is the only way in)."""
        panel = self.widget(index)
        if not isinstance(panel, MonitorPanel):
            raise IndexError(f"no monitor panel at tab {index} of {self.count()}")
        return panel

    def add_panel(self) -> MonitorPanel:
        panel = self._create_panel()
        index = self.addTab(panel, "No run")
        self.setCurrentIndex(index)
        return panel

    def _create_panel(self) -> MonitorPanel:
        panel = self._factory()
        panel.run_state_changed.connect(lambda state, p=panel: self._on_panel_state(p, state))
        return panel

    def is_idle(self, panel: MonitorPanel) -> bool:
        """Watches nothing live and is not launching: it may take another run."""
        return not panel.has_live_run()

    def panel_for_launch(self) -> MonitorPanel:
        """The tab a new launch goes to: this one if it is idle, else another idle one, else a new one."""
        if self.is_idle(self.current):
            return self.current
        for panel in self.panels():
            if self.is_idle(panel):
                self.setCurrentWidget(panel)
                return panel
        return self.add_panel()

    def panel_for_run(self, run_id: int) -> tuple[MonitorPanel, bool]:
        """The tab to open run ``run_id`` in, and whether it shows that run already.

        A tab detached from it shows it as it was then, and its panel still carries the state of
        that first watch (its link, its model, its "when detached" header): like ``docker
        attach``, coming back gives a fresh panel, put in that tab's place, which then attaches."""
        for panel in self.panels():
            if panel.run_id == run_id and panel.model.run is not None:
                if panel.is_detached:
                    return self.replace_panel(panel), False
                self.setCurrentWidget(panel)
                return panel, True
        return self.panel_for_launch(), False

    def replace_panel(self, stale: MonitorPanel) -> MonitorPanel:
        """Put a fresh panel where ``stale`` is (same index, in front) and drop ``stale``."""
        index = self.indexOf(stale)
        fresh = self._create_panel()
        self.insertTab(index, fresh, self.tabText(index))
        self.setCurrentWidget(fresh)
        self.removeTab(self.indexOf(stale))
        stale.detach()
        self.panel_closed.emit(stale)
        stale.deleteLater()
        return fresh

    def live_panels(self) -> list[MonitorPanel]:
        return [panel for panel in self.panels() if panel.has_live_run()]

    # ---- titles ----------------------------------------------------------------------

    def _on_panel_state(self, panel: MonitorPanel, state: str) -> None:
        self.update_title(panel, state)
        self.panel_state_changed.emit(panel, state)

    def update_title(self, panel: MonitorPanel, state: str | None = None) -> None:
        index = self.indexOf(panel)
        if index < 0:
            return
        state = state or panel.model.shown_status or ""
        title = "Launching…" if state == LAUNCHING and panel.run_id is None else (
            "No run" if panel.run_id is None else f"Run {panel.run_id}")
        self.setTabText(index, title)
        self.setTabToolTip(index, f"{title}: {state}" if state else title)
        color = DETACHED_COLOR if state == DETACHED else STATUS_COLORS.get(state)
        self.setTabIcon(index, status_icon(color))

    def _on_current_changed(self, _index: int) -> None:
        if self.count():
            self.current_panel_changed.emit(self.current)

    # ---- closing ---------------------------------------------------------------------

    def ask_live_run_choice(self, text: str) -> str:
        """``STOP_RUN``, ``LEAVE_RUNNING`` or ``CANCEL``."""
        box = QMessageBox(QMessageBox.Icon.Question, "A run is live", text, parent=self)
        stop = box.addButton("Stop it", QMessageBox.ButtonRole.DestructiveRole)
        leave = box.addButton("Leave it running", QMessageBox.ButtonRole.AcceptRole)
        box.addButton(QMessageBox.StandardButton.Cancel)
        box.setDefaultButton(leave)
        box.exec()
        clicked = box.clickedButton()
        return STOP_RUN if clicked is stop else LEAVE_RUNNING if clicked is leave else CANCEL

    def close_panel(self, panel: MonitorPanel, choice: str | None = None) -> bool:
        """Close ``panel``'s tab (asking about its live run); the last tab is emptied instead."""
        if panel.has_live_run():
            choice = choice or self.ask_live_run_choice(
                f"Run {panel.run_id} is still running. Stop it, or leave it running without watching? "
                "You can attach to it again from History.")
            if choice == CANCEL:
                return False
            if choice == STOP_RUN:
                panel.request_stop(force=False)
            panel.detach()
        if self.count() == 1:
            replacement = self.add_panel()  # the Monitor tab always shows one panel
            self.setCurrentWidget(replacement)
        self.removeTab(self.indexOf(panel))
        panel.detach()
        self.panel_closed.emit(panel)
        panel.deleteLater()
        return True

    def _on_close_requested(self, index: int) -> None:
        self.close_panel(self.panel_at(index))
