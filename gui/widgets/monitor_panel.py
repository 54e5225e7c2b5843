"""The live monitor of one run: charts, rank table, logs, events, progress, Stop.

``MonitorPanel.launch`` writes the spec and starts a detached runner
(``gui.gateway.process``), then subscribes to it (``gui.gateway.link``, a
QLocalSocket on the event loop). ``attach`` does the same for a run that is
already going (the runner replays its stored history first), or loads a finished
run from the store on a background thread. Messages only update the
:class:`~gui.models.monitor.MonitorModel`; the charts, table, logs and progress
redraw on their own timers.

Closing the window or ``detach`` leaves the job running headless; Stop asks the
runner to stop it (graceful first, then force), after a confirmation.

Diagnosis (``gui.models.diagnosis``): a banner names the rank that failed first and
why, or what is wrong while the run goes on (a stall, a straggler, a divergence,
a lost node); its Details toggle opens the Diagnosis tab (first failure, traceback,
hints, every rank's fate, findings). The Stacks tab shows the latest stack capture
side by side (Dump stacks asks for one); the Nodes tab appears for multi-node runs.

Layout (``gui.models.layout``): the charts keep priority. The bottom panel has a
remembered share of the height (clamped), can be collapsed to its tab bar or
maximised, like VS Code's panel (the buttons at its top right; Ctrl+J in the
window); opening the Diagnosis tab never moves the divider. ``search_logs`` (Ctrl+F
in the window) opens the Logs tab with its search field focused.
"""

from __future__ import annotations

import time
from pathlib import Path

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QFontDatabase, QShowEvent
from PySide6.QtWidgets import (
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QSplitter,
    QStackedWidget,
    QTabWidget,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from gui.charts.grid import ChartGrid
from gui.gateway.launch_spec import LaunchSpec
from gui.gateway.link import RunnerLink
from gui.gateway.process import CommandBuilder, RunnerProcess
from gui.gateway.run_state import HistoryEnd, HubMessage, RunReading, SnapshotMessage, UpdateMessage
from gui.gateway.runner_rules import RankState, RunStatus
from gui.gateway.store_reader import store_reader
from gui.gateway.store_reads import RunNotFound, StoreReads
from gui.models import layout as panel_layout
from gui.models.diagnosis import DiagnosisModel
from gui.models.monitor import EVENT_LIMIT, LOG_LIMIT, MonitorModel, format_event, summary_lines
from gui.models.nodes import is_multi_node
from gui.widgets.diagnosis_panel import DiagnosisPanel
from gui.widgets.failure_banner import FailureBanner, notice
from gui.widgets.log_view import LogView
from gui.widgets.nodes_status import NodesStatus
from gui.widgets.rank_table import STATE_COLORS, RankTable
from gui.widgets.run_progress import RunProgress
from gui.widgets.stacks_view import StacksView
from gui.widgets.stop_dialog import confirm_stop

LAUNCHING = "launching"
DETACHED = "detached"
DISCONNECTED = "disconnected"
"""``run_state_changed`` carries RunStatus values, plus these three about the link itself."""
DETACHED_COLOR = STATE_COLORS[RankState.STOPPED.value]
QWIDGETSIZE_MAX = (1 << 24) - 1

STATUS_COLORS = {
    RunStatus.STARTING.value: STATE_COLORS[RankState.WAITING.value],
    RunStatus.PENDING.value: STATE_COLORS[RankState.WAITING.value],  # queued by Slurm: waiting, not running
    RunStatus.RUNNING.value: STATE_COLORS[RankState.RUNNING.value],
    RunStatus.STOPPING.value: STATE_COLORS[RankState.STALLED.value],
    RunStatus.SUCCEEDED.value: STATE_COLORS[RankState.EXITED.value],
    RunStatus.FAILED.value: STATE_COLORS[RankState.FAILED.value],
    RunStatus.STOPPED.value: STATE_COLORS[RankState.STOPPED.value],
    RunStatus.LOST.value: STATE_COLORS[RankState.LOST.value],
    RunReading.HUNG: STATE_COLORS[RankState.STALLED.value],  # running, but a rank makes no progress: as its stalled rows
}


class MonitorPanel(QWidget):
    """Watch one run.

    Signals:
        run_state_changed(str): the run's status (``runner.state.RunStatus`` values),
            or ``launching`` / ``detached`` / ``disconnected``.
        launch_failed(str): the launch was refused (invalid spec) or the runner did not start.
        panel_share_changed(float): the person dragged the divider (the share to remember).
    """

    run_state_changed = Signal(str)
    launch_failed = Signal(str)
    panel_share_changed = Signal(float)

    def __init__(self, parent: QWidget | None = None, *, command: CommandBuilder | None = None) -> None:
        super().__init__(parent)
        self.model = MonitorModel()
        self.diagnosis = DiagnosisModel(self.model)
        self.link = RunnerLink(self)
        self.process = RunnerProcess(self, command)
        self.run_id: int | None = None
        self._live = False
        self._stop_sent: bool | None = None  # None: not asked; False: graceful; True: force
        self._load_generation = 0
        self._history_reads = 0
        self._events_seen = 0
        self._summary_shown: object = None
        self._stacks_requested = False
        self._diagnosis_dirty = True
        self._tab_before_details: QWidget | None = None
        self._detached = False
        self.panel_mode = panel_layout.NORMAL
        self.panel_share = panel_layout.DEFAULT_PANEL_SHARE

        self.title_label = QLabel("No run")
        title_font = self.title_label.font()
        title_font.setBold(True)
        self.title_label.setFont(title_font)
        self.status_label = QLabel()
        self.status_label.setMinimumWidth(80)
        self.status_label.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.progress = RunProgress(self.model)
        self.stop_button = QPushButton("Stop…")
        self.stop_button.setToolTip("Stop the job: SIGTERM to every rank first; press again to force")
        self.stop_button.clicked.connect(self._on_stop_clicked)
        self.stacks_button = QPushButton("Dump stacks")
        self.stacks_button.setToolTip("Ask every rank for a Python stack dump (find the rank that hangs)")
        self.stacks_button.clicked.connect(self._on_stacks_clicked)
        self.detach_button = QPushButton("Detach")
        self.detach_button.setToolTip("Stop watching; the job goes on headless (attach again from History)")
        self.detach_button.clicked.connect(self.detach)
        self.save_button = QPushButton("Save charts…")
        self.save_button.setToolTip("Save the charts as a PNG image")
        self.save_button.clicked.connect(self._on_save_clicked)
        header = QHBoxLayout()
        header.setContentsMargins(4, 2, 4, 2)
        header.addWidget(self.title_label)
        header.addWidget(self.status_label)
        header.addSpacing(8)
        header.addWidget(self.progress, 1)
        for button in (self.save_button, self.stacks_button, self.detach_button, self.stop_button):
            header.addWidget(button)

        self.banner = QLabel()
        self.banner.setWordWrap(True)
        self.banner.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.banner.setContentsMargins(8, 4, 8, 4)
        self.banner.hide()
        self._notice: str | None = None
        """A passing info message, shown in the banner row when the diagnosis has none."""
        self.failure_banner = FailureBanner()
        self.failure_banner.details_toggled.connect(self._on_details_toggled)

        self.charts = ChartGrid(self.model)
        self.rank_table = RankTable(self.model)
        self.rank_table.set_notes(self.diagnosis.rank_notes)
        self.rank_table.set_bottleneck(lambda: self.diagnosis.bottleneck)
        self.rank_table.rank_activated.connect(self._on_rank_activated)
        self.rank_table.selection_changed.connect(self.charts.set_chosen_ranks)
        self.log_view = LogView(self.model)
        self.nodes_status = NodesStatus(self.model)
        self.nodes_status.node_activated.connect(self._on_node_activated)
        self.diagnosis_panel = DiagnosisPanel(self.diagnosis)
        self.stacks_view = StacksView()
        self.events_view = QPlainTextEdit()
        self.events_view.setReadOnly(True)
        self.events_view.setMaximumBlockCount(EVENT_LIMIT)
        self.events_view.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
        self.events_view.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        self.tabs = QTabWidget()
        self.tabs.addTab(self.rank_table, "Ranks")
        self.tabs.addTab(self.nodes_status, "Nodes")
        self.tabs.addTab(self.log_view, "Logs")
        self.tabs.addTab(self.events_view, "Events")
        self.tabs.addTab(self.diagnosis_panel, "Diagnosis")
        self.tabs.addTab(self.stacks_view, "Stacks")
        self.tabs.setTabVisible(self.tabs.indexOf(self.nodes_status), False)
        self.tabs.currentChanged.connect(self._on_tab_changed)
        self.tabs.tabBarClicked.connect(self._on_tab_bar_clicked)
        self.collapse_button = QToolButton()
        self.collapse_button.setAutoRaise(True)
        self.collapse_button.clicked.connect(self.toggle_panel_collapsed)
        self.maximise_button = QToolButton()
        self.maximise_button.setAutoRaise(True)
        self.maximise_button.clicked.connect(self.toggle_panel_maximised)
        corner = QWidget()
        corner_layout = QHBoxLayout(corner)
        corner_layout.setContentsMargins(0, 0, 2, 0)
        corner_layout.setSpacing(0)
        corner_layout.addWidget(self.maximise_button)
        corner_layout.addWidget(self.collapse_button)
        self.tabs.setCornerWidget(corner, Qt.Corner.TopRightCorner)
        self.splitter = QSplitter(Qt.Orientation.Vertical)
        self.splitter.addWidget(self.charts)
        self.splitter.addWidget(self.tabs)
        self.splitter.setStretchFactor(0, 3)
        self.splitter.setStretchFactor(1, 2)
        self.splitter.setChildrenCollapsible(False)
        self.splitter.splitterMoved.connect(self._on_splitter_moved)
        self.charts.setMinimumHeight(panel_layout.MIN_CHARTS_PX)
        self._update_panel_buttons()

        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(2)
        layout.addLayout(header)
        layout.addWidget(self.banner)
        layout.addWidget(self.failure_banner)
        layout.addWidget(self.splitter, 1)

        self.link.message_received.connect(self._on_message_received)
        self.link.run_ended.connect(self._on_run_ended)
        self.link.connection_lost.connect(self._on_connection_lost)
        self.process.runner_started.connect(self._on_runner_started)
        self.process.launch_failed.connect(self._on_launch_failed)
        self.model.status_changed.connect(self._on_status_changed)
        self.model.run_changed.connect(self._update_header)
        self.model.reset.connect(self._on_model_reset)
        self.model.history_finished.connect(self._on_history_finished)
        self.diagnosis.changed.connect(self._on_diagnosis_changed)
        self.diagnosis.stacks_received.connect(self._on_stacks_received)

        self.timer = QTimer(self)
        self.timer.setInterval(200)
        self.timer.timeout.connect(self._on_tick)
        self.timer.start()
        self._update_header()

    # ---- public API ------------------------------------------------------------------

    def launch(self, spec: LaunchSpec, profile_name: str | None, base_dir: Path) -> None:
        """Start a detached runner for ``spec`` and watch it.

        ``base_dir`` is where relative paths of the spec start (the profile's folder).
        A run being watched is detached first (it keeps running).
        """
        if self.process.is_running():
            self._show_banner("A launch is already in progress.", "warning")
            return
        if self._live:
            self.detach()
        self._reset_for_new_run(None)
        self._show_banner(f"Launching {spec.entry_label or 'the job'}…", "info")
        self.run_state_changed.emit(LAUNCHING)
        try:
            self.process.start(spec, profile_name, Path(base_dir))
        except (OSError, RuntimeError) as error:
            self._on_launch_failed(f"could not launch: {error}", [])

    def attach(self, run_id: int) -> None:
        """Watch run ``run_id``: subscribe with history if it is live, else load it from the store."""
        if self._live:
            self.detach()
        self._reset_for_new_run(run_id)
        try:
            run = StoreReads.run_now(run_id)  # one row by its key: how to open it
        except (RunNotFound, OSError) as error:
            self._show_banner(f"Cannot open run {run_id}: {error}", "error")
            return
        if run.live:
            self._live = True
            self._show_banner(f"Attaching to run {run_id}…", "info")
            self._subscribe(run.run.socket or "")
        else:
            self._show_banner(f"Loading run {run_id} from the store…", "info")
            self._load_from_store(run_id)
        self._update_buttons()

    @property
    def is_detached(self) -> bool:
        """Detached from a run that went on: what it shows is as of then, and nothing updates it."""
        return self._detached

    def has_live_run(self) -> bool:
        """Watching (or launching) a run that has not ended."""
        return self.process.is_running() or (self._live and not self.model.finished)

    def request_stop(self, force: bool = False) -> bool:
        """Ask the runner to stop the job (no confirmation here); False when not connected."""
        if not self._live:
            return False
        sent = self.link.send_stop(force)
        if sent:
            self._stop_sent = bool(force) or bool(self._stop_sent)
            verb = "Force-stopping" if force else "Stopping"
            self._show_banner(f"{verb} run {self.run_id}…", "warning")
        self._update_buttons()
        return sent

    def detach(self) -> None:
        """Stop watching; the job goes on headless and can be attached again from History."""
        was_live = self._live and not self.model.finished
        self._live = False
        self.link.close()
        self._update_buttons()
        if was_live:
            self._detached = True
            self.progress.set_detached(time.time())
            self._update_header()
            self._show_banner(f"Detached: run {self.run_id} keeps running headless; what is shown is as of "
                              "now. Attach to it again from History.", "info")
            self.run_state_changed.emit(DETACHED)

    def export_charts_png(self, path: Path) -> Path:
        """Save the charts to ``path``.

        Raises:
            OSError: the file could not be written.
        """
        run = self.model.run
        title = "" if run is None or run.id is None else f"Run {run.id}" + (f" · {run.profile}" if run.profile else "")
        return self.charts.export_png(Path(path), title)

    # ---- launching and loading -------------------------------------------------------

    def _reset_for_new_run(self, run_id: int | None) -> None:
        self._load_generation += 1
        self._detached = False
        self.progress.set_detached(None)
        self.run_id = run_id
        self._stop_sent = None
        self._events_seen = 0
        self._summary_shown = None
        self._stacks_requested = False
        self.events_view.clear()
        self.stacks_view.show_capture(None)
        self.tabs.setTabText(self.tabs.indexOf(self.stacks_view), "Stacks")
        self.model.clear()

    def _on_runner_started(self, info: dict) -> None:
        self.run_id = int(info["run_id"])
        self._live = True
        self._show_banner(f"Run {self.run_id} started; connecting…", "info")
        self._subscribe(str(info["socket"]))
        self._update_buttons()

    def _subscribe(self, socket: str, from_store: bool = True) -> None:
        """Subscribe to a live run's runner. The history is read from the store here
        (``_read_stored_history``), in this process: at 1,024 ranks the hub's replay of it took
        30-80 s (its reads wait for the GIL of a hub busy with ingest), the read here a few
        seconds. The hub says where the store's history ends; the live updates follow on."""
        self.model.history_from_store = from_store
        self.link.open(socket, history=True, from_store=from_store)

    def _read_stored_history(self, through: dict[str, int]) -> None:
        """The hub said where the history ends (``HistoryEnd.stored_through``): read it."""
        run = self.model.run
        if run is None or run.id is None:
            self.model.take_stored_history(None)
            return
        generation, run_id, created = self._load_generation, run.id, run.created
        self._history_reads += 1
        read = self._history_reads
        store_reader().read(lambda store: StoreReads.stored_history(store, run_id, created, through),
                            lambda history: self._on_stored_history((generation, read, history)),
                            lambda message: self._on_stored_history((generation, read, message)), owner=self)

    def _on_stored_history(self, payload: tuple) -> None:
        generation, read, history = payload
        if generation != self._load_generation or read != self._history_reads or not self.model.awaiting_history:
            return  # another run, or a newer snapshot (a reconnect) asks again
        if history is None and self._live and self.link.socket_path:
            # the store here does not hold the hub's run (it writes another): ask the hub to replay it
            self._subscribe(self.link.socket_path, from_store=False)
            return
        if isinstance(history, str):
            self._show_banner(f"Could not read run {self.run_id}'s history from the store: {history}. "
                              "What came live since attaching is shown.", "warning")
            history = None
        self.model.take_stored_history(history)
        self.charts.refresh()

    def _on_launch_failed(self, message: str, errors: list) -> None:
        details = [f"{e.get('field', '?')}: {e.get('message', '')}" for e in errors if isinstance(e, dict)]
        text = f"Launch failed: {message}" + ("\n" + "\n".join(details) if details else "")
        self._show_banner(text, "error")
        self._update_buttons()
        self.launch_failed.emit(text)
        self.run_state_changed.emit(RunStatus.FAILED.value)

    def _load_from_store(self, run_id: int) -> None:
        generation = self._load_generation
        store_reader().read(lambda store: MonitorModel.from_records(StoreReads.run_records(store, run_id, LOG_LIMIT)),
                            lambda model: self._on_run_loaded((generation, model)),
                            lambda message: self._on_run_loaded((generation, f"Cannot load run {run_id}: {message}")),
                            owner=self)

    def _on_run_loaded(self, payload: tuple) -> None:
        generation, result = payload
        if generation != self._load_generation:
            return  # another run was opened meanwhile
        if isinstance(result, str):
            self._show_banner(result, "error")
            return
        self.banner.hide()
        self._clear_notice()
        self.model.adopt(result)
        self.charts.refresh()
        self._update_summary()
        end = self.model.state.history_end
        if end is not None and end.thinned:  # a big run opens bounded, as attaching to it would
            self._show_banner(end.describe(self.run_id, opened=True), "info")

    # ---- link events -----------------------------------------------------------------

    def _on_message_received(self, message: HubMessage) -> None:
        self.model.apply(message)
        if isinstance(message, SnapshotMessage):
            self.run_id = self.model.run_id if self.model.run_id is not None else self.run_id
            self._clear_notice()
        elif isinstance(message, HistoryEnd) and self.model.awaiting_history:
            if message.stored_through is not None:
                self._read_stored_history(message.stored_through)
            else:  # an older hub replayed it all the same
                self.model.take_stored_history(None)

    def _on_history_finished(self) -> None:
        """Say so when the replayed history came shortened (a big run: the hub bounds a replay)."""
        end = self.model.state.history_end
        if end is not None and end.thinned:
            self._show_banner(end.describe(self.run_id), "info")

    def _on_run_ended(self, reason: str) -> None:
        self._live = False
        self._update_buttons()
        self._update_summary()
        if not self.model.finished:
            self._refresh_status_from_store()
        else:
            self._read_rank_results()  # the runner said bye: its store is complete

    def _read_rank_results(self) -> None:
        """The run ended: each rank's whole-run figures for the rank table (its live rows hold
        the newest step's, and a last step is no summary). A read that fails leaves those."""
        if self.run_id is None:
            return
        generation, run_id = self._load_generation, self.run_id
        store_reader().read(lambda store: StoreReads.rank_results(store, run_id),
                            lambda results: self._on_rank_results((generation, results)), owner=self)

    def _on_rank_results(self, payload: tuple) -> None:
        generation, results = payload
        if generation == self._load_generation:
            self.model.set_rank_results(results)

    def _on_connection_lost(self, reason: str) -> None:
        was_live = self._live
        self._live = False
        self._update_buttons()
        if self._refresh_status_from_store():
            return
        if was_live:
            self._show_banner(f"Lost the connection to run {self.run_id}'s runner: {reason}. "
                              "Its records up to now are in the store.", "error")
            self.run_state_changed.emit(DISCONNECTED)

    def _refresh_status_from_store(self) -> bool:
        """After the link ended: take the final status from the store. True if the run ended."""
        if self.run_id is None:
            return False
        try:
            run = StoreReads.run_now(self.run_id)
        except (RunNotFound, OSError):
            return False
        if run.run.ended is None:
            return False
        self.model.apply(UpdateMessage(run={"status": run.run.status, "ended": run.run.ended,
                                            "exit_code": run.run.exit_code, "summary": run.run.summary}))
        self._update_summary()
        self._read_rank_results()
        return True

    def _on_status_changed(self, status: str) -> None:
        self._update_buttons()
        self._update_header()
        if status in (RunStatus.SUCCEEDED.value, RunStatus.FAILED.value, RunStatus.STOPPED.value,
                      RunStatus.LOST.value):
            self._update_summary()
        self.run_state_changed.emit(status)

    def _on_model_reset(self) -> None:
        self._events_seen = 0
        self.events_view.clear()
        self._update_header()

    # ---- buttons ---------------------------------------------------------------------

    def _confirm(self, title: str, force: bool) -> bool:
        """The window's own stop question (``gui.widgets.stop_dialog``: verbs, not Yes/No);
        ``title`` names the question for tests that answer it."""
        return confirm_stop(self, self.run_id, force)

    def _on_stop_clicked(self) -> None:
        force = self._stop_sent is not None or self.model.status == RunStatus.STOPPING.value
        asked = self._confirm("Force stop" if force else "Stop run", force)
        if asked:
            self.request_stop(force=force)

    def _on_stacks_clicked(self) -> None:
        if self.link.send_dump_stacks():
            self._stacks_requested = True
            self._show_banner("Asked every rank for a stack dump; it appears in the Stacks tab.", "info")
            self.stacks_view.set_waiting(True)
            self.show_tab(self.stacks_view)

    def _on_stacks_received(self, capture: dict) -> None:
        self.stacks_view.show_capture(capture)
        if self._stacks_requested:
            self._stacks_requested = False
            self.show_tab(self.stacks_view)
            self._clear_notice()
        elif self.tabs.currentWidget() is not self.stacks_view:
            self.tabs.setTabText(self.tabs.indexOf(self.stacks_view), "Stacks •")

    def _on_diagnosis_changed(self) -> None:
        self._diagnosis_dirty = True
        self.rank_table.mark_dirty()

    def _on_details_toggled(self, shown: bool) -> None:
        """Details shows the Diagnosis tab where the panel is: the divider stays (charts keep
        their room); a collapsed panel opens to its remembered size."""
        if shown:
            if self.tabs.currentWidget() is not self.diagnosis_panel:
                self._tab_before_details = self.tabs.currentWidget()
            self.show_tab(self.diagnosis_panel)
        elif self.tabs.currentWidget() is self.diagnosis_panel:
            self.tabs.setCurrentWidget(self._tab_before_details or self.rank_table)

    # ---- the bottom panel: share, collapsed, maximised --------------------------------

    def show_tab(self, widget: QWidget) -> None:
        """Bring a bottom tab to the front, opening a collapsed panel."""
        self.tabs.setCurrentWidget(widget)
        if self.panel_mode == panel_layout.COLLAPSED:
            self.set_panel_mode(panel_layout.NORMAL)

    def set_panel_share(self, share: float | None) -> None:
        """The panel's share of the height (clamped; a remembered one from the settings)."""
        self.panel_share = panel_layout.clamp_share(share)
        if self.panel_mode == panel_layout.NORMAL:
            self._apply_split()

    def set_panel_mode(self, mode: str) -> None:
        """``normal``, ``collapsed`` (only the tab bar) or ``maximised`` (the charts give way)."""
        if mode not in panel_layout.PANEL_MODES:
            raise ValueError(f"unknown panel mode {mode!r}")
        self.panel_mode = mode
        self.charts.setVisible(mode != panel_layout.MAXIMISED)
        self.charts.setMinimumHeight(panel_layout.MIN_CHARTS_PX if mode != panel_layout.MAXIMISED else 0)
        collapsed = mode == panel_layout.COLLAPSED
        self._panel_pages().setVisible(not collapsed)
        self.tabs.setMaximumHeight(self._tab_bar_height() if collapsed else QWIDGETSIZE_MAX)
        self._apply_split()
        self._update_panel_buttons()

    def toggle_panel_collapsed(self) -> None:
        collapsed = self.panel_mode == panel_layout.COLLAPSED
        self.set_panel_mode(panel_layout.NORMAL if collapsed else panel_layout.COLLAPSED)

    def toggle_panel_maximised(self) -> None:
        maximised = self.panel_mode == panel_layout.MAXIMISED
        self.set_panel_mode(panel_layout.NORMAL if maximised else panel_layout.MAXIMISED)

    def _tab_bar_height(self) -> int:
        return self.tabs.tabBar().sizeHint().height() + 4

    def _panel_pages(self) -> QStackedWidget:
        pages = self.tabs.findChild(QStackedWidget)
        assert pages is not None, "a QTabWidget keeps its pages in a QStackedWidget"
        return pages

    def _apply_split(self) -> None:
        total = sum(self.splitter.sizes()) or self.splitter.height()
        if total <= 0:
            return
        parts = panel_layout.split(total, self.panel_share, self.panel_mode,
                                   collapsed_panel_px=self._tab_bar_height())
        self.splitter.setSizes([parts.charts, parts.panel])

    def _on_splitter_moved(self, _position: int, _index: int) -> None:
        if self.panel_mode != panel_layout.NORMAL:
            return
        charts, panel = self.splitter.sizes()
        self.panel_share = panel_layout.share_of(charts, panel)
        self.panel_share_changed.emit(self.panel_share)

    def _on_tab_bar_clicked(self, _index: int) -> None:
        if self.panel_mode == panel_layout.COLLAPSED:
            self.set_panel_mode(panel_layout.NORMAL)

    def _update_panel_buttons(self) -> None:
        collapsed = self.panel_mode == panel_layout.COLLAPSED
        maximised = self.panel_mode == panel_layout.MAXIMISED
        self.collapse_button.setText("▴" if collapsed else "▾")
        self.collapse_button.setToolTip("Restore the panel (Ctrl+J)" if collapsed else "Collapse the panel (Ctrl+J)")
        self.maximise_button.setText("▭" if maximised else "▲")
        self.maximise_button.setToolTip("Restore the charts" if maximised else "Maximise the panel (the charts give way)")

    def showEvent(self, event: QShowEvent) -> None:
        super().showEvent(event)
        if not self._split_applied:
            self._split_applied = True
            self._apply_split()

    _split_applied = False

    def search_logs(self) -> None:
        """Ctrl+F: the Logs tab, its search field focused with its text selected."""
        self.show_tab(self.log_view)
        self.log_view.focus_search()

    def _on_tab_changed(self, _index: int) -> None:
        current = self.tabs.currentWidget()
        self.failure_banner.set_details_shown(current is self.diagnosis_panel)
        if current is self.stacks_view:
            self.tabs.setTabText(self.tabs.indexOf(self.stacks_view), "Stacks")

    def _on_node_activated(self, host: str) -> None:
        self.log_view.show_node(host)
        self.show_tab(self.log_view)

    def _on_save_clicked(self) -> None:
        name = f"run-{self.run_id}-charts.png" if self.run_id is not None else "charts.png"
        path, _ = QFileDialog.getSaveFileName(self, "Save charts", str(Path.home() / name), "PNG image (*.png)")
        if path:
            try:
                self.export_charts_png(Path(path))
            except OSError as error:
                self._show_banner(str(error), "error")

    def _on_rank_activated(self, rank: int) -> None:
        self.log_view.show_rank(rank)
        self.show_tab(self.log_view)

    def _update_buttons(self) -> None:
        live = self._live and not self.model.finished
        connected = live and self.link.is_connected()
        self.stop_button.setEnabled(live)
        force = self._stop_sent is not None or self.model.status == RunStatus.STOPPING.value
        self.stop_button.setText("Force stop…" if force else "Stop…")
        self.stacks_button.setEnabled(connected or live)
        self.stacks_view.set_live(connected or live or not self.model.finished)
        self.detach_button.setEnabled(live)
        self.save_button.setEnabled(self.model.run is not None)

    # ---- display ---------------------------------------------------------------------

    def _show_banner(self, text: str, level: str) -> None:
        """An info message goes in the banner row, whose height is kept, so nothing moves; a
        warning or an error, which may need several lines, in the wrapping label below it."""
        if level == "info":
            self.banner.hide()
            self._notice = text
            self._update_failure_banner()
            return
        self._clear_notice()
        color = {"error": STATE_COLORS[RankState.FAILED.value], "warning": STATE_COLORS[RankState.STALLED.value]}.get(
            level, STATE_COLORS[RankState.EXITED.value])
        self.banner.setText(text)
        self.banner.setProperty("level", level)
        self.banner.setStyleSheet(f"QLabel {{ border-left: 4px solid {color.name()}; "
                                  f"background: rgba({color.red()},{color.green()},{color.blue()},40); }}")
        self.banner.show()

    def _update_header(self) -> None:
        run = self.model.run
        if run is None:
            self.title_label.setText("No run" if self.run_id is None else f"Run {self.run_id}")
            self.status_label.clear()
            self.status_label.setStyleSheet("")
        else:
            parts = [f"Run {self.run_id if run.id is None else run.id}"]
            if run.profile:
                parts.append(run.profile)
            if run.world_size:
                parts.append(f"{run.world_size} ranks" + (f" on {run.host}" if run.host else ""))
            self.title_label.setText(" · ".join(parts))
            status = self.model.shown_status or ""
            color = STATUS_COLORS.get(status)
            tip = ""
            if self._detached and not self.model.finished:
                status, color = DETACHED, DETACHED_COLOR  # not "running": nobody is watching it now
                tip = "The run goes on headless; attach again from History to see where it is"
            self.status_label.setText(status)
            self.status_label.setToolTip(tip)
            if color is not None:
                self.status_label.setStyleSheet(
                    f"QLabel {{ color: white; background: {color.name()}; border-radius: 3px; padding: 1px 6px; }}")
        self._update_buttons()

    def _update_summary(self) -> None:
        run = self.model.run
        status = None if run is None else run.status
        summary = None if run is None else run.summary
        if summary is None or summary == self._summary_shown:
            if self.model.finished and status == RunStatus.SUCCEEDED.value and self._summary_shown is None:
                self._summary_shown = "succeeded"
                self._show_banner(f"Run {self.run_id} finished successfully.", "info")
            return
        self._summary_shown = summary
        headline, details = summary_lines(summary)
        self._update_failure_banner()
        if self.diagnosis.banner() is not None:
            self.banner.hide()  # the diagnosis banner says it, with Details
            self._clear_notice()
        else:
            text = headline or str(status)
            self._show_banner(f"Run {self.run_id} {status}: {text}", "info")
        if details:
            self.events_view.appendPlainText("\n".join(["", f"== {headline}", *details]))

    def _update_failure_banner(self) -> None:
        self._diagnosis_dirty = False
        self.failure_banner.show_banner(self.diagnosis.banner()
                                        or (notice(self._notice) if self._notice else None))

    def _clear_notice(self) -> None:
        if self._notice is not None:
            self._notice = None
            self._update_failure_banner()

    def notice_text(self) -> str | None:
        """The info message on show in the banner row (``None`` when there is none)."""
        return self._notice

    def _on_tick(self) -> None:
        self.progress.refresh()
        live_stall = bool(self.diagnosis.stalls) and not self.model.finished
        if self._diagnosis_dirty or live_stall:
            self._update_failure_banner()
        nodes_index = self.tabs.indexOf(self.nodes_status)
        several = is_multi_node(self.model)
        if self.tabs.isTabVisible(nodes_index) != several:
            self.tabs.setTabVisible(nodes_index, several)
        events = self.model.events
        new = self.model.events_total - self._events_seen
        if new > 0:
            recent = list(events)[-min(new, len(events)):]
            self.events_view.appendPlainText("\n".join(format_event(e) for e in recent))
            self._events_seen = self.model.events_total
