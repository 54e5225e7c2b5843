"""The launch form on a 1280×720 screen: it fits without a horizontal scrollbar, and the
command preview wraps between arguments, never inside one (``--nproc-`` / ``per-node``).
A real window offscreen with the bundled example's form."""

from __future__ import annotations

import shlex

import pytest
from PySide6.QtGui import QFontMetricsF, QGuiApplication
from PySide6.QtWidgets import QMessageBox, QScrollArea

from gui.widgets.command_preview import plain_command, unbreakable_arguments

pytestmark = pytest.mark.gui


@pytest.fixture(autouse=True)
def edits_are_discarded_at_close(monkeypatch):
    """The window asks about the edited form when the test closes it: discard, do not hang."""
    monkeypatch.setattr(QMessageBox, "question", lambda *args, **kwargs: QMessageBox.StandardButton.Discard)
    monkeypatch.setattr(QMessageBox, "exec", lambda self: int(QMessageBox.StandardButton.Cancel))


@pytest.fixture
def window(example_window):
    return example_window


def line_starts(preview) -> list[int]:
    """Where each shown line of the preview starts, as offsets in the shown text."""
    document = preview.text.document()
    starts = []
    block = document.begin()
    while block.isValid():
        layout = block.layout()
        starts.extend(block.position() + layout.lineAt(i).textStart() for i in range(layout.lineCount()))
        block = block.next()
    return starts


def test_the_launch_form_fits_1280_by_720_without_a_horizontal_scrollbar(qtbot, window):
    assert window.size().width() == 1280 or QGuiApplication.primaryScreen().size().width() < 1280
    area = window.launch_panel.findChild(QScrollArea)
    qtbot.waitUntil(lambda: area.viewport().width() > 0, timeout=15_000)
    assert area.widget().minimumSizeHint().width() <= area.viewport().width()
    assert area.horizontalScrollBar().maximum() == 0 and not area.horizontalScrollBar().isVisible()


def test_the_command_preview_wraps_only_between_arguments(qtbot, window):
    preview = window.launch_panel.preview
    window.form.update(args_text="--epochs 3 --learning-rate-warmup-steps 100 --output-dir 'runs/my run'")
    command = preview.command_text()
    assert "--nproc-per-node" in command or "--nproc_per_node" in command
    shown = preview.text.toPlainText()
    assert plain_command(shown) == command
    for width in (1280, *range(420, 1200, 37)):  # the window's own width, and narrower previews
        if width != 1280:
            preview.text.setFixedWidth(width)
        qtbot.wait(1)
        starts = line_starts(preview)
        assert len(starts) > 1, "the command fits one line: nothing is tested"
        line_width = preview.text.viewport().width() - 2 * preview.text.document().documentMargin()
        metrics = QFontMetricsF(preview.text.font())  # fractional: 61 characters of 7.2 px are not 427 px
        for start in starts[1:]:
            if shown[start - 1] == " ":
                continue  # between arguments
            # Inside an argument only when that argument alone is wider than a line (a long path).
            word = plain_command(shown[shown.rfind(" ", 0, start) + 1:shown.find(" ", start) % (len(shown) + 1)])
            assert metrics.horizontalAdvance(word) > line_width, (width, word)


def test_the_shown_command_splits_into_the_same_arguments():
    command = "cd '/my dir' && OMP_NUM_THREADS=1 python -m torch.distributed.run --nproc-per-node=2 x.py 'a '\"'\"'b'"
    shown = unbreakable_arguments(command)
    assert plain_command(shown) == command
    assert shown.count(" ") == len(shlex.split(command)) - 1  # a breakable space only between arguments


def test_a_first_window_fits_the_screens_free_area():
    from PySide6.QtCore import QSize

    from gui.main_window import DEFAULT_SIZE, first_size
    assert first_size(QSize(1280, 690)) == (1280, 690)  # a 1280x720 screen less its panel
    assert first_size(QSize(1920, 1050)) == DEFAULT_SIZE
