"""The log view: every rank's output (or one rank's), searchable, following the tail.

Memory stays bounded: the model keeps the last ``LOG_LIMIT`` lines (older ones
stay in the store, which the footer says), and the text widget holds at most as
many blocks. New lines are appended in one batch per refresh (a timer, not per
message); changing the rank or the search text redraws from the model's buffer.

Every line is tagged with its rank and, when the runner knows it, the host of its
node (``[node2 r5] ...``; torch's own ``[rankN]:`` prefix is dropped, it would say
the rank twice); with lines from several hosts a node filter appears.

Search (Ctrl+F in the monitor) keeps the lines that contain the text, highlights
every occurrence and says how many lines match.

A traceback's ``File "x.py", line N`` is drawn as a link: a click on it (or a double-click
anywhere on its line) asks to open that place in the editor (``open_requested``; the window
hands it to ``gui.editor_link``).
"""

from __future__ import annotations

import re

from PySide6.QtCore import QEvent, QObject, QPoint, Qt, Signal
from PySide6.QtGui import (
    QColor,
    QFontDatabase,
    QMouseEvent,
    QPalette,
    QSyntaxHighlighter,
    QTextCharFormat,
    QTextCursor,
    QTextDocument,
)
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QVBoxLayout,
    QWidget,
)

from gui.editor_link import SourceLocation, traceback_locations
from gui.models.monitor import LogEntry, MonitorModel, format_log_entry, log_text
from gui.models.nodes import log_nodes
from gui.widgets.throttled import RefreshThrottle

MATCH_COLOR = QColor(255, 213, 79, 160)
"""Amber, readable under dark and light text alike."""


class SearchHighlighter(QSyntaxHighlighter):
    """Marks every case-insensitive occurrence of the search text in the shown lines, and draws
    each traceback location (``File "x.py", line N``) as a link."""

    def __init__(self, document: QTextDocument, link_color: QColor | None = None) -> None:
        super().__init__(document)
        self._pattern: re.Pattern[str] | None = None
        self._format = QTextCharFormat()
        self._format.setBackground(MATCH_COLOR)
        self._link_format = QTextCharFormat()
        self._link_format.setFontUnderline(True)
        if link_color is not None:
            self._link_format.setForeground(link_color)

    def set_needle(self, needle: str) -> None:
        pattern = re.compile(re.escape(needle), re.IGNORECASE) if needle else None
        if (pattern and pattern.pattern) != (self._pattern and self._pattern.pattern):
            self._pattern = pattern
            self.rehighlight()

    def highlightBlock(self, text: str) -> None:
        if "File \"" in text:
            for span in traceback_locations(text):
                self.setFormat(span.start, span.end - span.start, self._link_format)
        if self._pattern is None:
            return
        for found in self._pattern.finditer(text):
            self.setFormat(found.start(), found.end() - found.start(), self._format)


ALL_RANKS = "all"
LAUNCHER = "launcher"
ALL_NODES = ""


class LogView(QWidget):
    """Logs of the watched run.

    Signals:
        follow_changed(bool): following the tail was switched on or off.
        open_requested(SourceLocation): a traceback location was clicked: open it in the editor.
    """

    follow_changed = Signal(bool)
    open_requested = Signal(object)

    def __init__(self, model: MonitorModel, parent: QWidget | None = None, refresh_hz: float = 8.0) -> None:
        super().__init__(parent)
        self.model = model
        self.rank_choice = QComboBox()
        self.rank_choice.setMinimumContentsLength(10)
        self.rank_choice.addItem("All ranks", ALL_RANKS)
        self.rank_choice.addItem("Launcher", LAUNCHER)
        self.rank_choice.currentIndexChanged.connect(self._on_filter_changed)
        self.node_choice = QComboBox()
        self.node_choice.setMinimumContentsLength(10)
        self.node_choice.setToolTip("Show the lines of one node (host) only")
        self.node_choice.addItem("All nodes", ALL_NODES)
        self.node_choice.currentIndexChanged.connect(self._on_filter_changed)
        self.node_choice.hide()
        self.search = QLineEdit()
        self.search.setPlaceholderText("Search (Ctrl+F): shows and highlights matching lines")
        self.search.setClearButtonEnabled(True)
        self.search.textChanged.connect(self._on_filter_changed)
        self.follow = QCheckBox("Follow")
        self.follow.setChecked(True)
        self.follow.setToolTip("Keep the newest line in view")
        self.follow.toggled.connect(self._on_follow_toggled)
        self.footer = QLabel()
        self.match_count = QLabel()
        self.match_count.setObjectName("hint")
        self.text = QPlainTextEdit()
        self.text.setReadOnly(True)
        self.text.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
        self.text.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        self.text.setMaximumBlockCount(max(1, model.logs.limit))
        self.text.setUndoRedoEnabled(False)
        self.text.verticalScrollBar().valueChanged.connect(self._on_scrolled)
        self.text.viewport().setMouseTracking(True)
        self.text.viewport().installEventFilter(self)
        self.highlighter = SearchHighlighter(self.text.document(), self.palette().color(QPalette.ColorRole.Link))
        bar = QHBoxLayout()
        bar.setContentsMargins(0, 0, 0, 0)
        bar.addWidget(self.node_choice)
        bar.addWidget(self.rank_choice)
        bar.addWidget(self.search, 1)
        bar.addWidget(self.match_count)
        bar.addWidget(self.follow)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(2)
        layout.addLayout(bar)
        layout.addWidget(self.text, 1)
        layout.addWidget(self.footer)
        self._seen = 0
        self._shown_lines = 0
        self._rebuild_needed = True
        self._known_ranks: set[int] = set()
        self._adjusting_scroll = False
        self._after_double_click = False
        self._throttle = RefreshThrottle(self, self.refresh, refresh_hz)
        self.timer = self._throttle.timer
        self._connect_model(model)

    # ---- traceback locations ---------------------------------------------------------

    def location_at(self, point: QPoint, anywhere_on_line: bool = False) -> SourceLocation | None:
        """The traceback location written at ``point`` of the text's viewport; with
        ``anywhere_on_line``, the one on that line nearest to ``point`` (a line holds one)."""
        cursor = self.text.cursorForPosition(point)
        spans = traceback_locations(cursor.block().text())
        if not spans:
            return None
        column = cursor.positionInBlock()
        for span in spans:
            if span.start <= column <= span.end:
                return span.location
        return spans[0].location if anywhere_on_line else None

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        """A click on a location opens it; a double-click elsewhere on its line too (once: the
        click that starts a double-click on the location has opened it already)."""
        if watched is self.text.viewport() and isinstance(event, QMouseEvent):
            point = event.position().toPoint()
            kind = event.type()
            if kind == QEvent.Type.MouseMove and event.buttons() == Qt.MouseButton.NoButton:
                over = self.location_at(point) is not None
                self.text.viewport().setCursor(Qt.CursorShape.PointingHandCursor if over else Qt.CursorShape.IBeamCursor)
            elif kind == QEvent.Type.MouseButtonRelease and event.button() == Qt.MouseButton.LeftButton:
                if self._after_double_click:
                    self._after_double_click = False
                elif not self.text.textCursor().hasSelection():
                    self._request_open(self.location_at(point))
            elif kind == QEvent.Type.MouseButtonDblClick and event.button() == Qt.MouseButton.LeftButton:
                line_location = self.location_at(point, anywhere_on_line=True)
                if line_location is not None:
                    self._after_double_click = True
                    if self.location_at(point) is None:
                        self._request_open(line_location)
                    return True  # no word selection: the line's location was opened
        return super().eventFilter(watched, event)

    def _request_open(self, location: SourceLocation | None) -> None:
        if location is not None:
            self.open_requested.emit(location)

    # ---- model -----------------------------------------------------------------------

    def set_model(self, model: MonitorModel) -> None:
        self.model = model
        self.text.setMaximumBlockCount(max(1, model.logs.limit))
        self._connect_model(model)
        self._on_model_reset()

    def _connect_model(self, model: MonitorModel) -> None:
        self._throttle.watch(model.logs_added, model.ranks_changed)
        model.reset.connect(self._on_model_reset)

    def _on_model_reset(self) -> None:
        self._rebuild_needed = True
        self._throttle.mark_dirty()
        self._forget_ranks()
        if self.node_choice.count() > 1 and not log_nodes(self.model):
            # Another run: its nodes are not the last one's.
            self.node_choice.blockSignals(True)
            while self.node_choice.count() > 1:
                self.node_choice.removeItem(1)
            self.node_choice.setCurrentIndex(0)
            self.node_choice.blockSignals(False)
            self.node_choice.hide()

    # ---- filter ----------------------------------------------------------------------

    def show_rank(self, rank: int | str) -> None:
        """Show only ``rank`` (or ``"all"``/``"launcher"``)."""
        self._update_rank_choices()
        index = self.rank_choice.findData(rank)
        if index >= 0:
            self.rank_choice.setCurrentIndex(index)

    def show_node(self, host: str) -> None:
        """Show only the lines of node ``host`` (``""``: every node)."""
        self._update_node_choices()
        index = self.node_choice.findData(host)
        if index >= 0:
            self.node_choice.setCurrentIndex(index)

    def set_search(self, text: str) -> None:
        self.search.setText(text)

    def focus_search(self) -> None:
        self.search.setFocus()
        self.search.selectAll()

    def _on_filter_changed(self, *_args: object) -> None:
        self._rebuild_needed = True
        self.refresh()

    def _matches(self, entry: LogEntry, rank: int | str, needle: str, node: str = ALL_NODES) -> bool:
        if node and entry.node != node:
            return False
        if rank == LAUNCHER:
            if entry.rank is not None:
                return False
        elif rank != ALL_RANKS and entry.rank != rank:
            return False
        return not needle or needle in log_text(entry).lower()

    def _forget_ranks(self) -> None:
        """Another run (a snapshot starts the model over): its ranks are not the last one's."""
        kept = self.rank_choice.currentData()
        self.rank_choice.blockSignals(True)
        while self.rank_choice.count() > 2:  # "All ranks", "Launcher"
            self.rank_choice.removeItem(2)
        self._known_ranks = set()
        index = self.rank_choice.findData(kept)
        self.rank_choice.setCurrentIndex(max(0, index))
        self.rank_choice.blockSignals(False)

    def _update_rank_choices(self) -> None:
        ranks = set(self.model.state.rank_set()) | {
            e.rank for e in list(self.model.logs.entries)[-2000:] if e.rank is not None}
        new = sorted(ranks - self._known_ranks)
        if not new:
            return
        self._known_ranks |= set(new)
        self.rank_choice.blockSignals(True)
        for rank in sorted(self._known_ranks):
            if self.rank_choice.findData(rank) < 0:
                # Keep "All ranks", "Launcher" first, then ranks in order.
                position = 2 + sorted(self._known_ranks).index(rank)
                self.rank_choice.insertItem(position, f"Rank {rank}", rank)
        self.rank_choice.blockSignals(False)

    def _update_node_choices(self) -> None:
        labels = log_nodes(self.model)
        known = [self.node_choice.itemData(i) for i in range(1, self.node_choice.count())]
        new = [label for label in labels if label not in known]
        if new:
            self.node_choice.blockSignals(True)
            for label in new:
                self.node_choice.addItem(f"Node {label}", label)
            self.node_choice.blockSignals(False)
        self.node_choice.setVisible(self.node_choice.count() > 2)

    # ---- follow ----------------------------------------------------------------------

    def _on_follow_toggled(self, on: bool) -> None:
        if on:
            self._scroll_to_end()
        self.follow_changed.emit(on)

    def _on_scrolled(self, value: int) -> None:
        if self._adjusting_scroll:
            return
        at_end = value >= self.text.verticalScrollBar().maximum() - 1
        if at_end != self.follow.isChecked():
            self.follow.setChecked(at_end)

    def _scroll_to_end(self) -> None:
        self._adjusting_scroll = True
        try:
            self.text.moveCursor(QTextCursor.MoveOperation.End)
            bar = self.text.verticalScrollBar()
            bar.setValue(bar.maximum())
        finally:
            self._adjusting_scroll = False

    # ---- drawing ---------------------------------------------------------------------

    def refresh(self) -> None:
        self._throttle.mark_clean()
        self._update_rank_choices()
        self._update_node_choices()
        rank = self.rank_choice.currentData()
        node = self.node_choice.currentData() or ALL_NODES
        needle = self.search.text().strip().lower()
        self.highlighter.set_needle(needle)
        logs = self.model.logs
        if self._rebuild_needed:
            entries, complete = list(logs.entries), False
        else:
            entries, complete = logs.since(self._seen)
        self._seen = logs.total
        lines = [format_log_entry(e) for e in entries if self._matches(e, rank, needle, node)]
        scrollbar = self.text.verticalScrollBar()
        keep_position = scrollbar.value()
        self._adjusting_scroll = True
        try:
            if not complete:
                self._rebuild_needed = False
                self.text.setPlainText("\n".join(lines))
                self._shown_lines = len(lines)
            elif lines:
                self.text.appendPlainText("\n".join(lines))
                self._shown_lines += len(lines)
            if not self.follow.isChecked():
                scrollbar.setValue(min(keep_position, scrollbar.maximum()))
        finally:
            self._adjusting_scroll = False
        if self.follow.isChecked():
            self._scroll_to_end()
        self._update_footer()
        self._update_match_count(needle)

    def _update_match_count(self, needle: str) -> None:
        if not needle:
            self.match_count.clear()
            return
        count = self._shown_lines
        self.match_count.setText("no match" if count == 0 else f"{count:,} matching line{'s' if count != 1 else ''}")

    def _update_footer(self) -> None:
        logs = self.model.logs
        text = f"{len(logs.entries):,} lines in memory"
        if logs.dropped:
            text += f"; {logs.dropped:,} older lines are kept in the run store"
        self.footer.setText(text)

    def shown_text(self) -> str:
        return self.text.toPlainText()

    def shown_line_count(self) -> int:
        text = self.text.toPlainText()
        return 0 if not text else text.count("\n") + 1
