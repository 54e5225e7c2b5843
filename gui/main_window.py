"""The Rankwatch window: Launch | Monitor | History tabs, menus, shortcuts, lifetime.

* **Launch** (``LaunchPanel``): profiles and the launch form; Launch hands the spec to
  the monitor and switches to it.
* **Monitor** (``MonitorTabs``): the runs being watched, one tab per run; launching
  while a run is live opens another tab, so several runs can go at once.
* **History** (``HistoryPanel``): past runs and live ones to attach to again.
* **Tools ▸ Doctor** (``DoctorDialog``): is this machine ready for the form's interpreter.
* **Help**: the keyboard shortcuts and the version.

When a run ends while the window is in the background (or its tab is not in front),
a desktop notification says so (``gui.notifier``), and the window title carries the
outcome (``✗ Run 12 failed — ...``) until the run's tab is looked at.

Closing the window while jobs run asks whether to stop them or leave them
running: a job left running goes on headless (the runner is its own process) and
the window can attach to it again later from History.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import QEvent, QSize, Qt, QTimer, QUrl
from PySide6.QtGui import (
    QAction,
    QCloseEvent,
    QColor,
    QDesktopServices,
    QIcon,
    QKeySequence,
    QPalette,
)
from PySide6.QtWidgets import (
    QApplication,
    QDialog,
    QDialogButtonBox,
    QLabel,
    QMainWindow,
    QMenu,
    QMessageBox,
    QSplitter,
    QTableWidget,
    QTableWidgetItem,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from gui.editor_link import SourceLocation, open_location
from gui.gateway.files import RankwatchFiles
from gui.gateway.launch_spec import LaunchSpec, SpecErrors
from gui.gateway.probe import RunnerProbe
from gui.gateway.profiles import ProfileError, ProfileLibrary
from gui.gateway.run_state import RunReading
from gui.models.history import RunRow
from gui.models.launch_form import Evaluation, LaunchFormModel
from gui.models.notices import APP_NAME, run_end_notice, window_title
from gui.models.profiles import ProfileListModel
from gui.notifier import Notifier
from gui.settings import AppSettings
from gui.widgets.doctor_panel import DoctorDialog
from gui.widgets.history_panel import HistoryPanel
from gui.widgets.launch_panel import LaunchPanel
from gui.widgets.monitor_panel import MonitorPanel
from gui.widgets.monitor_tabs import CANCEL, LEAVE_RUNNING, STOP_RUN, MonitorTabs
from gui.widgets.stop_dialog import confirm_stop

APP_TITLE = APP_NAME
DEFAULT_SIZE = (1320, 840)


def first_size(available: QSize) -> tuple[int, int]:
    """The window's size on a first start: ``DEFAULT_SIZE``, within the screen's free area (a
    1280x720 laptop screen got a window cut at its right and bottom edges)."""
    return min(DEFAULT_SIZE[0], available.width()), min(DEFAULT_SIZE[1], available.height())
STOPPING = "stopping"
LIVE_RUNS_HINT_DELAY_MS = 3000
NEW_FORM_TITLE = "New profile"
"""The title's name for a form that is no profile yet (its ``*`` says it holds unsaved edits)."""
__all__ = ["CANCEL", "LEAVE_RUNNING", "STOP_RUN", "MainWindow", "app_version"]


def app_version() -> str:
    """Rankwatch's version as installed (``unknown`` in a bare checkout)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("rankwatch")
    except PackageNotFoundError:
        return "unknown"


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
        path = RankwatchFiles.assets_dir() / name
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
        self.monitors = MonitorTabs(panel_factory=self._new_monitor_panel)
        self.history = HistoryPanel()
        self.notifier = Notifier(self)
        self._unseen_end: MonitorPanel | None = None
        """A panel whose run ended while nobody looked (the title says so until it is seen)."""
        self._last_states: dict[int, str] = {}
        self.tabs = QTabWidget()
        self.tabs.setDocumentMode(True)
        self.tabs.addTab(self.launch_panel, "Launch")
        self.tabs.addTab(self.monitors, "Monitor")
        self.tabs.addTab(self.history, "History")
        self.setCentralWidget(self.tabs)
        self.run_label = QLabel()
        self.probe_label = QLabel()
        self.statusBar().addPermanentWidget(self.probe_label)
        self.statusBar().addPermanentWidget(self.run_label)

        self._build_actions()
        self.launch_panel.launch_requested.connect(self._on_launch_requested)
        self.history.open_run_requested.connect(self._on_open_run_requested)
        self.history.runs_listed.connect(self._on_runs_listed)
        self.monitors.panel_state_changed.connect(self._on_panel_state_changed)
        self.monitors.current_panel_changed.connect(self._on_current_panel_changed)
        self.monitors.panel_closed.connect(self._on_panel_closed)
        self.tabs.currentChanged.connect(lambda _index: self._mark_seen())
        self.profiles.current_changed.connect(self._on_current_profile_changed)
        self.form.evaluated.connect(self._on_form_evaluated)
        self.probe.busy_changed.connect(self._on_probe_busy_changed)

        self._restore_layout()
        self._restore_profile(initial_profile)
        self._update_title()
        # Jobs left running by an earlier session: say so once History has read the store.
        QTimer.singleShot(LIVE_RUNS_HINT_DELAY_MS, self, self._on_live_runs_hint_due)

    @property
    def monitor(self) -> MonitorPanel:
        """The run tab in front (the Monitor tab holds one per watched run)."""
        return self.monitors.current

    def _new_monitor_panel(self) -> MonitorPanel:
        panel = MonitorPanel()
        panel.set_panel_share(self.settings.monitor_panel_share())
        panel.panel_share_changed.connect(self._on_panel_share_changed)
        panel.log_view.open_requested.connect(self._on_open_location_requested)
        panel.stacks_view.open_requested.connect(self._on_open_location_requested)
        return panel

    def _on_open_location_requested(self, location: SourceLocation) -> None:
        """A traceback line or a stack frame was clicked: its file, at its line, in the editor."""
        where = f"{location.file}:{location.line}" if location.line is not None else location.file
        if open_location(location, lambda file: QDesktopServices.openUrl(QUrl.fromLocalFile(file))):
            self.statusBar().showMessage(f"Opening {where} in your editor", 4000)
        else:
            self.statusBar().showMessage(f"Could not open {where}: set $VISUAL or $EDITOR to your editor", 8000)

    # Building.

    def _action(self, text: str, shortcut: QKeySequence | QKeySequence.StandardKey | str | None,
                slot: Callable[[], object], tip: str = "") -> QAction:
        action = QAction(text, self)
        if shortcut is not None:
            action.setShortcut(QKeySequence(shortcut))
            action.setShortcutContext(Qt.ShortcutContext.WindowShortcut)
        if tip:
            action.setStatusTip(tip)
            action.setToolTip(tip)
        action.triggered.connect(lambda _checked=False: slot())
        self.addAction(action)
        return action

    def _build_actions(self) -> None:
        profiles = self.launch_panel.profile_list
        self.new_profile_action = self._action("&New profile…", QKeySequence.StandardKey.New, profiles.new_profile,
                                               "Start a profile from an empty form")
        self.save_action = self._action("&Save profile", QKeySequence.StandardKey.Save, profiles.save_current,
                                        "Save the form over the current profile")
        self.save_as_action = self._action("Save profile &as…", "Ctrl+Shift+S", profiles.save_as,
                                           "Save the form as a new profile")
        self.import_action = self._action("&Import profile…", None, profiles.import_file)
        self.export_action = self._action("&Export profile…", None, profiles.export_file)
        self.quit_action = self._action("&Quit", QKeySequence.StandardKey.Quit, self.close)
        self.launch_action = self._action("&Launch", "Ctrl+R", self._on_launch_triggered,
                                          "Launch the job described by the form (in a new tab if a run is live)")
        self.stop_action = self._action("&Stop", "Ctrl+.", self._on_stop_triggered,
                                        "Stop the run in front (asks first; again to force)")
        self.attach_action = self._action("&Attach to a live run…", None, self._on_attach_triggered,
                                          "Pick a run that is still going (History tab)")
        self.close_run_action = self._action("&Close run tab", "Ctrl+W", self._on_close_run_triggered,
                                             "Stop watching the run in front (asks about a live run)")
        self.doctor_action = self._action("&Doctor…", None, self._on_doctor_triggered,
                                          "Check this machine and the form's interpreter for distributed jobs")
        self.tab_actions = [
            self._action(f"&{name} tab", f"Ctrl+{index + 1}", functools.partial(self.tabs.setCurrentIndex, index))
            for index, name in enumerate(("Launch", "Monitor", "History"))
        ]
        self.search_logs_action = self._action("Search &logs", QKeySequence.StandardKey.Find,
                                               self._on_search_logs_triggered, "Search the logs of the run in front")
        self.toggle_panel_action = self._action("Toggle bottom &panel", "Ctrl+J", self._on_toggle_panel_triggered,
                                                "Collapse or restore the monitor's bottom panel")
        self.maximise_panel_action = self._action("&Maximise bottom panel", "Ctrl+Shift+J",
                                                  self._on_maximise_panel_triggered,
                                                  "Give the bottom panel the charts' room, or give it back")
        self.shortcuts_action = self._action("&Keyboard shortcuts", "F1", self.show_shortcuts)
        self.about_action = self._action("&About Rankwatch", None, self.show_about)
        self.stop_action.setEnabled(False)

        menu = self.menuBar()
        file_menu = menu.addMenu("&File")
        for action in (self.new_profile_action, self.save_action, self.save_as_action):
            file_menu.addAction(action)
        file_menu.addSeparator()
        file_menu.addAction(self.import_action)
        file_menu.addAction(self.export_action)
        file_menu.addSeparator()
        file_menu.addAction(self.quit_action)
        run_menu = menu.addMenu("&Run")
        for action in (self.launch_action, self.stop_action, self.attach_action, self.close_run_action):
            run_menu.addAction(action)
        view_menu = menu.addMenu("&View")
        for action in self.tab_actions:
            view_menu.addAction(action)
        view_menu.addSeparator()
        for action in (self.search_logs_action, self.toggle_panel_action, self.maximise_panel_action):
            view_menu.addAction(action)
        tools_menu = menu.addMenu("&Tools")
        tools_menu.addAction(self.doctor_action)
        help_menu = menu.addMenu("&Help")
        help_menu.addAction(self.shortcuts_action)
        help_menu.addAction(self.about_action)

    def shortcut_rows(self) -> list[tuple[str, str]]:
        """(action, shortcut) of every menu action with a shortcut, in menu order."""
        rows = []
        for menu_action in self.menuBar().actions():
            menu = menu_action.menu()
            for action in menu.actions() if isinstance(menu, QMenu) else []:
                if not action.shortcut().isEmpty():
                    key = action.shortcut().toString(QKeySequence.SequenceFormat.NativeText)
                    rows.append((action.text().replace("&", "").rstrip("…"), key))
        return rows

    def show_shortcuts(self) -> QDialog:
        """Help ▸ Keyboard shortcuts: every shortcut of the menus, plus the charts' mouse gestures."""
        dialog = QDialog(self)
        dialog.setWindowTitle(f"Keyboard shortcuts — {APP_TITLE}")
        rows = [*self.shortcut_rows(), ("Chart: zoom the steps (every chart follows)", "Mouse wheel"), ("Chart: show everything again", "Double-click"), ("Chart: values of every rank at a step", "Hover"), ("Legend: show only this rank (again: all)", "Double-click")]
        table = QTableWidget(len(rows), 2)
        table.setHorizontalHeaderLabels(["Action", "Shortcut"])
        table.verticalHeader().setVisible(False)
        table.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        for row, (text, key) in enumerate(rows):
            table.setItem(row, 0, QTableWidgetItem(text))
            table.setItem(row, 1, QTableWidgetItem(key))
        table.resizeColumnsToContents()
        table.horizontalHeader().setStretchLastSection(True)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(dialog.reject)
        layout = QVBoxLayout(dialog)
        layout.addWidget(table)
        layout.addWidget(buttons)
        dialog.resize(520, 480)
        dialog.setObjectName("shortcutsDialog")
        dialog.show()
        return dialog

    def about_text(self) -> str:
        return (f"<b>{APP_TITLE} {app_version()}</b><br>A desktop launcher and live monitor for PyTorch "
                "distributed training (torchrun).<br><br>Profiles: "
                f"{ProfileLibrary.folder()}<br>Run store: {RankwatchFiles.data_dir()}")

    def show_about(self) -> None:
        QMessageBox.about(self, f"About {APP_TITLE}", self.about_text())

    # Settings.

    def _restore_layout(self) -> None:
        geometry = self.settings.window_geometry()
        if geometry is None or not self.restoreGeometry(geometry):
            self.resize(*first_size(self.screen().availableGeometry().size()))
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
        self.settings.set_monitor_panel_share(self.monitor.panel_share)
        self.settings.sync()

    def _named_splitters(self) -> list[QSplitter]:
        """Splitters with an object name (launch, history): their sizes are remembered as they are.
        The monitor's divider is remembered as a clamped share instead (``gui.models.layout``)."""
        return [splitter for splitter in self.findChildren(QSplitter) if splitter.objectName()]

    def _restore_profile(self, requested: str | None) -> None:
        """Load ``requested``, else the last used profile, else the bundled example."""
        candidates = [requested] if requested else []
        last = self.settings.last_profile()
        if last and last in self.profiles.names:
            candidates.append(last)
        candidates.append(ProfileLibrary.EXAMPLE)
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
        ended = self._unseen_end
        self.setWindowTitle(window_title(self.form.profile_name or NEW_FORM_TITLE, ended.run_id if ended else None,
                                         ended.model.status if ended else None, ended is not None))
        self.setWindowModified(self.form.dirty)

    def _on_probe_busy_changed(self, busy: bool) -> None:
        self.probe_label.setText("Probing the interpreter and GPUs…" if busy else "")

    def _on_launch_triggered(self) -> None:
        if not self.launch_panel.trigger_launch():
            self.tabs.setCurrentWidget(self.launch_panel)
            self.statusBar().showMessage(f"Cannot launch: {self.launch_panel.status.text()}", 8000)

    def _on_launch_requested(self, spec: LaunchSpec, profile_name: str | None, base_dir: Path) -> None:
        """Launch into an idle run tab, or a new one when every tab watches a live run."""
        panel = self.monitors.panel_for_launch()
        try:
            panel.launch(spec, profile_name, Path(base_dir))
        except Exception as error:  # the monitor reports its own failures; this is the last resort
            QMessageBox.critical(self, "Launch failed", f"The job could not be started:\n\n{error}")
            return
        self.tabs.setCurrentWidget(self.monitors)
        self._update_run_controls()

    def _on_open_run_requested(self, run_id: int) -> None:
        """Show run ``run_id``: its tab if open, else an idle tab or a new one (live runs keep theirs)."""
        panel, already = self.monitors.panel_for_run(run_id)
        if not already:
            panel.attach(run_id)
        self.tabs.setCurrentWidget(self.monitors)
        self._update_run_controls()

    def _on_runs_listed(self, rows: list[RunRow]) -> None:
        """A tab detached from a run that has ended since shows it as the store has it now: not
        green "running" rows with ageing heartbeats while History says how it ended."""
        ended = {row.run_id for row in rows if not row.live}
        for panel in self.monitors.panels():
            if panel.is_detached and panel.run_id is not None and panel.run_id in ended:
                panel.attach(panel.run_id)

    def _on_live_runs_hint_due(self) -> None:
        if self.monitors.live_panels():
            return
        live = [row for row in self.history.rows() if getattr(row, "live", False)]
        if live:
            runs = ", ".join(f"{row.run_id}{' hung' if row.status == RunReading.HUNG else ''}" for row in live[:5])
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

    def _on_close_run_triggered(self) -> None:
        self.monitors.close_panel(self.monitor)
        self._update_run_controls()

    def _on_search_logs_triggered(self) -> None:
        self.tabs.setCurrentWidget(self.monitors)
        self.monitor.search_logs()

    def _on_toggle_panel_triggered(self) -> None:
        self.tabs.setCurrentWidget(self.monitors)
        self.monitor.toggle_panel_collapsed()

    def _on_maximise_panel_triggered(self) -> None:
        self.tabs.setCurrentWidget(self.monitors)
        self.monitor.toggle_panel_maximised()

    def _on_panel_share_changed(self, share: float) -> None:
        self.settings.set_monitor_panel_share(share)
        for panel in self.monitors.panels():
            if panel is not self.sender():
                panel.set_panel_share(share)

    def _on_panel_state_changed(self, panel: MonitorPanel, state: str) -> None:
        old = self._last_states.get(id(panel))
        self._last_states[id(panel)] = state
        notice = run_end_notice(old, state, panel.run_id, None if panel.model.run is None else panel.model.run.profile,
                                panel.diagnosis.headline)
        if notice is not None:
            if not self._run_is_seen(panel):
                self.notifier.notify(notice)
                self._unseen_end = panel
            self.statusBar().showMessage(f"{notice.title}. {notice.body}".strip(), 15000)
        self._update_title()
        self._update_run_controls()

    def _on_panel_closed(self, panel: MonitorPanel) -> None:
        self._last_states.pop(id(panel), None)
        if self._unseen_end is panel:
            self._unseen_end = None
            self._update_title()

    def _on_current_panel_changed(self, _panel: MonitorPanel) -> None:
        self._mark_seen()
        self._update_run_controls()

    def _run_is_seen(self, panel: MonitorPanel) -> bool:
        """The person can see ``panel`` now: the window is active, on the Monitor tab, with that run in front."""
        return (self.isActiveWindow() and self.tabs.currentWidget() is self.monitors
                and self.monitors.current is panel)

    def _mark_seen(self) -> None:
        if self._unseen_end is not None and self._run_is_seen(self._unseen_end):
            self._unseen_end = None
            self._update_title()

    def event(self, event: QEvent) -> bool:
        if event.type() == QEvent.Type.WindowActivate:
            self._mark_seen()
        return super().event(event)

    def _update_run_controls(self) -> None:
        panel = self.monitor
        self.stop_action.setEnabled(panel.has_live_run())
        state = panel.model.shown_status if panel.model.run is not None else None
        live = len(self.monitors.live_panels())
        text = f"Run {panel.run_id}: {state}" if panel.run_id is not None and state else ""
        if live > 1:
            text += f"  ·  {live} runs live"
        self.run_label.setText(text)

    def _on_stop_triggered(self) -> None:
        panel = self.monitor
        if not panel.has_live_run():
            self.statusBar().showMessage("No live run to stop in this tab", 4000)
            return
        force = STOPPING in (panel.model.status, self._last_states.get(id(panel)))
        if confirm_stop(self, panel.run_id, force):
            panel.request_stop(force=force)

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
        """``STOP_RUN``, ``LEAVE_RUNNING`` or ``CANCEL``: what to do with the live runs on close."""
        live = self.monitors.live_panels()
        runs = ", ".join(str(panel.run_id) for panel in live if panel.run_id is not None)
        several = len(live) > 1
        box = QMessageBox(QMessageBox.Icon.Question, "Jobs are running" if several else "A job is running",
                          (f"{len(live)} jobs are still running (runs {runs}). Stop them, or leave them running "
                           "without the window?" if several else
                           "A job is still running. Stop it, or leave it running without the window?")
                          + " You can attach again later from History.", parent=self)
        stop = box.addButton("Stop them" if several else "Stop the job", QMessageBox.ButtonRole.DestructiveRole)
        leave = box.addButton("Leave them running" if several else "Leave it running",
                              QMessageBox.ButtonRole.AcceptRole)
        box.addButton(QMessageBox.StandardButton.Cancel)
        box.setDefaultButton(leave)
        box.exec()
        clicked = box.clickedButton()
        return STOP_RUN if clicked is stop else LEAVE_RUNNING if clicked is leave else CANCEL

    def _confirm_close(self) -> bool:
        """Settle live runs and unsaved form edits; ``False`` keeps the window open.

        Every question is asked before anything is done: a Cancel at the last one leaves the
        runs watched and the form as it was (nothing detached, nothing stopped)."""
        live = self.monitors.live_panels()
        choice = self._ask_live_run_choice() if live else None
        if choice == CANCEL:
            return False
        if not self._settle_unsaved_form("Quit"):
            return False
        for panel in live:
            if choice == STOP_RUN:
                panel.request_stop(force=False)
            else:
                panel.detach()
        return True

    def _settle_unsaved_form(self, action: str) -> bool:
        """Save / Discard / Cancel for a form that differs from its profile, or a new form that
        differs from the empty one (it would be lost like an unsaved file); ``False``: cancelled."""
        if not self.form.dirty:
            return True
        name = self.form.profile_name
        text = (f"Profile {name!r} has unsaved changes. Save them before you {action.lower()}?" if name is not None
                else f"The new profile in the form is not saved. Save it before you {action.lower()}?")
        answer = QMessageBox.question(
            self, "Unsaved changes", text,
            QMessageBox.StandardButton.Save | QMessageBox.StandardButton.Discard
            | QMessageBox.StandardButton.Cancel, QMessageBox.StandardButton.Save)
        if answer == QMessageBox.StandardButton.Cancel:
            return False
        if answer == QMessageBox.StandardButton.Save:
            return self.launch_panel.profile_list.save_current()
        return True
