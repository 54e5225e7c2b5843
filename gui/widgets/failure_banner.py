"""The one-line banner at the top of the monitor: why the run failed, or what is wrong now.

It shows a :class:`~gui.models.diagnosis.Banner` (level, text): red for a failure
("rank 1 on node-a failed first (exit code 1): ValueError: ..."), amber for a
stall, a straggler or a divergence. The line is elided to the width; the whole
text is in the tooltip and in the diagnosis panel, which the Details toggle opens.

Its row is kept while it is hidden: a banner that appears at the end of a run (or when a
rank fails) must not push the charts and tables down under the person's mouse. The monitor's
passing notices ("Run 4 finished successfully.", "Attaching to run 4…") use the same row, as a
:data:`NOTICE` banner without Details, when the diagnosis has nothing to say.
"""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QColor, QFont, QResizeEvent
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QSizePolicy, QToolButton, QWidget

from gui.gateway.runner_rules import RankState
from gui.models.diagnosis import ERROR, INFO, WARNING, Banner
from gui.widgets.rank_table import STATE_COLORS

LEVEL_COLORS = {
    ERROR: STATE_COLORS[RankState.FAILED.value],
    WARNING: STATE_COLORS[RankState.STALLED.value],
}
INFO_COLOR = STATE_COLORS[RankState.EXITED.value]
LEVEL_MARKS = {ERROR: "✖", WARNING: "▲"}
NOTICE = "notice"
"""The ``kind`` of a banner that only informs (no diagnosis behind it: no Details)."""


def notice(text: str) -> Banner:
    """A passing notice for the banner row."""
    return Banner(INFO, text, NOTICE)


def level_color(level: str) -> QColor:
    return LEVEL_COLORS.get(level, INFO_COLOR)


class FailureBanner(QFrame):
    """The diagnosis banner.

    Signals:
        details_toggled(bool): the Details button was switched on (show the diagnosis) or off.
    """

    details_toggled = Signal(bool)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("failureBanner")
        policy = self.sizePolicy()
        policy.setRetainSizeWhenHidden(True)  # nothing below moves when the banner appears
        policy.setVerticalPolicy(QSizePolicy.Policy.Fixed)
        self.setSizePolicy(policy)
        self.banner: Banner | None = None
        self._full_text = ""
        self.mark = QLabel()
        mark_font = QFont(self.font())
        mark_font.setBold(True)
        self.mark.setFont(mark_font)
        self.label = QLabel()
        self.label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        label_font = QFont(self.font())
        label_font.setBold(True)
        self.label.setFont(label_font)
        self.more = QLabel()
        self.details_button = QToolButton()
        self.details_button.setText("Details")
        self.details_button.setCheckable(True)
        self.details_button.setToolTip("Show the diagnosis: the failing rank, its traceback, hints and findings")
        self.details_button.toggled.connect(self.details_toggled)
        button_policy = self.details_button.sizePolicy()
        button_policy.setRetainSizeWhenHidden(True)  # a notice's row is as tall as a diagnosis's
        self.details_button.setSizePolicy(button_policy)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(8, 3, 4, 3)
        layout.setSpacing(8)
        layout.addWidget(self.mark)
        layout.addWidget(self.label, 1)
        layout.addWidget(self.more)
        layout.addWidget(self.details_button)
        self.hide()

    def text(self) -> str:
        """The whole banner line (the label may show it elided)."""
        return self._full_text

    def show_banner(self, banner: Banner | None) -> None:
        """Show ``banner``, or hide when there is nothing to say."""
        if banner == self.banner:
            return
        self.banner = banner
        if banner is None:
            self._full_text = ""
            self.hide()
            return
        self._full_text = banner.text
        color = level_color(banner.level)
        self.mark.setText(LEVEL_MARKS.get(banner.level, "●"))
        self.mark.setStyleSheet(f"color: {color.name()};")
        self.setStyleSheet(
            f"QFrame#failureBanner {{ border-left: 5px solid {color.name()}; "
            f"background: rgba({color.red()},{color.green()},{color.blue()},{55 if banner.level == ERROR else 40}); }}")
        self.more.setText(f"+{banner.more} more" if banner.more else "")
        self.more.setVisible(bool(banner.more))
        self.details_button.setVisible(banner.kind != NOTICE)
        self.label.setToolTip(banner.text)
        self._elide()
        self.show()

    def set_details_shown(self, shown: bool) -> None:
        """Reflect whether the diagnosis is on show, without emitting ``details_toggled``."""
        self.details_button.blockSignals(True)
        self.details_button.setChecked(shown)
        self.details_button.blockSignals(False)

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        self._elide()

    def _elide(self) -> None:
        width = max(40, self.label.width())
        self.label.setText(self.label.fontMetrics().elidedText(self._full_text, Qt.TextElideMode.ElideRight, width))
