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
"""

from __future__ import annotations

import re

from PySide6.QtCore import Signal
from PySide6.QtGui import (
    QColor,
    QFontDatabase,
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

from gui.models.monitor import LogEntry, MonitorModel, format_log_entry, log_text
from gui.models.nodes import log_nodes
from gui.widgets.throttled import RefreshThrottle

MATCH_COLOR = QColor(255, 213, 79, 160)
"""Amber, readable under dark and light text alike."""


class SearchHighlighter(QSyntaxHighlighter):
    """Marks every case-insensitive occurrence of the search text in the shown lines."""

    def __init__(self, document: QTextDocument) -> None:
        super().__init__(document)
        self._pattern: re.Pattern[str] | None = None
        self._format = QTextCharFormat()
        self._format.setBackground(MATCH_COLOR)

    def set_needle(self, needle: str) -> None:
        pattern = re.compile(re.escape(needle), re.IGNORECASE) if needle else None
        if (pattern and pattern.pattern) != (self._pattern and self._pattern.pattern):
            self._pattern = pattern
            self.rehighlight()

    def highlightBlock(self, text: str) -> None:
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
    """

    follow_changed = Signal(bool)

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
        self.highlighter = SearchHighlighter(self.text.document())
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
        self._throttle = RefreshThrottle(self, self.refresh, refresh_hz)
        self.timer = self._throttle.timer
        self._connect_model(model)

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

    def _on_filter_changed(self, *_args) -> None:
        self._rebuild_needed = True
        self.refresh()

    def _matches(self, entry: LogEntry, rank, needle: str, node: str = ALL_NODES) -> bool:
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
