"""The stacks view: every rank's Python stack side by side, and who holds up the others.

One column per group of ranks with the same main-thread stack (the ranks and their
role in the column header), oldest call first, rows aligned by call depth. Above
them the verdict: the rank that is in no collective while the others wait in one
is the *culprit* (red), its line marked in its column and spelled out with the
source text below the verdict; ranks that progress are a snapshot, never red. The
layout is :func:`gui.models.stacks.layout_capture`'s.

The monitor's Dump stacks button asks the runner for a capture (``set_waiting``);
the capture arrives as a ``stacks`` event and replaces the view. Without a capture
the view says why there is none: press Dump stacks while the run is live, or --
for a run that ended (``set_live(False)``) -- that none was taken.

A double-click on a frame (or Enter on it) asks to open its ``file:line`` in the editor
(``open_requested``; the window hands it to ``gui.editor_link``).
"""

from __future__ import annotations

from collections.abc import Mapping

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QBrush, QColor, QFont, QFontDatabase
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHeaderView,
    QLabel,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from gui.editor_link import SourceLocation
from gui.gateway.findings import CaptureRecord
from gui.gateway.runner_rules import RankState
from gui.models.stacks import (
    CULPRIT,
    ERROR,
    PROGRESSING,
    WAITING,
    WARNING,
    StacksLayout,
    layout_capture,
)
from gui.widgets.rank_table import STATE_COLORS

CULPRIT_COLOR = STATE_COLORS[RankState.FAILED.value]
WAITING_COLOR = STATE_COLORS[RankState.STALLED.value]
PROGRESSING_COLOR = STATE_COLORS[RankState.RUNNING.value]
LEVEL_COLORS = {ERROR: CULPRIT_COLOR, WARNING: WAITING_COLOR}
MARKS = {CULPRIT: "  ◀ stuck here", WAITING: "  ◀ waits here"}
CULPRIT_MARK = MARKS[CULPRIT]
LOCATION_ROLE = Qt.ItemDataRole.UserRole + 1
"""A frame cell's ``SourceLocation`` (what a double-click opens)."""
NO_CAPTURE = ("No stack capture yet. Press Dump stacks to see where every rank is now; one is also taken "
              "automatically when ranks stall.")
NO_CAPTURE_ENDED = ("This run has no stack capture: Rankwatch captures every rank's stack when a rank stalls "
                    "(that needs step telemetry) or when Dump stacks is pressed while the run is live, and neither "
                    "happened. Stacks cannot be taken after the ranks ended.")


def _tint(color: QColor, alpha: int) -> QBrush:
    return QBrush(QColor(color.red(), color.green(), color.blue(), alpha))


class StacksView(QWidget):
    """The latest stack capture of the watched run.

    Signals:
        open_requested(SourceLocation): a frame was double-clicked: open its file at its line.
    """

    open_requested = Signal(object)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.layout_shown: StacksLayout | None = None
        self.capture: CaptureRecord | None = None
        self.waiting = False
        self.live = True
        """Whether a capture can still be asked for (the run is live); says which empty text to show."""
        self.verdict = QLabel(NO_CAPTURE)
        self.verdict.setWordWrap(True)
        self.verdict.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.details = QLabel()
        self.details.setWordWrap(True)
        self.details.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.details.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        self.heading = QLabel()
        self.heading.setObjectName("hint")
        self.table = QTableWidget(0, 0)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.setWordWrap(False)
        self.table.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        self.table.verticalHeader().setDefaultSectionSize(22)
        self.table.setVerticalScrollMode(QAbstractItemView.ScrollMode.ScrollPerPixel)
        self.table.setHorizontalScrollMode(QAbstractItemView.ScrollMode.ScrollPerPixel)
        self.table.cellDoubleClicked.connect(self._on_cell_activated)
        self.table.cellActivated.connect(self._on_cell_activated)
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        header.setStretchLastSection(True)
        header.setDefaultAlignment(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter)
        self.missing = QLabel()
        self.missing.setWordWrap(True)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.setSpacing(4)
        layout.addWidget(self.verdict)
        layout.addWidget(self.details)
        layout.addWidget(self.heading)
        layout.addWidget(self.table, 1)
        layout.addWidget(self.missing)
        self._bold = QFont(self.table.font())
        self._bold.setBold(True)
        self._update_empty()

    # ---- public ----------------------------------------------------------------------

    def set_live(self, live: bool) -> None:
        """Whether the run is live (Dump stacks can be pressed); changes only what an empty view says."""
        if live != self.live:
            self.live = live
            if self.layout_shown is None:
                self._update_empty()

    def set_waiting(self, waiting: bool = True) -> None:
        """A capture was asked for: say so until it arrives."""
        self.waiting = waiting
        if waiting:
            self.heading.setText("Asked every rank for its stack; waiting for the capture…")
            self.heading.show()
        elif self.layout_shown is not None:
            self.heading.setText(self.layout_shown.heading)
        else:
            self._update_empty()

    def show_capture(self, capture: CaptureRecord | Mapping[str, object] | None) -> None:
        """Draw a capture (``DiagnosisModel.stacks_received``'s; a ``stacks`` event's analysis as JSON is
        read as one); ``None``: no capture yet."""
        self.waiting = False
        if capture is not None and not isinstance(capture, CaptureRecord):
            capture = CaptureRecord.from_wire(capture)
        self.capture = capture
        if capture is None:
            self.layout_shown = None
            self._update_empty()
            return
        layout = layout_capture(capture)
        self.layout_shown = layout
        self._update_table(layout)

    def column_titles(self) -> list[str]:
        headers = (self.table.horizontalHeaderItem(c) for c in range(self.table.columnCount()))
        return [header.text() if header is not None else "" for header in headers]

    def column_frames(self, column: int) -> list[str]:
        """The frame texts of one column, oldest call first (empty cells left out)."""
        texts = []
        for row in range(self.table.rowCount()):
            item = self.table.item(row, column)
            if item is not None and item.text():
                texts.append(item.text())
        return texts

    def marked_cells(self, role: str = CULPRIT) -> list[tuple[int, int, str]]:
        """(row, column, text) of every cell marked as where a group of ``role`` is (a culprit: stuck)."""
        found = []
        for column in range(self.table.columnCount()):
            for row in range(self.table.rowCount()):
                item = self.table.item(row, column)
                if item is not None and item.data(Qt.ItemDataRole.UserRole) == role:
                    found.append((row, column, item.text()))
        return found

    def verdict_color(self) -> str | None:
        """The verdict's colour name (``None``: plain text, for a snapshot of ranks that progress)."""
        color = LEVEL_COLORS.get(self.layout_shown.level) if self.layout_shown is not None else None
        return None if color is None else color.name()

    def frame_location(self, row: int, column: int) -> SourceLocation | None:
        """The source place of the frame in cell (``row``, ``column``); ``None`` for an empty cell
        or a frame whose file is not known."""
        item = self.table.item(row, column)
        location = None if item is None else item.data(LOCATION_ROLE)
        return location if isinstance(location, SourceLocation) else None

    def _on_cell_activated(self, row: int, column: int) -> None:
        location = self.frame_location(row, column)
        if location is not None:
            self.open_requested.emit(location)

    # ---- drawing ---------------------------------------------------------------------

    def _update_empty(self) -> None:
        self.table.clear()
        self.table.setRowCount(0)
        self.table.setColumnCount(0)
        self.verdict.setText(NO_CAPTURE if self.live else NO_CAPTURE_ENDED)
        self.verdict.setStyleSheet("")
        self.details.hide()
        self.heading.setVisible(self.waiting)
        self.missing.hide()

    def _update_table(self, layout: StacksLayout) -> None:
        self.verdict.setText(layout.verdict[:1].upper() + layout.verdict[1:])
        color = self.verdict_color()
        self.verdict.setStyleSheet(f"font-weight: 600; color: {color};" if color else "font-weight: 600;")
        self.details.setText("\n".join(layout.details))
        self.details.setVisible(bool(layout.details))
        self.heading.setText(layout.heading)
        self.heading.setToolTip((self.capture.text_path if self.capture is not None else None) or "")
        self.heading.show()
        table = self.table
        table.clear()
        table.setColumnCount(len(layout.columns))
        table.setRowCount(layout.row_count)
        for column_index, column in enumerate(layout.columns):
            header = QTableWidgetItem(column.title)
            header.setToolTip(f"{len(column.ranks)} rank(s) with this stack: "
                              + ", ".join(map(str, column.ranks)))
            if column.role == CULPRIT:
                header.setFont(self._bold)
                header.setForeground(QBrush(CULPRIT_COLOR))
            table.setHorizontalHeaderItem(column_index, header)
            for row, frame in enumerate(column.frames):
                mark = MARKS.get(column.role, "") if frame.marked else ""
                item = QTableWidgetItem(frame.text + mark)
                tip = f"{frame.full_location} in {frame.function}" + (f"\n{frame.code}" if frame.code else "")
                if frame.file and frame.file != "?" and not frame.file.startswith("<"):  # not <frozen ...>
                    item.setData(LOCATION_ROLE, SourceLocation(frame.file, frame.line))
                    tip += "\nDouble-click to open it in your editor"
                item.setToolTip(tip)
                if frame.marked and column.role in MARKS:
                    item.setData(Qt.ItemDataRole.UserRole, column.role)
                    item.setFont(self._bold)
                    item.setBackground(_tint(CULPRIT_COLOR if column.role == CULPRIT else WAITING_COLOR, 90))
                elif column.role == CULPRIT:
                    item.setBackground(_tint(CULPRIT_COLOR, 25))
                elif column.role == PROGRESSING:
                    item.setBackground(_tint(PROGRESSING_COLOR, 20))
                table.setItem(row, column_index, item)
        table.setVerticalHeaderLabels([str(depth) for depth in range(layout.row_count)])
        first = next(((row, column) for row, column, _text in self.marked_cells()), None)
        first_item = table.item(*first) if first is not None else None
        if first_item is not None:
            table.scrollToItem(first_item, QAbstractItemView.ScrollHint.EnsureVisible)
        if layout.missing:
            self.missing.setText("No stack from " + "; ".join(f"rank {rank}: {why}" for rank, why in layout.missing))
            self.missing.show()
        else:
            self.missing.hide()
