"""Where each rank's step goes, drawn: a stacked bar per rank and the legend above them.

The rank table's ``Where the step goes`` column draws each rank's phases
(:class:`~gui.models.phases.RankPhases`) as one horizontal bar, a colour per phase in
``PHASES`` order (the terminal's ``runner.view.phase_bars`` order), so a straggler stands
out down the column: its forward or backward wider, the other ranks' comm wider. A phase
that was not measured has no segment; a rank without a measured step has no bar ("–").

Colours are the Okabe-Ito palette (told apart with the common colour-vision deficiencies):
the waits warm (data orange, comm vermillion), the compute cool (h2d sky, forward blue,
backward green), the optimizer purple, the rest grey. A segment wide enough is labelled
with its percentage, in black or white, whichever reads on its colour.
"""

from __future__ import annotations

from PySide6.QtCore import QRect, Qt
from PySide6.QtGui import QColor, QFont, QPainter, QPalette, QPen
from PySide6.QtWidgets import QLabel, QSizePolicy, QWidget

from gui.models.phases import PHASE_WORDS, PHASES, RankPhases

PHASE_COLORS: dict[str, QColor] = {
    "data": QColor("#E69F00"),
    "h2d": QColor("#56B4E9"),
    "forward": QColor("#0072B2"),
    "backward": QColor("#009E73"),
    "comm": QColor("#D55E00"),
    "optimizer": QColor("#CC79A7"),
    "rest": QColor("#B4B4B4"),
}
"""One colour per phase (``protocol.PHASES``)."""
BAR_WIDTH = 260
"""The bar column's width (pixels) before the table stretches it."""
LABEL_MIN_WIDTH = 30
"""Segments narrower than this carry no percentage (the tooltip has every figure)."""


def text_color_on(color: QColor) -> QColor:
    """Black or white, whichever contrasts more with ``color`` (its relative luminance)."""
    def linear(channel: float) -> float:
        return channel / 12.92 if channel <= 0.04045 else ((channel + 0.055) / 1.055) ** 2.4

    luminance = 0.2126 * linear(color.redF()) + 0.7152 * linear(color.greenF()) + 0.0722 * linear(color.blueF())
    return QColor(Qt.GlobalColor.black) if luminance > 0.22 else QColor(Qt.GlobalColor.white)


def segment_rects(phases: RankPhases, rect: QRect) -> list[tuple[str, QRect]]:
    """Each segment's rectangle inside ``rect``: edges rounded from the cumulative shares, so the
    segments tile the bar exactly (no gap, no overlap, whatever the rounding)."""
    rects = []
    left, width = rect.left(), rect.width()
    for segment in phases.segments():
        x0 = left + round(segment.start * width)
        x1 = left + round((segment.start + segment.width) * width)
        if x1 > x0:
            rects.append((segment.phase, QRect(x0, rect.top(), x1 - x0, rect.height())))
    return rects


def paint_phase_bar(painter: QPainter, rect: QRect, phases: RankPhases, palette: QPalette) -> None:
    """Draw ``phases`` as a stacked bar filling ``rect``."""
    painter.save()
    painter.setRenderHint(QPainter.RenderHint.Antialiasing, False)
    label_font = QFont(painter.font())
    label_font.setPointSizeF(max(6.0, label_font.pointSizeF() * 0.85))
    painter.setFont(label_font)
    metrics = painter.fontMetrics()
    for phase, box in segment_rects(phases, rect):
        color = PHASE_COLORS[phase]
        painter.fillRect(box, color)
        share = phases.share(phase)
        if share is not None and box.width() >= LABEL_MIN_WIDTH:
            label = f"{100.0 * share:.0f}%"
            if metrics.horizontalAdvance(label) + 4 <= box.width():
                painter.setPen(text_color_on(color))
                painter.drawText(box, int(Qt.AlignmentFlag.AlignCenter), label)
    outline = QColor(palette.color(QPalette.ColorRole.Text))
    outline.setAlpha(90)
    painter.setPen(QPen(outline, 1))
    painter.setBrush(Qt.BrushStyle.NoBrush)
    painter.drawRect(rect.adjusted(0, 0, -1, -1))
    painter.restore()


def legend_html(clock_text: str = "") -> str:
    """``Where the step goes, on the CPU clock: ■ data ■ h2d ...``, each square in its phase's colour."""
    on = f", on the {clock_text}" if clock_text else ""
    swatches = "&nbsp;&nbsp;".join(f'<span style="color:{PHASE_COLORS[phase].name()}">&#9632;</span>&nbsp;{phase}'
                                   for phase in PHASES)
    return f"<b>Where the step goes</b>{on}:&nbsp;&nbsp;{swatches}"


def legend_tooltip() -> str:
    return "\n".join(f"{phase}: {PHASE_WORDS[phase]}" for phase in PHASES)


class PhaseLegend(QLabel):
    """The legend of the bar column: each phase's colour, and the clock the phases were timed on."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setTextFormat(Qt.TextFormat.RichText)
        self.setToolTip(legend_tooltip())
        self.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.clock_text = ""
        self.setText(legend_html())

    def set_clock(self, clock_text: str) -> None:
        if clock_text != self.clock_text:
            self.clock_text = clock_text
            self.setText(legend_html(clock_text))
