"""The live torchrun command preview: one node's command, read-only, with Copy.

The text is ``NodeCommand.shell_text()`` from ``runner.launch.command`` (through the
form model), character for character: what you copy is what the runner runs,
minus the monitoring it adds.

Long commands wrap between arguments only: ``--nproc-per-node=4`` is never cut after
``--nproc-``. The shown text joins each argument's characters with WORD JOINER (and a space
inside quotes becomes a no-break space); copying, by the button or by selection, gives the
command back as it is.
"""

from __future__ import annotations

from PySide6.QtCore import QMimeData, Qt, QTimer
from PySide6.QtGui import QFontDatabase, QGuiApplication, QTextOption
from PySide6.QtWidgets import (
    QComboBox,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from gui.models.launch_form import Evaluation, LaunchFormModel

NO_COMMAND = "# The command appears here once the form is valid."
WORD_JOINER = "\u2060"
NO_BREAK_SPACE = "\u00a0"


def unbreakable_arguments(command: str) -> str:
    """``command`` shown so that a line breaks only between its shell words.

    Inside a word (outside and inside quotes) every character is joined to the next with a
    WORD JOINER, and a quoted space becomes a no-break space; an unquoted space still separates
    words. :func:`plain_command` undoes it."""
    shown: list[str] = []
    quote: str | None = None
    for index, char in enumerate(command):
        if quote is None and char in "'\"":
            quote = char
        elif char == quote:
            quote = None
        if char == " " and quote is None:
            shown.append(char)
            continue
        shown.append(NO_BREAK_SPACE if char == " " else char)
        following = command[index + 1] if index + 1 < len(command) else " "
        if following != " " or quote is not None:
            shown.append(WORD_JOINER)
    return "".join(shown)


def plain_command(shown: str) -> str:
    """The command as the shell reads it, from its shown form (for copying a selection)."""
    return shown.replace(WORD_JOINER, "").replace(NO_BREAK_SPACE, " ")


class CommandText(QPlainTextEdit):
    """A read-only command view whose copied selection is the real command text."""

    def createMimeDataFromSelection(self) -> QMimeData:
        data = QMimeData()
        data.setText(plain_command(self.textCursor().selectedText()))
        return data


class CommandPreviewPanel(QWidget):
    """Shows the command of the node picked in the node box (hidden for one node)."""

    def __init__(self, model: LaunchFormModel, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._model = model
        self._commands: list[str] = []

        self.title = QLabel("torchrun command")
        self.title.setObjectName("sectionTitle")
        self.picks = QLabel()
        self.picks.setObjectName("hint")
        self.node_box = QComboBox()
        self.node_box.setToolTip("Which node's command to show: run each on its node")
        self.node_box.currentIndexChanged.connect(self._on_node_picked)
        self.copy_button = QPushButton("Copy")
        self.copy_button.setToolTip("Copy this command to the clipboard")
        self.copy_button.clicked.connect(self._on_copy_clicked)
        self.text = CommandText()
        self.text.setObjectName("commandPreview")
        self.text.setReadOnly(True)
        self.text.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        self.text.setWordWrapMode(QTextOption.WrapMode.WrapAtWordBoundaryOrAnywhere)
        self.text.setLineWrapMode(QPlainTextEdit.LineWrapMode.WidgetWidth)
        self.text.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse
                                          | Qt.TextInteractionFlag.TextSelectableByKeyboard)
        line = self.text.fontMetrics().lineSpacing()
        self.text.setFixedHeight(line * 4 + 12)

        header = QHBoxLayout()
        header.setContentsMargins(0, 0, 0, 0)
        header.addWidget(self.title)
        header.addSpacing(8)
        header.addWidget(self.picks)
        header.addStretch(1)
        header.addWidget(self.node_box)
        header.addWidget(self.copy_button)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(4)
        layout.addLayout(header)
        layout.addWidget(self.text)

        model.evaluated.connect(self._on_evaluated)
        self._on_evaluated(model.evaluation)

    def command_text(self, node_index: int | None = None) -> str:
        """The shown command of node ``node_index`` (default: the picked one); empty if none."""
        index = self.node_box.currentIndex() if node_index is None else node_index
        return self._commands[index] if 0 <= index < len(self._commands) else ""

    def _on_evaluated(self, evaluation: Evaluation) -> None:
        labels = [command.label for command in evaluation.commands]
        self._commands = [command.text for command in evaluation.commands]
        current = max(0, self.node_box.currentIndex())
        if labels != [self.node_box.itemText(i) for i in range(self.node_box.count())]:
            self.node_box.blockSignals(True)
            self.node_box.clear()
            self.node_box.addItems(labels)
            self.node_box.setCurrentIndex(min(current, len(labels) - 1))
            self.node_box.blockSignals(False)
        self.node_box.setVisible(len(labels) > 1)
        self.copy_button.setEnabled(bool(self._commands))
        picks = ", ".join(evaluation.picked_at_launch)
        self.picks.setText(f"({picks}: a fresh pick at each launch)" if picks else "")
        self._update_text()

    def _on_node_picked(self, _index: int) -> None:
        self._update_text()

    def _update_text(self) -> None:
        command = self.command_text()
        self.text.setPlainText(unbreakable_arguments(command) if command else NO_COMMAND)
        self.text.setEnabled(bool(command))

    def _on_copy_clicked(self) -> None:
        command = self.command_text()
        if command:
            QGuiApplication.clipboard().setText(command)
            self.copy_button.setText("Copied")
            QTimer.singleShot(1200, self, self._on_copy_feedback_expired)

    def _on_copy_feedback_expired(self) -> None:
        self.copy_button.setText("Copy")
