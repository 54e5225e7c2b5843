"""The Rankwatch window: Launch | Monitor | History tabs, menus, shortcuts, lifetime.

* **Launch** (``LaunchPanel``): profiles and the launch form; Launch hands the spec to
  the monitor and switches to it.
* **Monitor** (``MonitorPanel``): the run being watched.
* **History** (``HistoryPanel``): past runs and live ones to attach to again.
* **Tools ▸ Doctor** (``DoctorDialog``): is this machine ready for the form's interpreter.

Closing the window while a job runs asks whether to stop the job or leave it
running: a job left running goes on headless (the runner is its own process) and
the window can attach to it again later from History.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt, QTimer
from PySide6.QtGui import QAction, QCloseEvent, QColor, QIcon, QKeySequence, QPalette
from PySide6.QtWidgets import (
    QApplication,
    QLabel,
    QMainWindow,
    QMessageBox,
    QSplitter,
    QTabWidget,
    QWidget,
)

from gui.models.launch_form import Evaluation, LaunchFormModel
from gui.models.profiles import ProfileListModel
from gui.runner_probe import RunnerProbe
from gui.settings import AppSettings
from gui.widgets.doctor_panel import DoctorDialog
from gui.widgets.history_panel import HistoryPanel
from gui.widgets.launch_panel import LaunchPanel
from gui.widgets.monitor_panel import MonitorPanel
from runner import paths
from runner.profile.files import EXAMPLE_PROFILE, ProfileError
from runner.profile.parse import SpecErrors

APP_TITLE = "Rankwatch"
DEFAULT_SIZE = (1320, 840)
LIVE_RUN_BLOCK = "A run is live: watch it in the Monitor tab, or stop it (Ctrl+.) before launching another"
STOPPING = "stopping"
STOP_RUN, LEAVE_RUNNING, CANCEL = "stop", "leave", "cancel"
LIVE_RUNS_HINT_DELAY_MS = 3000


def _dark_palette() -> QPalette:
    palette = QPalette()
    colors = {
        QPalette.ColorRole.Window: "#1e1f22", QPalette.ColorRole.WindowText: "#e2e4e8",
        QPalette.ColorRole.Base: "#2b2d31", QPalette.ColorRole.AlternateBase: "#25272b",
        QPalette.ColorRole.ToolTipBase: "#2b2d31", QPalette.ColorRole.ToolTipText: "#e2e4e8",
        QPalette.ColorRole.PlaceholderText: "#80858d", QPalette.ColorRole.Text: "#e2e4e8",
        QPalette.ColorRole.Button: "#34373c", QPalette.ColorRole.ButtonText: "#e2e4e8",
        QPalette.ColorRole.BrightText: "#ff6b6b", QPalette.ColorRole.Light: "#4a4d53",
        QPalette.ColorRole.Midlight: "#3d4046", QPalette.ColorRole.Mid: "#2a2c30",
        QPalette.ColorRole.Dark: "#151618", QPalette.ColorRole.Shadow: "#000000",
        QPalette.ColorRole.Highlight: "#3d7bd9", QPalette.ColorRole.HighlightedText: "#ffffff",
        QPalette.ColorRole.Link: "#6ea8fe", QPalette.ColorRole.LinkVisited: "#b197fc",
    }
    for role, color in colors.items():
        palette.setColor(role, QColor(color))
    for role in (QPalette.ColorRole.WindowText, QPalette.ColorRole.Text, QPalette.ColorRole.ButtonText):
        palette.setColor(QPalette.ColorGroup.Disabled, role, QColor("#6b6f76"))
    return palette


def _style_sheet(palette: QPalette) -> str:
    """The few touches the palette cannot give: muted hints, bold section titles, the command box."""
    text, window = palette.color(QPalette.ColorRole.WindowText), palette.color(QPalette.ColorRole.Window)
    hint = QColor((text.red() + 2 * window.red()) // 3 + 10, (text.green() + 2 * window.green()) // 3 + 10,
                  (text.blue() + 2 * window.blue()) // 3 + 10)
    code = palette.color(QPalette.ColorRole.AlternateBase).name()
    return (f"QLabel#hint {{ color: {hint.name()}; }}\n"
            "QLabel#sectionTitle { font-weight: 600; }\n"
            "QGroupBox { font-weight: 600; }\n"
            "QGroupBox > QWidget, QGroupBox QLabel, QGroupBox QAbstractButton { font-weight: normal; }\n"
            f"QPlainTextEdit#commandPreview {{ background: {code}; }}\n"
            "QPushButton#launchButton { font-weight: 600; }\n")


def is_dark_scheme(app: QApplication, requested: str = "system") -> bool:
    if requested != "system":
        return requested == "dark"
    return app.styleHints().colorScheme() == Qt.ColorScheme.Dark


def apply_color_scheme(app: QApplication, requested: str = "system") -> None:
    """Fusion with a light or dark palette: ``requested`` is ``system``, ``light`` or ``dark``."""
    app.setStyle("Fusion")
    palette = _dark_palette() if is_dark_scheme(app, requested) else app.style().standardPalette()
    app.setPalette(palette)
    app.setStyleSheet(_style_sheet(palette))


def follow_system_color_scheme(app: QApplication) -> None:
    """Re-apply the palette whenever the system switches between light and dark."""
    app.styleHints().colorSchemeChanged.connect(lambda _scheme: apply_color_scheme(app, "system"))


def app_icon() -> QIcon:
    icon = QIcon()
    for name in ("rankwatch.svg", "rankwatch.png"):
        path = paths.assets_dir() / name
        if path.exists():
            icon.addFile(str(path))
    return icon


class MainWindow(QMainWindow):
    def __init__(self, settings: AppSettings | None = None, probe: RunnerProbe | None = None,
                 initial_profile: str | None = None, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle(APP_TITLE)
        self.setWindowIcon(app_icon())
        self.settings = settings or AppSettings()
        self.probe = probe or RunnerProbe(parent=self)
        if self.probe.parent() is None:
            self.probe.setParent(self)
        self.form = LaunchFormModel()
        self.profiles = ProfileListModel()
        self._run_state: str | None = None
        self.doctor_dialog: DoctorDialog | None = None

        self.launch_panel = LaunchPanel(self.form, self.profiles, self.probe, self.settings)
        self.monitor = MonitorPanel()
        self.history = HistoryPanel()
        self.tabs = QTabWidget()
        self.tabs.setDocumentMode(True)
        self.tabs.addTab(self.launch_panel, "Launch")
        self.tabs.addTab(self.monitor, "Monitor")
        self.tabs.addTab(self.history, "History")
        self.setCentralWidget(self.tabs)
        self.run_label = QLabel()
        self.probe_label = QLabel()
        self.statusBar().addPermanentWidget(self.probe_label)
        self.statusBar().addPermanentWidget(self.run_label)

        self._build_actions()
        self.launch_panel.launch_requested.connect(self._on_launch_requested)
        self.history.open_run_requested.connect(self._on_open_run_requested)
        self.monitor.run_state_changed.connect(self._on_run_state_changed)
        self.profiles.current_changed.connect(self._on_current_profile_changed)
        self.form.evaluated.connect(self._on_form_evaluated)
        self.probe.busy_changed.connect(self._on_probe_busy_changed)

        self._restore_layout()
        self._restore_profile(initial_profile)
        self._update_title()
        # Jobs left running by an earlier session: say so once History has read the store.
        QTimer.singleShot(LIVE_RUNS_HINT_DELAY_MS, self, self._on_live_runs_hint_due)

    # Building.

    def _action(self, text: str, shortcut: QKeySequence | str | None, slot, tip: str = "") -> QAction:
        action = QAction(text, self)
        if shortcut is not None:
            action.setShortcut(QKeySequence(shortcut))
            action.setShortcutContext(Qt.ShortcutContext.WindowShortcut)
        if tip:
            action.setStatusTip(tip)
        action.triggered.connect(lambda _checked=False: slot())
        self.addAction(action)
        return action

    def _build_actions(self) -> None:
        profiles = self.launch_panel.profile_list
        self.save_action = self._action("&Save profile", QKeySequence.StandardKey.Save, profiles.save_current,
                                        "Save the form over the current profile")
        self.save_as_action = self._action("Save profile &as…", "Ctrl+Shift+S", profiles.save_as)
        self.import_action = self._action("&Import profile…", None, profiles.import_file)
        self.export_action = self._action("&Export profile…", None, profiles.export_file)
        self.quit_action = self._action("&Quit", QKeySequence.StandardKey.Quit, self.close)
        self.launch_action = self._action("&Launch", "Ctrl+R", self._on_launch_triggered,
                                          "Launch the job described by the form")
        self.stop_action = self._action("&Stop", "Ctrl+.", self._on_stop_triggered,
                                        "Stop the running job (asks first; again to force)")
        self.attach_action = self._action("&Attach to a live run…", None, self._on_attach_triggered,
                                          "Pick a run that is still going (History tab)")
        self.doctor_action = self._action("&Doctor…", None, self._on_doctor_triggered,
                                          "Check this machine and the form's interpreter for distributed jobs")
        self.tab_actions = [
            self._action(f"&{name}", f"Ctrl+{index + 1}", lambda i=index: self.tabs.setCurrentIndex(i))
            for index, name in enumerate(("Launch", "Monitor", "History"))
        ]
        self.stop_action.setEnabled(False)

        menu = self.menuBar()
        file_menu = menu.addMenu("&File")
        for action in (self.save_action, self.save_as_action):
            file_menu.addAction(action)
        file_menu.addSeparator()
        file_menu.addAction(self.import_action)
        file_menu.addAction(self.export_action)
        file_menu.addSeparator()
        file_menu.addAction(self.quit_action)
        run_menu = menu.addMenu("&Run")
        for action in (self.launch_action, self.stop_action, self.attach_action):
            run_menu.addAction(action)
        view_menu = menu.addMenu("&View")
        for action in self.tab_actions:
            view_menu.addAction(action)
        tools_menu = menu.addMenu("&Tools")
        tools_menu.addAction(self.doctor_action)

    # Settings.

    def _restore_layout(self) -> None:
        geometry = self.settings.window_geometry()
        if geometry is None or not self.restoreGeometry(geometry):
            self.resize(*DEFAULT_SIZE)
        state = self.settings.window_state()
        if state is not None:
            self.restoreState(state)
        for splitter in self._named_splitters():
            saved = self.settings.splitter_state(splitter.objectName())
            if saved is not None:
                splitter.restoreState(saved)

    def _save_layout(self) -> None:
        self.settings.set_window(self.saveGeometry(), self.saveState())
        for splitter in self._named_splitters():
            self.settings.set_splitter_state(splitter.objectName(), splitter.saveState())
        self.settings.sync()

    def _named_splitters(self) -> list[QSplitter]:
        """Every splitter with an object name (the monitor's too): their sizes are remembered."""
        return [splitter for splitter in self.findChildren(QSplitter) if splitter.objectName()]

    def _restore_profile(self, requested: str | None) -> None:
        """Load ``requested``, else the last used profile, else the bundled example."""
        candidates = [requested] if requested else []
        last = self.settings.last_profile()
        if last and last in self.profiles.names:
            candidates.append(last)
        candidates.append(EXAMPLE_PROFILE)
        for name in candidates:
            try:
                profile = self.profiles.load(name)
            except (ProfileError, SpecErrors) as error:
                self.statusBar().showMessage(f"Profile {name!r} cannot be loaded: {error}", 15000)
                continue
            self.form.load(profile.spec, profile_name=name, base_dir=profile.base_dir)
            return

    # Handlers.

    def _on_current_profile_changed(self, name: str | None) -> None:
        self.settings.set_last_profile(name)
        self._update_title()

    def _on_form_evaluated(self, _evaluation: Evaluation) -> None:
        self._update_title()

    def _update_title(self) -> None:
        name = self.form.profile_name
        if name is None:
            self.setWindowTitle(APP_TITLE)
            return
        self.setWindowModified(self.form.dirty)
        self.setWindowTitle(f"{name}[*] — {APP_TITLE}")

    def _on_probe_busy_changed(self, busy: bool) -> None:
        self.probe_label.setText("Probing the interpreter and GPUs…" if busy else "")

    def _on_launch_triggered(self) -> None:
        if not self.launch_panel.trigger_launch():
            self.tabs.setCurrentWidget(self.launch_panel)
            self.statusBar().showMessage(f"Cannot launch: {self.launch_panel.status.text()}", 8000)

    def _on_launch_requested(self, spec, profile_name: str | None, base_dir: Path) -> None:
        try:
            self.monitor.launch(spec, profile_name, Path(base_dir))
        except Exception as error:  # the monitor reports its own failures; this is the last resort
            QMessageBox.critical(self, "Launch failed", f"The job could not be started:\n\n{error}")
            return
        self.tabs.setCurrentWidget(self.monitor)
        self._update_run_controls()

    def _on_open_run_requested(self, run_id: int) -> None:
        if self.monitor.has_live_run():
            answer = QMessageBox.question(
                self, "Watch another run",
                "The monitor is watching a live run. Leave it running (headless) and open this one?")
            if answer != QMessageBox.StandardButton.Yes:
                return
            self.monitor.detach()
        self.monitor.attach(run_id)
        self.tabs.setCurrentWidget(self.monitor)
        self._update_run_controls()

    def _on_live_runs_hint_due(self) -> None:
        if self.monitor.has_live_run():
            return
        live = [row for row in self.history.rows() if getattr(row, "live", False)]
        if live:
            runs = ", ".join(str(row.run_id) for row in live[:5])
            self.statusBar().showMessage(
                f"{len(live)} job{'s are' if len(live) != 1 else ' is'} still running (run {runs}): "
                "attach from History (double-click) or Run ▸ Attach", 20000)

    def _on_doctor_triggered(self) -> None:
        if self.doctor_dialog is None:
            self.doctor_dialog = DoctorDialog(self.form.head_python, self)
        self.doctor_dialog.open_and_run()

    def _on_attach_triggered(self) -> None:
        self.tabs.setCurrentWidget(self.history)
        self.statusBar().showMessage("Pick a live run in the list to attach to it", 6000)

    def _on_run_state_changed(self, state: str) -> None:
        self._run_state = state
        self._update_run_controls()

    def _update_run_controls(self) -> None:
        live = self.monitor.has_live_run()
        self.stop_action.setEnabled(live)
        self.launch_panel.set_launch_blocked(LIVE_RUN_BLOCK if live else None)
        self.run_label.setText(f"Run: {self._run_state}" if self._run_state else "")

    def _on_stop_triggered(self) -> None:
        if not self.monitor.has_live_run():
            self.statusBar().showMessage("No live run to stop", 4000)
            return
        if self._run_state == STOPPING:
            answer = QMessageBox.warning(
                self, "Force stop",
                "The job is still stopping. Kill it now? Every worker process is killed (SIGKILL); "
                "anything not yet saved is lost.",
                QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.No, QMessageBox.StandardButton.No)
            if answer == QMessageBox.StandardButton.Yes:
                self.monitor.request_stop(force=True)
            return
        answer = QMessageBox.question(
            self, "Stop the job",
            "Stop the running job? Workers are asked to stop (SIGTERM); press Ctrl+. again to force.",
            QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.No, QMessageBox.StandardButton.Yes)
        if answer == QMessageBox.StandardButton.Yes:
            self.monitor.request_stop(force=False)

    def closeEvent(self, event: QCloseEvent) -> None:  # noqa: N802 - Qt override
        if not self._confirm_close():
            event.ignore()
            return
        self._save_layout()
        self.launch_panel.shutdown()
        self.probe.shutdown()
        if self.doctor_dialog is not None:
            self.doctor_dialog.panel.shutdown()
        event.accept()

    def _ask_live_run_choice(self) -> str:
        """``STOP_RUN``, ``LEAVE_RUNNING`` or ``CANCEL``: what to do with the live run on close."""
        box = QMessageBox(QMessageBox.Icon.Question, "A job is running",
                          "A job is still running. Stop it, or leave it running without the window? "
                          "You can attach to it again later from History.", parent=self)
        stop = box.addButton("Stop the job", QMessageBox.ButtonRole.DestructiveRole)
        leave = box.addButton("Leave it running", QMessageBox.ButtonRole.AcceptRole)
        box.addButton(QMessageBox.StandardButton.Cancel)
        box.setDefaultButton(leave)
        box.exec()
        clicked = box.clickedButton()
        return STOP_RUN if clicked is stop else LEAVE_RUNNING if clicked is leave else CANCEL

    def _confirm_close(self) -> bool:
        """Settle a live run and unsaved profile edits; ``False`` keeps the window open."""
        if self.monitor.has_live_run():
            choice = self._ask_live_run_choice()
            if choice == STOP_RUN:
                self.monitor.request_stop(force=False)
            elif choice == LEAVE_RUNNING:
                self.monitor.detach()
            else:
                return False
        if self.form.dirty and self.form.profile_name is not None:
            answer = QMessageBox.question(
                self, "Unsaved changes",
                f"Profile {self.form.profile_name!r} has unsaved changes. Save them?",
                QMessageBox.StandardButton.Save | QMessageBox.StandardButton.Discard
                | QMessageBox.StandardButton.Cancel, QMessageBox.StandardButton.Save)
            if answer == QMessageBox.StandardButton.Cancel:
                return False
            if answer == QMessageBox.StandardButton.Save and not self.launch_panel.profile_list.save_current():
                return False
        return True
