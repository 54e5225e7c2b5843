"""The diagnosis panel: the rank that failed first and why, every rank's fate, hints, findings.

Left: the first failure as triage named it (rank, host, exit code or signal by
name, how it is known, the exception line and the traceback in monospace, the
kernel's OOM-killer line when there is one). Right: the run's bottleneck verdict
(live, or the whole run's once it ended: the verdict, its evidence, the one thing
to do, and each rank's own verdict when they differ), the hints (cause -> advice),
how every rank ended, and what the monitors found while the run went on (stalls,
stragglers, divergences, stack captures, lost nodes). Everything comes from
:class:`~gui.models.diagnosis.DiagnosisModel`; the panel redraws on a timer when
the model changed, never per message.
"""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QBrush, QColor, QFont, QFontDatabase, QShowEvent
from PySide6.QtWidgets import (
    QAbstractItemView,
    QFormLayout,
    QGroupBox,
    QHeaderView,
    QLabel,
    QPlainTextEdit,
    QSizePolicy,
    QSplitter,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from gui.gateway.runner_rules import RankState
from gui.gateway.wording import RunWording
from gui.models.diagnosis import (
    ERROR,
    INFO,
    WARNING,
    DiagnosisModel,
    clock,
)
from gui.widgets.failure_banner import level_color
from gui.widgets.rank_table import STATE_COLORS, state_tint
from gui.widgets.throttled import RefreshThrottle
from rankwatch.protocol import EventKind

RANK_HEADERS = ("Rank", "Host", "State", "How it ended", "Detail")
FINDING_HEADERS = ("Time", "Finding", "Rank", "What")
FINDING_NAMES = {EventKind.STALLED.value: "stalled", EventKind.STRAGGLER.value: "straggler",
                 EventKind.DIVERGENCE.value: "divergence", EventKind.STACKS.value: "stacks",
                 EventKind.NODE_LOST.value: "node lost", EventKind.LAUNCH_MISMATCH.value: "launcher mismatch"}
"""How the findings table names each kind of finding (every kind the model notes)."""


def _wrapping_label(text: str = "") -> QLabel:
    label = QLabel(text)
    label.setWordWrap(True)
    # A long exception line must wrap, not widen the panel (and squeeze the hints).
    label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
    label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
    return label


def _read_only_table(headers: tuple[str, ...]) -> QTableWidget:
    table = QTableWidget(0, len(headers))
    table.setHorizontalHeaderLabels(list(headers))
    table.verticalHeader().setVisible(False)
    table.verticalHeader().setDefaultSectionSize(22)
    table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
    table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
    table.setWordWrap(False)
    header = table.horizontalHeader()
    header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
    header.setStretchLastSection(True)
    return table


class DiagnosisPanel(QWidget):
    """What went wrong in the watched run, and where."""

    def __init__(self, diagnosis: DiagnosisModel, parent: QWidget | None = None, refresh_hz: float = 2.0) -> None:
        super().__init__(parent)
        self.diagnosis = diagnosis
        self.show_headline = False
        """Repeat the banner's line at the top (off inside the monitor, where the banner is shown)."""
        monospace = QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont)

        self.headline = _wrapping_label()
        headline_font = QFont(self.font())
        headline_font.setBold(True)
        headline_font.setPointSizeF(headline_font.pointSizeF() * 1.1)
        self.headline.setFont(headline_font)
        self.empty = _wrapping_label("Nothing to diagnose: no rank failed, stalled, straggled or diverged.")
        self.empty.setObjectName("hint")

        # Left: the first failure.
        self.first_group = QGroupBox("First failure")
        form = QFormLayout(self.first_group)
        form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.AllNonFixedFieldsGrow)
        self.rank_value = _wrapping_label()
        self.rank_value.setFont(headline_font)
        self.how_value = _wrapping_label()
        self.evidence_value = _wrapping_label()
        self.when_value = _wrapping_label()
        self.exception_value = _wrapping_label()
        self.exception_value.setFont(monospace)
        self.kernel_value = _wrapping_label()
        self.kernel_value.setFont(monospace)
        self.traceback_view = QPlainTextEdit()
        self.traceback_view.setReadOnly(True)
        self.traceback_view.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
        self.traceback_view.setFont(monospace)
        self.traceback_view.setMinimumHeight(90)
        self.traceback_label = QLabel("Traceback")
        form.addRow("Rank", self.rank_value)
        form.addRow("Ended by", self.how_value)
        form.addRow("Known from", self.evidence_value)
        form.addRow("When", self.when_value)
        form.addRow("Exception", self.exception_value)
        form.addRow("Kernel log", self.kernel_value)
        form.addRow(self.traceback_label, self.traceback_view)
        self._form = form

        # Right: the bottleneck, hints, every rank, findings.
        self.bottleneck_group = QGroupBox("Bottleneck")
        bottleneck_form = QFormLayout(self.bottleneck_group)
        bottleneck_form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.AllNonFixedFieldsGrow)
        self.verdict_value = _wrapping_label()
        self.verdict_value.setTextFormat(Qt.TextFormat.RichText)
        self.verdict_value.setFont(headline_font)
        self.evidence_value_bottleneck = _wrapping_label()
        self.action_value = _wrapping_label()
        self.rank_verdicts_value = _wrapping_label()
        bottleneck_form.addRow("Verdict", self.verdict_value)
        bottleneck_form.addRow("Evidence", self.evidence_value_bottleneck)
        bottleneck_form.addRow("To do", self.action_value)
        bottleneck_form.addRow("Per rank", self.rank_verdicts_value)
        self._bottleneck_form = bottleneck_form
        self.hints_group = QGroupBox("Hints")
        hints_layout = QVBoxLayout(self.hints_group)
        self.hints_label = _wrapping_label()
        self.hints_label.setTextFormat(Qt.TextFormat.RichText)
        hints_layout.addWidget(self.hints_label)
        self.ranks_group = QGroupBox("Every rank")
        ranks_layout = QVBoxLayout(self.ranks_group)
        self.ranks_table = _read_only_table(RANK_HEADERS)
        ranks_layout.addWidget(self.ranks_table)
        self.findings_group = QGroupBox("Findings")
        findings_layout = QVBoxLayout(self.findings_group)
        self.findings_table = _read_only_table(FINDING_HEADERS)
        findings_layout.addWidget(self.findings_table)

        right = QWidget()
        right_layout = QVBoxLayout(right)
        right_layout.setContentsMargins(0, 0, 0, 0)
        right_layout.addWidget(self.bottleneck_group)
        right_layout.addWidget(self.hints_group)
        right_layout.addWidget(self.ranks_group, 1)
        right_layout.addWidget(self.findings_group, 1)
        self.splitter = QSplitter(Qt.Orientation.Horizontal)
        self.splitter.addWidget(self.first_group)
        self.splitter.addWidget(right)
        self.splitter.setStretchFactor(0, 3)
        self.splitter.setStretchFactor(1, 2)
        self.splitter.setChildrenCollapsible(False)

        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addWidget(self.headline)
        layout.addWidget(self.empty)
        layout.addWidget(self.splitter, 1)

        self._sized = False
        self._throttle = RefreshThrottle(self, self.refresh, refresh_hz, only_when_visible=True)
        self.timer = self._throttle.timer
        self._throttle.watch(diagnosis.changed, diagnosis.monitor.ranks_changed)
        self.refresh()

    def showEvent(self, event: QShowEvent) -> None:
        super().showEvent(event)  # changes made while hidden are drawn already (RefreshThrottle)
        if not self._sized and self.splitter.width() > 0:
            self._sized = True  # 3:2, whatever the texts' natural widths; the user may drag it later
            width = self.splitter.width()
            self.splitter.setSizes([width * 3 // 5, width - width * 3 // 5])

    # ---- drawing ---------------------------------------------------------------------

    def refresh(self) -> None:
        self._throttle.mark_clean()
        diagnosis = self.diagnosis
        banner = diagnosis.banner()
        self.headline.setText(banner.text if banner is not None else "")
        self.headline.setVisible(banner is not None and self.show_headline)
        if banner is not None:
            self.headline.setStyleSheet(f"color: {level_color(banner.level).name()};")
        self._update_first_failure()
        self._update_bottleneck()
        self._update_hints()
        self._update_ranks()
        self._update_findings()
        anything = (banner is not None or diagnosis.first_failure is not None or bool(diagnosis.findings())
                    or diagnosis.bottleneck is not None)
        self.empty.setVisible(not anything)

    def _set_row(self, widget: QWidget, text: str | None) -> None:
        self._form.setRowVisible(widget, bool(text))
        if isinstance(widget, QLabel):
            widget.setText(text or "")

    def _update_first_failure(self) -> None:
        first = self.diagnosis.first_failure
        self.first_group.setVisible(first is not None)
        if first is None:
            return
        pid = f" (pid {first.pid})" if first.pid is not None else ""
        self.rank_value.setText(f"{first.who}{pid}")
        self.rank_value.setStyleSheet(f"color: {STATE_COLORS[RankState.FAILED.value].name()};")
        self._set_row(self.how_value, RunWording.failure_end(first))
        self._set_row(self.evidence_value, RunWording.evidence(first.evidence))
        self._set_row(self.when_value, clock(first.when))
        self._set_row(self.exception_value, first.exception_line)
        self._set_row(self.kernel_value, first.kernel_log)
        self._form.setRowVisible(self.traceback_view, bool(first.traceback))
        source = RunWording.traceback_source(first.traceback_source)
        self.traceback_label.setText("Traceback" + (f"\n({source})" if source else ""))
        if self.traceback_view.toPlainText() != (first.traceback or "").rstrip():
            self.traceback_view.setPlainText((first.traceback or "").rstrip())
            bar = self.traceback_view.verticalScrollBar()
            bar.setValue(bar.maximum())  # the raising line is at the end

    def _update_bottleneck(self) -> None:
        verdict = self.diagnosis.bottleneck
        self.bottleneck_group.setVisible(verdict is not None)
        if verdict is None:
            return
        self.bottleneck_group.setTitle(f"Bottleneck ({verdict.scope})")
        mark = level_color(WARNING if verdict.problem else INFO).name()
        self.verdict_value.setText(f'<span style="color:{mark}">&#9679;</span> {_escape(verdict.title)}')
        evidence = verdict.evidence
        self._bottleneck_form.setRowVisible(self.evidence_value_bottleneck, bool(evidence))
        self.evidence_value_bottleneck.setText(evidence)
        self._bottleneck_form.setRowVisible(self.action_value, bool(verdict.action))
        self.action_value.setText(f"→ {verdict.action}" if verdict.action else "")
        per_rank = verdict.rank_verdicts_text()
        self._bottleneck_form.setRowVisible(self.rank_verdicts_value, bool(per_rank))
        self.rank_verdicts_value.setText(per_rank)

    def bottleneck_text(self) -> str:
        """Everything the bottleneck box says, one field per line (empty when it is hidden)."""
        if self.diagnosis.bottleneck is None:
            return ""
        verdict = self.diagnosis.bottleneck
        labels = (self.evidence_value_bottleneck, self.action_value, self.rank_verdicts_value)
        return "\n".join([self.bottleneck_group.title(), verdict.title, *(label.text() for label in labels if label.text())])

    def _update_hints(self) -> None:
        hints = self.diagnosis.hints
        self.hints_group.setVisible(bool(hints))
        parts = [f"<p><b>{_escape(hint.cause)}</b><br>→ {_escape(hint.advice)}</p>" for hint in hints]
        self.hints_label.setText("".join(parts))

    def _update_ranks(self) -> None:
        lines = self.diagnosis.rank_lines()
        show = bool(lines) and (self.diagnosis.summary is not None or any(line.fate for line in lines))
        self.ranks_group.setVisible(show)
        table = self.ranks_table
        table.setRowCount(len(lines))
        bold = QFont(self.font())
        bold.setBold(True)
        for row, line in enumerate(lines):
            texts = (line.label, line.host, line.state, line.fate, line.detail)
            tint = state_tint(line.state)
            for column, text in enumerate(texts):
                item = QTableWidgetItem(text)
                item.setToolTip(text)
                if tint is not None:
                    item.setBackground(QBrush(tint))
                if line.first:
                    item.setFont(bold)
                table.setItem(row, column, item)

    def _update_findings(self) -> None:
        findings = self.diagnosis.finding_rows()
        self.findings_group.setVisible(bool(findings))
        table = self.findings_table
        table.setRowCount(len(findings))
        for row, finding in enumerate(findings):
            rank = (finding.ranks and RunWording.rank_numbers(finding.ranks)) or ("" if finding.rank is None
                                                                                 else str(finding.rank))
            texts = (clock(finding.t), FINDING_NAMES.get(finding.kind, finding.kind), rank, finding.text)
            color = level_color(ERROR if finding.kind == EventKind.NODE_LOST.value else "warning")
            for column, text in enumerate(texts):
                item = QTableWidgetItem(text)
                item.setToolTip(finding.text)
                if finding.active:
                    item.setBackground(QBrush(QColor(color.red(), color.green(), color.blue(), 60)))
                table.setItem(row, column, item)

    # ---- for tests and the window ------------------------------------------------------

    def first_failure_text(self) -> str:
        """Everything the first-failure box says, one field per line."""
        if not self.first_group.isVisible() and self.diagnosis.first_failure is None:
            return ""
        fields = [self.rank_value, self.how_value, self.evidence_value, self.exception_value, self.kernel_value]
        return "\n".join(label.text() for label in fields if label.text())

    def hint_texts(self) -> list[str]:
        return [hint.text for hint in self.diagnosis.hints]

    def table_texts(self, table: QTableWidget) -> list[list[str]]:
        return [[item.text() if (item := table.item(row, column)) else ""
                 for column in range(table.columnCount())] for row in range(table.rowCount())]


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")

