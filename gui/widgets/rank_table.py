"""The rank table: one row per rank, coloured by state, heartbeat ages ticking.

Rows come from :class:`~gui.models.monitor.MonitorModel` (the hub's RANK rows);
texts and sort keys come from the Qt-free ``rank_cells``/``rank_sort_keys``. Colours
are translucent tints over the view's base colour, so they read the same in light
and dark palettes; the text keeps the palette's colour.

Ranks are sorted by (node, rank) by default; with several nodes the Node column is
shown and a line separates one node's ranks from the next. The Diagnosis column
holds notes from :class:`~gui.models.diagnosis.DiagnosisModel` (``set_notes``):
failed first, stalled for how long, straggler and why, diverged at which step.

The ``Where the step goes`` column draws each rank's step phases as a stacked bar
(``gui.widgets.phase_bars``; the tooltip has every phase's share and the clock). Above
the table, once a rank measured its phases, the bars' legend and the run's bottleneck
verdict (``set_bottleneck``: live, or the whole run's once it ended) with its evidence
and the one thing to do.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from html import escape
from typing import Any

from PySide6.QtCore import (
    QModelIndex,
    QObject,
    QPersistentModelIndex,
    QSize,
    QSortFilterProxyModel,
    Qt,
    Signal,
)
from PySide6.QtGui import QBrush, QColor, QFont, QPainter, QPen
from PySide6.QtWidgets import (
    QAbstractItemView,
    QApplication,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QSizePolicy,
    QStyle,
    QStyledItemDelegate,
    QStyleOptionViewItem,
    QTableView,
    QVBoxLayout,
    QWidget,
)

from gui.gateway.run_state import RankInfo
from gui.gateway.runner_rules import RankState
from gui.gateway.store_reads import RankStats
from gui.models.diagnosis import Bottleneck
from gui.models.monitor import (
    PHASES_COLUMN,
    RANK_COLUMNS,
    STALE_HEARTBEAT_S,
    WHOLE_RUN_COLUMNS,
    MonitorModel,
    heartbeat_age,
    rank_cells,
    rank_phases_of,
    rank_sort_keys,
    rank_timing,
    skipped_steps,
)
from gui.models.nodes import is_multi_node
from gui.models.phases import RankPhases, clocks_text
from gui.models.rank_filter import RankFilter
from gui.widgets.column_table_model import ColumnTableModel
from gui.widgets.phase_bars import BAR_WIDTH, PhaseLegend, paint_phase_bar
from gui.widgets.throttled import RefreshThrottle

SORT_ROLE = Qt.ItemDataRole.UserRole + 1
NODE_ROLE = Qt.ItemDataRole.UserRole + 2
PHASES_ROLE = Qt.ItemDataRole.UserRole + 3
"""The rank's :class:`~gui.models.phases.RankPhases` (what the bar column draws)."""
NODE_COLUMN = RANK_COLUMNS.index("Node")
HOST_COLUMN = RANK_COLUMNS.index("Host")
STATE_COLUMN = RANK_COLUMNS.index("State")
HEARTBEAT_COLUMN = RANK_COLUMNS.index("Heartbeat")
DIAGNOSIS_COLUMN = RANK_COLUMNS.index("Diagnosis")
STEP_MS_COLUMN = RANK_COLUMNS.index("Step ms")
STEP_COLUMN = RANK_COLUMNS.index("Step")
PHASE_BAR_COLUMN = RANK_COLUMNS.index(PHASES_COLUMN)
LEFT_ALIGNED = (HOST_COLUMN, STATE_COLUMN, PHASE_BAR_COLUMN, DIAGNOSIS_COLUMN)
NotesProvider = Callable[[float], dict[int, str]]
BottleneckProvider = Callable[[], Bottleneck | None]
TINT_ALPHA = 70
"""The alpha of a row's state tint (the node table's tints share it)."""

STATE_COLORS: dict[str, QColor] = {
    RankState.WAITING.value: QColor(150, 150, 150),
    RankState.RUNNING.value: QColor(46, 160, 67),
    RankState.STALLED.value: QColor(230, 160, 0),
    RankState.EXITED.value: QColor(70, 130, 220),
    RankState.FAILED.value: QColor(220, 50, 47),
    RankState.STOPPED.value: QColor(120, 120, 120),
    RankState.LOST.value: QColor(160, 80, 200),
}
"""Opaque state colours (the state cell's text); rows get a translucent tint of them."""


def state_tint(state: str | None) -> QColor | None:
    color = STATE_COLORS.get(state or "")
    if color is None:
        return None
    tint = QColor(color)
    tint.setAlpha(TINT_ALPHA)
    return tint


class RankTableModel(ColumnTableModel):
    """Qt's view of the monitor model's rank rows."""

    def __init__(self, model: MonitorModel, parent: QObject | None = None) -> None:
        super().__init__(RANK_COLUMNS, parent)
        self.model = model
        self.rows: list[RankInfo]
        self._cells: list[tuple[str, ...]] = []
        self._phases: list[RankPhases] = []
        self._sort_keys: dict[int, tuple[Any, ...]] = {}
        """Each row's sort keys, computed when the sort first asks (``refresh`` forgets them):
        computed afresh for each of the sort's ~20,000 comparisons at 1,024 ranks, they took a
        fifth of a GUI's attach (``scale_gui.py --profile-history``)."""
        self._notes: dict[int, str] = {}
        self.notes_provider: NotesProvider | None = None
        self._now = time.time()
        self._bold = QFont()
        self._bold.setBold(True)

    def data(self, index: QModelIndex | QPersistentModelIndex, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid():
            return None
        row = self.rows[index.row()]
        column = index.column()
        if role == Qt.ItemDataRole.DisplayRole:
            return self._cells[index.row()][column]
        if role == SORT_ROLE:
            keys = self._sort_keys.get(index.row())
            if keys is None:
                keys = self._sort_keys[index.row()] = rank_sort_keys(
                    row, self._now, self._cells[index.row()][DIAGNOSIS_COLUMN], self._result(row))
            value = keys[column]
            return float("-inf") if value is None else value
        if role == NODE_ROLE:
            return row.node_rank or 0
        if role == PHASES_ROLE:
            return self._phases[index.row()]
        if role == Qt.ItemDataRole.BackgroundRole:
            tint = state_tint(row.state)
            return QBrush(tint) if tint is not None else None
        if role == Qt.ItemDataRole.ForegroundRole:
            if column == HEARTBEAT_COLUMN and row.state == RankState.RUNNING.value:
                age = heartbeat_age(row, self._now)
                if age is not None and age > STALE_HEARTBEAT_S:
                    return QBrush(STATE_COLORS[RankState.STALLED.value])
            return None
        if role == Qt.ItemDataRole.FontRole and column == DIAGNOSIS_COLUMN and self._cells[index.row()][column]:
            return self._bold
        if role == Qt.ItemDataRole.FontRole and column == STATE_COLUMN:
            return self._bold
        if role == Qt.ItemDataRole.TextAlignmentRole:
            if column in LEFT_ALIGNED:
                return int(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter)
            return int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        if role == Qt.ItemDataRole.ToolTipRole:
            if column == STATE_COLUMN and row.state == RankState.STALLED.value:
                return "No progress for longer than the stall timeout"
            if column == DIAGNOSIS_COLUMN and self._cells[index.row()][column]:
                return self._cells[index.row()][column]
            if column == STEP_MS_COLUMN:
                steps = rank_timing(row, self._result(row)).whole_run_steps
                if steps is not None:
                    return f"Median over the run's {steps} steps"
            if column == PHASE_BAR_COLUMN:
                return self._phases[index.row()].tooltip()
            if column == STEP_COLUMN and (skipped := skipped_steps(row, self._result(row))):
                return (f"GradScaler skipped {skipped:,} of its steps (inf or NaN gradients): "
                        "counted as steps, the weights left as they were")
            if row.dropped:
                return f"{row.dropped} telemetry records dropped by this rank"
        return None

    def headerData(self, section: int, orientation: Qt.Orientation, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if role == Qt.ItemDataRole.ToolTipRole and orientation == Qt.Orientation.Horizontal:
            return WHOLE_RUN_COLUMNS.get(self.columns[section])
        return super().headerData(section, orientation, role)

    def _result(self, row: RankInfo) -> RankStats | None:
        return self.model.rank_results.get(row.rank)

    def refresh(self, now: float | None = None) -> None:
        """Take the model's current rows (a reset only when the set of ranks changed)."""
        self._now = time.time() if now is None else now
        rows = self.model.rank_rows()
        self._notes = self.notes_provider(self._now) if self.notes_provider is not None else {}
        summary = None if self.model.run is None else self.model.run.summary
        cells = [rank_cells(row, self._now, self._notes.get(row.rank, ""), summary, self._result(row))
                 for row in rows]
        phases = [rank_phases_of(row, self._result(row)) for row in rows]
        same_ranks = [r.rank for r in rows] == [r.rank for r in self.rows]
        self._sort_keys = {}
        if same_ranks:
            before, before_phases = self._cells, self._phases
            self.rows, self._cells, self._phases = rows, cells, phases
            # Column by column, only the columns that changed: the sort proxy re-sorts a thousand
            # rows only when the sorted column is among them (a heartbeat tick is not).
            for column in changed_columns(before, cells, before_phases != phases):
                self.dataChanged.emit(self.index(0, column), self.index(len(rows) - 1, column))
        else:
            self.beginResetModel()
            self.rows, self._cells, self._phases = rows, cells, phases
            self.endResetModel()

    def phases(self) -> list[RankPhases]:
        """Every rank's phases, in the model's (rank) order."""
        return list(self._phases)

    def rank_at(self, row: int) -> int | None:
        return self.rows[row].rank if 0 <= row < len(self.rows) else None


def changed_columns(before: list[tuple[str, ...]], after: list[tuple[str, ...]], phases_changed: bool) -> list[int]:
    """The columns whose text differs in some row (the phase bars' column when ``phases_changed``)."""
    columns = {column for old, new in zip(before, after, strict=True)
               for column, (a, b) in enumerate(zip(old, new, strict=True))
               if a != b}
    if phases_changed:
        columns.add(PHASE_BAR_COLUMN)
    return sorted(columns)


class NodeSeparatorDelegate(QStyledItemDelegate):
    """Draws a line above the first rank of each node (when rows are grouped by node)."""

    def __init__(self, view: QTableView) -> None:
        super().__init__(view)
        self.view = view
        self.enabled = False

    def paint(self, painter: QPainter, option: QStyleOptionViewItem,
              index: QModelIndex | QPersistentModelIndex) -> None:
        super().paint(painter, option, index)
        self.paint_separator(painter, option, index)

    def paint_separator(self, painter: QPainter, option: QStyleOptionViewItem,
                        index: QModelIndex | QPersistentModelIndex) -> None:
        if not self.enabled or index.row() == 0:
            return
        above = index.sibling(index.row() - 1, index.column())
        if above.data(NODE_ROLE) != index.data(NODE_ROLE):
            painter.save()
            pen = QPen(option.palette.color(option.palette.ColorRole.WindowText))
            pen.setWidth(2)
            painter.setPen(pen)
            painter.drawLine(option.rect.topLeft(), option.rect.topRight())
            painter.restore()


class PhaseBarDelegate(QStyledItemDelegate):
    """Draws the ``Where the step goes`` cell as the rank's stacked phase bar (its row's tint and
    selection behind it); a rank without measured phases shows its text, "–". The line between
    nodes is the ``separators``' (the delegate of every other column)."""

    def __init__(self, view: QTableView, separators: NodeSeparatorDelegate) -> None:
        super().__init__(view)
        self.separators = separators

    def paint(self, painter: QPainter, option: QStyleOptionViewItem,
              index: QModelIndex | QPersistentModelIndex) -> None:
        phases = index.data(PHASES_ROLE)
        if not isinstance(phases, RankPhases) or not phases.measured:
            super().paint(painter, option, index)
        else:
            cell = QStyleOptionViewItem(option)
            self.initStyleOption(cell, index)
            cell.text = ""
            style = cell.widget.style() if cell.widget is not None else QApplication.style()
            style.drawControl(QStyle.ControlElement.CE_ItemViewItem, cell, painter, cell.widget)
            bar = option.rect.adjusted(3, 3, -3, -3)
            if bar.width() > 4 and bar.height() > 2:
                paint_phase_bar(painter, bar, phases, option.palette)
        self.separators.paint_separator(painter, option, index)

    def sizeHint(self, option: QStyleOptionViewItem, index: QModelIndex | QPersistentModelIndex) -> QSize:
        return QSize(BAR_WIDTH, super().sizeHint(option, index).height())


ROWS_MEASURED = 64
"""Rows the column widths are measured from (the visible ones first, as Qt does)."""


class RankFilterProxy(QSortFilterProxyModel):
    """Sorts as the table asks and keeps the rows the filter accepts (its texts: every cell)."""

    def __init__(self, table_model: RankTableModel, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.table_model = table_model
        self.rank_filter = RankFilter()

    def set_filter(self, rank_filter: RankFilter) -> None:
        self.refilter(rank_filter)

    def refilter(self, rank_filter: RankFilter | None = None) -> None:
        """Judge every row again, with ``rank_filter`` when given (Qt 6.9 brackets the change
        with ``begin/endFilterChange``; older Qt has only ``invalidateFilter``)."""
        if hasattr(self, "beginFilterChange"):
            self.beginFilterChange()
            self.rank_filter = rank_filter or self.rank_filter
            self.endFilterChange(QSortFilterProxyModel.Direction.Rows)
        else:
            self.rank_filter = rank_filter or self.rank_filter
            self.invalidateFilter()

    def filterAcceptsRow(self, source_row: int, source_parent: QModelIndex | QPersistentModelIndex) -> bool:
        if self.rank_filter.empty:
            return True
        rank = self.table_model.rank_at(source_row)
        if rank is None:
            return False
        model = self.table_model
        texts = (str(model.data(model.index(source_row, column)) or "") for column in range(model.columnCount()))
        return self.rank_filter.accepts(rank, texts)


class RankTable(QWidget):
    """The rank table widget. Refreshes on its own timer when the model changed (and
    at least once a second while live, for heartbeat ages).

    Signals:
        rank_activated(int): a row was double-clicked (show that rank's logs).
    """

    rank_activated = Signal(int)
    selection_changed = Signal(object)
    """The selected rows' ranks changed (a frozenset of ints): the charts draw them over the band."""

    def __init__(self, model: MonitorModel, parent: QWidget | None = None, refresh_hz: float = 5.0) -> None:
        super().__init__(parent)
        self.model = model
        self.table_model = RankTableModel(model, self)
        self.proxy = RankFilterProxy(self.table_model, self)
        self.proxy.setSourceModel(self.table_model)
        self.proxy.setSortRole(SORT_ROLE)
        self.view = QTableView()
        self.view.setModel(self.proxy)
        self.view.setSortingEnabled(True)
        self.view.sortByColumn(0, Qt.SortOrder.AscendingOrder)
        self.view.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.view.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.view.setAlternatingRowColors(False)
        self.view.verticalHeader().setVisible(False)
        self.view.verticalHeader().setDefaultSectionSize(22)
        header = self.view.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        # Measure at most this many rows to size the columns: with a thousand ranks, Qt's default
        # (1,000) re-measured every cell of the table at each refresh (seconds a frame).
        header.setResizeContentsPrecision(ROWS_MEASURED)
        header.setStretchLastSection(True)
        self.view.doubleClicked.connect(self._on_double_clicked)
        selection = self.view.selectionModel()
        if selection is not None:
            selection.selectionChanged.connect(self._on_selection_changed)
        self.separators = NodeSeparatorDelegate(self.view)
        self.view.setItemDelegate(self.separators)
        self.phase_bars = PhaseBarDelegate(self.view, self.separators)
        self.view.setItemDelegateForColumn(PHASE_BAR_COLUMN, self.phase_bars)
        self.view.setColumnHidden(NODE_COLUMN, True)
        header.sortIndicatorChanged.connect(self._on_sort_changed)
        self.legend = PhaseLegend()
        self.verdict_label = QLabel()
        self.verdict_label.setTextFormat(Qt.TextFormat.RichText)
        self.verdict_label.setWordWrap(True)
        self.verdict_label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.verdict_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.strip = QWidget()
        strip_layout = QVBoxLayout(self.strip)
        strip_layout.setContentsMargins(6, 2, 6, 2)
        strip_layout.setSpacing(1)
        strip_layout.addWidget(self.legend)
        strip_layout.addWidget(self.verdict_label)
        self.strip.hide()
        self.bottleneck_provider: BottleneckProvider | None = None
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(0)
        self.filter_edit = QLineEdit()
        self.filter_edit.setPlaceholderText("Filter ranks: stalled, 512-519, a host, a note…")
        self.filter_edit.setClearButtonEnabled(True)
        self.filter_edit.textChanged.connect(self.set_filter)
        self.filter_count = QLabel()
        filter_row = QHBoxLayout()
        filter_row.setContentsMargins(6, 2, 6, 2)
        filter_row.addWidget(self.filter_edit, 1)
        filter_row.addWidget(self.filter_count)
        layout.addLayout(filter_row)
        layout.addWidget(self.strip)
        layout.addWidget(self.view)
        self._last_refresh = 0.0
        self._throttle = RefreshThrottle(self, self.refresh, refresh_hz, also_when=self._heartbeats_due)
        self.timer = self._throttle.timer
        self._connect_model(model)

    def set_model(self, model: MonitorModel) -> None:
        self.model = model
        self.table_model.model = model
        self._connect_model(model)
        self.refresh()

    def set_notes(self, provider: NotesProvider | None) -> None:
        """Where the Diagnosis column's notes come from (``DiagnosisModel.rank_notes``)."""
        self.table_model.notes_provider = provider
        self._throttle.mark_dirty()

    def set_bottleneck(self, provider: BottleneckProvider | None) -> None:
        """Where the verdict above the bars comes from (``DiagnosisModel.bottleneck``)."""
        self.bottleneck_provider = provider
        self._throttle.mark_dirty()

    def _connect_model(self, model: MonitorModel) -> None:
        self._throttle.watch(model.ranks_changed, model.nodes_changed, model.reset)

    def _on_sort_changed(self, column: int, _order: Qt.SortOrder) -> None:
        self.separators.enabled = column == NODE_COLUMN and not self.view.isColumnHidden(NODE_COLUMN)
        self.view.viewport().update()

    def mark_dirty(self) -> None:
        """Redraw on the next tick (the notes changed)."""
        self._throttle.mark_dirty()

    def _heartbeats_due(self) -> bool:
        """While live, redraw at least once a second even when nothing changed: heartbeat ages tick."""
        live = not self.model.finished and bool(self.model.ranks)
        return live and time.monotonic() - self._last_refresh >= 1.0

    def refresh(self, now: float | None = None) -> None:
        self._throttle.mark_clean()
        self._last_refresh = time.monotonic()
        self.table_model.refresh(now)
        if not self.proxy.rank_filter.empty:
            self.proxy.refilter()  # states and notes change as the run goes
            self._update_filter_count()
        self._update_node_column()
        self._update_strip()

    def _update_strip(self) -> None:
        """The legend once a rank measured its phases; the verdict once there is one."""
        phases = self.table_model.phases()
        measured = any(row.measured for row in phases)
        self.legend.set_clock(clocks_text(phases))
        self.legend.setVisible(measured)
        verdict = self.bottleneck_provider() if self.bottleneck_provider is not None else None
        text = verdict_text(verdict)
        if text != self.verdict:
            self.verdict = text
            self.verdict_label.setText(verdict_html(verdict))
            self.verdict_label.setToolTip(verdict.rank_verdicts_text() if verdict is not None else "")
        self.verdict_label.setVisible(bool(text))
        self.strip.setVisible(measured or bool(text))

    verdict = ""
    """The verdict above the bars, as plain text (:func:`verdict_text`)."""

    def _update_node_column(self) -> None:
        several = is_multi_node(self.model)
        if several == self.view.isColumnHidden(NODE_COLUMN):
            self.view.setColumnHidden(NODE_COLUMN, not several)
            self._on_sort_changed(self.view.horizontalHeader().sortIndicatorSection(),
                                  self.view.horizontalHeader().sortIndicatorOrder())

    def set_filter(self, text: str) -> None:
        """Show only the rows ``text`` asks for (``gui.models.rank_filter``)."""
        self.proxy.set_filter(RankFilter.parse(text))
        self._update_filter_count()

    def _update_filter_count(self) -> None:
        shown, total = self.proxy.rowCount(), self.table_model.rowCount()
        self.filter_count.setText("" if self.proxy.rank_filter.empty else f"{shown:,} of {total:,} ranks")

    def visible_ranks(self) -> list[int]:
        """The ranks in the order the table shows them (after sorting)."""
        ranks = []
        for row in range(self.proxy.rowCount()):
            source = self.proxy.mapToSource(self.proxy.index(row, 0))
            ranks.append(self.table_model.rows[source.row()].rank)  # a shown row maps to a source row
        return ranks

    def cell_text(self, rank: int, column: str) -> str:
        """The text shown for ``rank`` in ``column`` (a header name)."""
        for row in range(self.table_model.rowCount()):
            if self.table_model.rank_at(row) == rank:
                index = self.table_model.index(row, RANK_COLUMNS.index(column))
                return self.table_model.data(index) or ""
        raise KeyError(f"no row for rank {rank}")

    def row_brush(self, rank: int) -> QBrush | None:
        for row in range(self.table_model.rowCount()):
            if self.table_model.rank_at(row) == rank:
                return self.table_model.data(self.table_model.index(row, 0), Qt.ItemDataRole.BackgroundRole)
        raise KeyError(f"no row for rank {rank}")

    def selected_ranks(self) -> frozenset[int]:
        selection = self.view.selectionModel()
        if selection is None:
            return frozenset()
        ranks = (self.table_model.rank_at(self.proxy.mapToSource(index).row()) for index in selection.selectedRows())
        return frozenset(rank for rank in ranks if rank is not None)

    def _on_selection_changed(self, *_args: object) -> None:
        self.selection_changed.emit(self.selected_ranks())

    def _on_double_clicked(self, index: QModelIndex) -> None:
        source = self.proxy.mapToSource(index)
        rank = self.table_model.rank_at(source.row())
        if rank is not None:
            self.rank_activated.emit(int(rank))


def verdict_text(verdict: Bottleneck | None) -> str:
    """``Bottleneck (live, last 10 timed steps): input-bound: waiting for data ... → feed it ...``."""
    if verdict is None:
        return ""
    text = f"Bottleneck ({verdict.scope}): {verdict.title}"
    if verdict.short_evidence:
        text += f": {verdict.short_evidence}"
    return f"{text} → {verdict.action}" if verdict.action else text


def verdict_html(verdict: Bottleneck | None) -> str:
    """:func:`verdict_text` with its verdict in bold (its colour: amber when worth acting on)."""
    if verdict is None:
        return ""
    color = STATE_COLORS[RankState.STALLED.value] if verdict.problem else STATE_COLORS[RankState.EXITED.value]
    html = (f'<span style="color:{color.name()}">&#9679;</span> '
            f"<b>Bottleneck ({escape(verdict.scope)}): {escape(verdict.title)}</b>")
    if verdict.short_evidence:
        html += f": {escape(verdict.short_evidence)}"
    return f"{html} → <i>{escape(verdict.action)}</i>" if verdict.action else html
