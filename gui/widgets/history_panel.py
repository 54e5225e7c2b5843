"""The runs list: every run in the store, live ones marked; open, attach, compare, export.

The list refreshes from the gateway's store reader (``gui.gateway.store_reader``:
store reads never run on the GUI thread). Select one run to open it (a finished run
shows its charts and logs from the store; a live one is attached to) or export
it (metrics and every other table as CSV, and its charts as PNG); select several to
overlay them on any metric the charts show (``gui.models.overlay``: each run's mean over its
ranks), smoothed as the live charts are.
"""

from __future__ import annotations

import time
from pathlib import Path

from PySide6.QtCore import (
    QModelIndex,
    QObject,
    QPersistentModelIndex,
    QSortFilterProxyModel,
    Qt,
    QTimer,
    Signal,
)
from PySide6.QtGui import QBrush, QCloseEvent, QFont
from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QFileDialog,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QPushButton,
    QSlider,
    QSplitter,
    QTableView,
    QVBoxLayout,
    QWidget,
)

from gui.charts.chart import MetricChart, palette_is_dark, series_color
from gui.charts.grid import ChartGrid
from gui.gateway.store_reader import store_reader
from gui.gateway.store_reads import ListedRun, RunStore, StoreReads
from gui.models.charts import BUILT_IN_CHARTS, ChartDef
from gui.models.history import (
    HISTORY_COLUMNS,
    NUMERIC_COLUMNS,
    RUN_LIMIT,
    RunRow,
    history_cells,
    history_sort_keys,
    matches_filter,
    run_title,
)
from gui.models.monitor import LOG_LIMIT, MonitorModel
from gui.models.overlay import (
    DASH_DOTTED,
    DASHED,
    DOTTED,
    OVERLAY_RUN_LIMIT,
    SOLID,
    dash_styles,
    overlay_curve,
    overlay_metrics,
    overlay_title,
    run_label,
)
from gui.models.series import STEP, TIME
from gui.widgets.column_table_model import ColumnTableModel
from gui.widgets.monitor_panel import STATUS_COLORS
from rankwatch import protocol

SORT_ROLE = Qt.ItemDataRole.UserRole + 1
STATUS_COLUMN = HISTORY_COLUMNS.index("Status")
NUMERIC_COLUMN_INDEXES = frozenset(HISTORY_COLUMNS.index(name) for name in NUMERIC_COLUMNS)
EXPORT_CHART_SIZE = (1600, 1000)
PEN_STYLES = {SOLID: Qt.PenStyle.SolidLine, DASHED: Qt.PenStyle.DashLine, DOTTED: Qt.PenStyle.DotLine,
              DASH_DOTTED: Qt.PenStyle.DashDotLine}


class RunsTableModel(ColumnTableModel):
    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(HISTORY_COLUMNS, parent)
        self.rows: list[RunRow]
        self._bold = QFont()
        self._bold.setBold(True)
        self._now = time.time()

    def data(self, index: QModelIndex | QPersistentModelIndex, role: int = Qt.ItemDataRole.DisplayRole) -> object:
        if not index.isValid():
            return None
        row = self.rows[index.row()]
        if role == Qt.ItemDataRole.DisplayRole:
            return history_cells(row, self._now)[index.column()]
        if role == SORT_ROLE:
            return history_sort_keys(row, self._now)[index.column()]
        if role == Qt.ItemDataRole.TextAlignmentRole and index.column() in NUMERIC_COLUMN_INDEXES:
            return int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        if role == Qt.ItemDataRole.ForegroundRole and index.column() == STATUS_COLUMN:
            color = STATUS_COLORS.get(row.status)
            return QBrush(color) if color is not None else None
        if role == Qt.ItemDataRole.FontRole and (row.live or index.column() == STATUS_COLUMN):
            return self._bold
        if role == Qt.ItemDataRole.ToolTipRole and row.live:
            return "Live: double-click or Attach to watch it"
        if role == Qt.ItemDataRole.ToolTipRole and row.notes:
            return row.notes
        return None

    def set_rows(self, rows: list[RunRow]) -> None:
        self.beginResetModel()
        self.rows = list(rows)
        self._now = time.time()
        self.endResetModel()

    def tick(self) -> None:
        """Durations of live runs grow."""
        self._now = time.time()
        if any(row.live for row in self.rows):
            column = HISTORY_COLUMNS.index("Duration")
            self.dataChanged.emit(self.index(0, column), self.index(len(self.rows) - 1, column))


class RunsFilterModel(QSortFilterProxyModel):
    """The runs whose id, profile, script, status, outcome or tags hold every word of the filter."""

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._text = ""

    def set_text(self, text: str) -> None:
        self.beginFilterChange()
        self._text = text
        self.endFilterChange(QSortFilterProxyModel.Direction.Rows)

    def filterAcceptsRow(self, source_row: int, _source_parent: QModelIndex | QPersistentModelIndex) -> bool:
        model = self.sourceModel()
        assert isinstance(model, RunsTableModel)
        return source_row >= len(model.rows) or matches_filter(model.rows[source_row], self._text)


class HistoryPanel(QWidget):
    """Runs from the store.

    Signals:
        open_run_requested(int): open (or attach to, when live) this run in the monitor.
        overlay_shown(list): the runs overlay now shows these run ids.
        export_finished(str): an export wrote this folder (or failed: the message).
        run_notes_saved(int): the tags and notes of this run are in the store now.
    """

    open_run_requested = Signal(int)
    runs_listed = Signal(list)
    """The runs as the store has them now (``RunRow``), after each read."""
    overlay_shown = Signal(list)
    export_finished = Signal(str)
    run_notes_saved = Signal(int)

    def __init__(self, parent: QWidget | None = None, *, poll_interval_s: float = 2.0) -> None:
        super().__init__(parent)
        self.overlay_run_ids: list[int] = []

        self.table_model = RunsTableModel(self)
        self.proxy = RunsFilterModel(self)
        self.proxy.setSourceModel(self.table_model)
        self.proxy.setSortRole(SORT_ROLE)
        self.view = QTableView()
        self.view.setModel(self.proxy)
        self.view.setSortingEnabled(True)
        self.view.sortByColumn(0, Qt.SortOrder.DescendingOrder)
        self.view.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.view.setSelectionMode(QAbstractItemView.SelectionMode.ExtendedSelection)
        self.view.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.view.verticalHeader().setVisible(False)
        self.view.verticalHeader().setDefaultSectionSize(22)
        self.view.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        self.view.horizontalHeader().setStretchLastSection(True)
        self.view.doubleClicked.connect(self._on_double_clicked)
        self.view.selectionModel().selectionChanged.connect(self._update_buttons)

        self.open_button = QPushButton("Open")
        self.open_button.clicked.connect(self._on_open_clicked)
        self.overlay_button = QPushButton("Overlay")
        self.overlay_button.setToolTip(f"Compare the selected runs (up to {OVERLAY_RUN_LIMIT}) on one chart: loss, "
                                       "step time, throughput, GPU use... (each run: the mean over its ranks)")
        self.overlay_button.clicked.connect(self._on_overlay_clicked)
        self.export_button = QPushButton("Export…")
        self.export_button.setToolTip("Write the run's metrics, logs and events as CSV, and its charts as PNG")
        self.export_button.clicked.connect(self._on_export_clicked)
        self.refresh_button = QPushButton("Refresh")
        self.refresh_button.clicked.connect(self.refresh_now)
        self.status_label = QLabel()
        self.filter_edit = QLineEdit()
        self.filter_edit.setPlaceholderText("Filter: run, profile, script, status, tag…")
        self.filter_edit.setClearButtonEnabled(True)
        self.filter_edit.setToolTip("Shows the runs whose id, profile, script, status, outcome or tags hold "
                                    "every word typed here")
        self.filter_edit.textChanged.connect(self.proxy.set_text)
        self.filter_edit.setMaximumWidth(320)
        buttons = QHBoxLayout()
        buttons.setContentsMargins(4, 2, 4, 2)
        buttons.addWidget(self.filter_edit, 1)
        for button in (self.open_button, self.overlay_button, self.export_button, self.refresh_button):
            buttons.addWidget(button)
        buttons.addWidget(self.status_label, 1)

        self.tags_edit = QLineEdit()
        self.tags_edit.setPlaceholderText("tags, separated by commas")
        self.notes_edit = QLineEdit()
        self.notes_edit.setPlaceholderText("notes about this run")
        self.save_notes_button = QPushButton("Save")
        self.save_notes_button.setToolTip("Store the tags and notes with the selected run")
        self.save_notes_button.clicked.connect(self._on_save_notes_clicked)
        for edit in (self.tags_edit, self.notes_edit):
            edit.returnPressed.connect(self._on_save_notes_clicked)
        self._notes_run_id: int | None = None
        notes_bar = QHBoxLayout()
        notes_bar.setContentsMargins(4, 0, 4, 2)
        notes_bar.addWidget(QLabel("Tags"))
        notes_bar.addWidget(self.tags_edit, 1)
        notes_bar.addWidget(QLabel("Notes"))
        notes_bar.addWidget(self.notes_edit, 2)
        notes_bar.addWidget(self.save_notes_button)

        self.overlay_chart = MetricChart("Runs overlay: select runs and press Overlay")
        self._overlay_runs: list[tuple[int, str, MonitorModel]] = []
        self._overlay_defs: dict[str, ChartDef] = {}
        self.overlay_dashes: list[str] = []
        self.overlay_metric_choice = QComboBox()
        self.overlay_metric_choice.addItem(BUILT_IN_CHARTS[0].title, BUILT_IN_CHARTS[0].series)
        self.overlay_metric_choice.setToolTip("The chart to compare the runs on (each run: the mean over its ranks)")
        self.overlay_metric_choice.currentIndexChanged.connect(
            lambda _index: self._draw_overlay() if self._overlay_runs else None)
        self.overlay_smoothing_slider = QSlider(Qt.Orientation.Horizontal)
        self.overlay_smoothing_slider.setRange(0, 99)
        self.overlay_smoothing_slider.setFixedWidth(140)
        self.overlay_smoothing_slider.setToolTip("Exponential moving average weight (0 = raw values), as on the "
                                                 "live charts; the raw curves stay visible, faint")
        self.overlay_smoothing_slider.valueChanged.connect(self._on_overlay_smoothing_moved)
        self.overlay_smoothing_label = QLabel("0.00")
        self.overlay_smoothing_label.setMinimumWidth(32)
        self.overlay_axis_button = QPushButton("X: step")
        self.overlay_axis_button.setCheckable(True)
        self.overlay_axis_button.toggled.connect(self._on_overlay_axis_toggled)
        self.overlay_save_button = QPushButton("Save PNG…")
        self.overlay_save_button.clicked.connect(self._on_overlay_save_clicked)
        overlay_bar = QHBoxLayout()
        overlay_bar.setContentsMargins(4, 0, 4, 0)
        overlay_bar.addWidget(QLabel("Compare"))
        overlay_bar.addWidget(self.overlay_metric_choice)
        overlay_bar.addSpacing(12)
        overlay_bar.addWidget(QLabel("Smoothing"))
        overlay_bar.addWidget(self.overlay_smoothing_slider)
        overlay_bar.addWidget(self.overlay_smoothing_label)
        overlay_bar.addStretch(1)
        overlay_bar.addWidget(self.overlay_axis_button)
        overlay_bar.addWidget(self.overlay_save_button)
        overlay_box = QWidget()
        overlay_layout = QVBoxLayout(overlay_box)
        overlay_layout.setContentsMargins(0, 0, 0, 0)
        overlay_layout.addLayout(overlay_bar)
        overlay_layout.addWidget(self.overlay_chart, 1)
        self.overlay_layout = overlay_layout
        self.overlay_box = overlay_box

        splitter = QSplitter(Qt.Orientation.Vertical)
        splitter.setObjectName("historySplitter")  # the window remembers its sizes
        table_box = QWidget()
        table_layout = QVBoxLayout(table_box)
        table_layout.setContentsMargins(0, 0, 0, 0)
        table_layout.addLayout(buttons)
        table_layout.addWidget(self.view, 1)
        table_layout.addLayout(notes_bar)
        splitter.addWidget(table_box)
        splitter.addWidget(overlay_box)
        splitter.setStretchFactor(0, 1)
        splitter.setStretchFactor(1, 1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(splitter)

        self._tick_timer = QTimer(self)
        self._tick_timer.setInterval(1000)
        self._tick_timer.timeout.connect(self.table_model.tick)
        self._tick_timer.start()
        self._overlay_timer = QTimer(self)
        self._overlay_timer.setInterval(100)
        self._overlay_timer.timeout.connect(self.overlay_chart.refresh)  # replaced with the chart
        self._overlay_timer.start()
        self.poller = store_reader().every(poll_interval_s, lambda store: StoreReads.runs(store, RUN_LIMIT),
                                           self._on_runs_read, self._on_store_unreadable, owner=self,
                                           when_no_store=[])  # no store yet: nothing has run
        poller = self.poller
        self.destroyed.connect(lambda *_args: poller.stop())
        self._update_buttons()

    # ---- runs list -------------------------------------------------------------------

    def refresh_now(self) -> None:
        self.poller.now()

    def rows(self) -> list[RunRow]:
        return list(self.table_model.rows)

    def _on_runs_read(self, runs: list[ListedRun]) -> None:
        self._on_rows_loaded([RunRow.from_store(run) for run in runs])

    def _on_store_unreadable(self, message: str) -> None:
        self._on_failed(f"cannot read the run store: {message}")

    def _on_rows_loaded(self, rows: list[RunRow]) -> None:
        selected = set(self.selected_run_ids())
        self.table_model.set_rows(rows)
        if selected:
            self.select_runs(sorted(selected))
        live = sum(1 for row in rows if row.live)
        self.status_label.setText(f"{len(rows)} runs" + (f", {live} live" if live else ""))
        self._update_buttons()
        self.runs_listed.emit(rows)

    def _on_failed(self, message: str) -> None:
        self.status_label.setText(message)

    def selected_run_ids(self) -> list[int]:
        ids = []
        for index in self.view.selectionModel().selectedRows():
            row = self.proxy.mapToSource(index).row()
            if 0 <= row < len(self.table_model.rows):
                ids.append(self.table_model.rows[row].run_id)
        return ids

    def select_runs(self, run_ids: list[int]) -> None:
        selection = self.view.selectionModel()
        selection.clearSelection()
        for row, run in enumerate(self.table_model.rows):
            if run.run_id in run_ids:
                index = self.proxy.mapFromSource(self.table_model.index(row, 0))
                selection.select(index, selection.SelectionFlag.Select | selection.SelectionFlag.Rows)

    def _row(self, run_id: int) -> RunRow | None:
        return next((row for row in self.table_model.rows if row.run_id == run_id), None)

    def _update_buttons(self, *_args: object) -> None:
        ids = self.selected_run_ids()
        one = len(ids) == 1
        row = self._row(ids[0]) if one else None
        self.open_button.setEnabled(one)
        self.open_button.setText("Attach" if row is not None and row.live else "Open")
        self.overlay_button.setEnabled(1 <= len(ids) <= OVERLAY_RUN_LIMIT)
        self.export_button.setEnabled(one)
        self._update_notes_editor(row)

    # ---- tags and notes --------------------------------------------------------------

    def _update_notes_editor(self, row: RunRow | None) -> None:
        """Show the selected run's tags and notes; what is being typed for it stays."""
        for widget in (self.tags_edit, self.notes_edit, self.save_notes_button):
            widget.setEnabled(row is not None)
        run_id = None if row is None else row.run_id
        if run_id == self._notes_run_id:
            return
        self._notes_run_id = run_id
        self.tags_edit.setText("" if row is None else ", ".join(row.tags))
        self.notes_edit.setText("" if row is None else row.notes)

    def set_run_notes(self, run_id: int, tags: list[str], notes: str) -> None:
        """Store ``tags`` and ``notes`` with run ``run_id`` (off the GUI thread); ``run_notes_saved``
        when they are, the runs list then shows them."""

        def write(_store: RunStore) -> int:
            StoreReads.set_run_notes(run_id, tags, notes)
            return run_id

        store_reader().read(write, self._on_notes_saved,
                            lambda message: self._on_failed(f"cannot save the notes of run {run_id}: {message}"),
                            owner=self)

    def _on_save_notes_clicked(self) -> None:
        if self._notes_run_id is not None:
            self.set_run_notes(self._notes_run_id, self.tags_edit.text().split(","), self.notes_edit.text())

    def _on_notes_saved(self, run_id: int) -> None:
        self.status_label.setText(f"saved the tags and notes of run {run_id}")
        self.refresh_now()
        self.run_notes_saved.emit(run_id)

    def _on_double_clicked(self, index: QModelIndex) -> None:
        row = self.proxy.mapToSource(index).row()
        if 0 <= row < len(self.table_model.rows):
            self.open_run_requested.emit(self.table_model.rows[row].run_id)

    def _on_open_clicked(self) -> None:
        ids = self.selected_run_ids()
        if len(ids) == 1:
            self.open_run_requested.emit(ids[0])

    # ---- runs overlay ----------------------------------------------------------------

    def overlay(self, run_ids: list[int]) -> None:
        """Load the charted metrics of ``run_ids`` (up to ``OVERLAY_RUN_LIMIT``) off the GUI thread
        and overlay the chosen metric (``overlay_metric``), one curve per run."""
        ids = list(run_ids)[:OVERLAY_RUN_LIMIT]

        def read(store: RunStore) -> list[tuple[int, str, MonitorModel]]:
            loaded = []
            for run_id in ids:
                records = StoreReads.chart_records(store, run_id)
                loaded.append((run_id, run_label(run_id, records.run.profile),
                               MonitorModel.from_records(records, log_limit=1)))
            return loaded

        store_reader().read(read, self._on_overlay_loaded,
                            lambda message: self._on_failed(f"cannot load runs {ids}: {message}"), owner=self)

    def _on_overlay_clicked(self) -> None:
        self.overlay(self.selected_run_ids())

    def _on_overlay_loaded(self, loaded: list[tuple[int, str, MonitorModel]]) -> None:
        self._overlay_runs = loaded
        current = self.overlay_metric()
        metrics = overlay_metrics([model for _run_id, _label, model in loaded]) or [BUILT_IN_CHARTS[0]]
        self._overlay_defs = {definition.series: definition for definition in metrics}
        self.overlay_metric_choice.blockSignals(True)
        self.overlay_metric_choice.clear()
        for definition in metrics:
            self.overlay_metric_choice.addItem(definition.title, definition.series)
        chosen = self.overlay_metric_choice.findData(current)
        self.overlay_metric_choice.setCurrentIndex(max(0, chosen))
        self.overlay_metric_choice.blockSignals(False)
        self._draw_overlay()

    def overlay_metric(self) -> str:
        """The series the overlay compares (``loss`` until another is chosen)."""
        return self.overlay_metric_choice.currentData() or protocol.LOSS

    def set_overlay_metric(self, series: str) -> None:
        """Compare ``series`` (a chart's series name: ``loss``, ``step_time``, ``gpu/utilization``...)."""
        index = self.overlay_metric_choice.findData(series)
        if index >= 0:
            self.overlay_metric_choice.setCurrentIndex(index)

    def set_overlay_smoothing(self, weight: float) -> None:
        self.overlay_smoothing_slider.setValue(round(weight * 100))

    def _on_overlay_smoothing_moved(self, value: int) -> None:
        weight = value / 100.0
        self.overlay_smoothing_label.setText(f"{weight:.2f}")
        self.overlay_chart.set_smoothing(weight)
        self.overlay_chart.refresh(force=True)

    def _make_overlay_chart(self, definition: ChartDef, title: str) -> None:
        """A chart drawn as the monitor draws ``definition`` (scale, time only, smoothable)."""
        chart = MetricChart(title, scale=definition.scale, time_only=definition.time_only,
                            smoothable=definition.smoothable)
        chart.set_smoothing(self.overlay_smoothing_slider.value() / 100.0)
        self.overlay_layout.replaceWidget(self.overlay_chart, chart)
        self.overlay_chart.hide()
        self.overlay_chart.deleteLater()
        self.overlay_chart = chart
        self._overlay_timer.timeout.disconnect()
        self._overlay_timer.timeout.connect(chart.refresh)

    def _draw_overlay(self) -> None:
        definition = self._overlay_defs.get(self.overlay_metric(), BUILT_IN_CHARTS[0])
        curves = [overlay_curve(run_id, label, model, definition) for run_id, label, model in self._overlay_runs]
        self._make_overlay_chart(definition, overlay_title(definition, curves))
        chart = self.overlay_chart
        axis = TIME if self.overlay_axis_button.isChecked() or definition.time_only else STEP
        dark = palette_is_dark(self.palette())
        for position, (curve, dash) in enumerate(zip(curves, dash_styles(curves, axis), strict=True)):
            chart.set_series(position, curve.label, curve.series(), series_color(position, OVERLAY_RUN_LIMIT, dark))
            if dash != SOLID:
                chart.set_curve_style(position, PEN_STYLES[dash], width=2.0)
        chart.set_x_axis(axis, 0.0)
        chart.refresh(force=True)
        self.overlay_run_ids = [curve.run_id for curve in curves]
        self.overlay_dashes = dash_styles(curves, axis)
        empty = [curve.run_id for curve in curves if not len(curve.values)]
        self.status_label.setText(
            f"no {definition.title.lower()} recorded for run {', '.join(map(str, empty))}" if empty else "")
        self.overlay_shown.emit(self.overlay_run_ids)

    def _on_overlay_axis_toggled(self, by_time: bool) -> None:
        self.overlay_axis_button.setText("X: time" if by_time else "X: step")
        if self._overlay_runs:
            self._draw_overlay()

    def save_overlay_png(self, path: Path) -> Path:
        """Raises: OSError when the image cannot be written."""
        if not self.overlay_chart.picture().save(str(path), "PNG"):
            raise OSError(f"could not write {path}")
        return Path(path)

    def _on_overlay_save_clicked(self) -> None:
        metric = self.overlay_metric().replace("/", "-")
        name = (f"{metric}-" + "-vs-".join(map(str, self.overlay_run_ids)) + ".png" if self.overlay_run_ids
                else f"{metric}.png")
        path, _ = QFileDialog.getSaveFileName(self, "Save runs overlay", str(Path.home() / name), "PNG image (*.png)")
        if path:
            try:
                self.save_overlay_png(Path(path))
            except OSError as error:
                self.status_label.setText(str(error))

    # ---- export ----------------------------------------------------------------------

    def export_run(self, run_id: int, folder: Path) -> None:
        """Write ``folder/run-<id>/``: one CSV per store table and ``charts.png``.

        The CSV files and the model for the charts are read on a worker thread; the
        charts are drawn on the GUI thread when it is done (``export_finished``).
        """
        target = Path(folder) / f"run-{run_id}"

        def read(store: RunStore) -> tuple[Path, MonitorModel, str]:
            records = StoreReads.export_run(store, run_id, target, LOG_LIMIT)
            return target, MonitorModel.from_records(records), run_title(records.run, records.spec_toml)

        def failed(message: str) -> None:
            self._on_failed(f"export of run {run_id} failed: {message}")
            self._on_export_loaded((target, None, ""))

        store_reader().read(read, self._on_export_loaded, failed, owner=self)

    def _on_export_loaded(self, payload: tuple) -> None:
        target, model, title = payload
        if model is None:
            self.export_finished.emit(str(self.status_label.text()))
            return
        grid = ChartGrid(model, refresh_hz=1)
        grid.timer.stop()
        grid.setAttribute(Qt.WidgetAttribute.WA_DontShowOnScreen, True)
        grid.resize(*EXPORT_CHART_SIZE)
        grid.show()
        try:
            grid.export_png(target / "charts.png", title)
        except OSError as error:
            self.status_label.setText(str(error))
        finally:
            grid.close()
            grid.deleteLater()
        self.status_label.setText(f"exported to {target}")
        self.export_finished.emit(str(target))

    def _on_export_clicked(self) -> None:
        ids = self.selected_run_ids()
        if len(ids) != 1:
            return
        folder = QFileDialog.getExistingDirectory(self, "Export run to folder", str(Path.home()))
        if folder:
            self.status_label.setText(f"exporting run {ids[0]}…")
            self.export_run(ids[0], Path(folder))

    def closeEvent(self, event: QCloseEvent) -> None:
        self.poller.stop()
        super().closeEvent(event)
