"""Form rows made from the spec's settings: one group box per section (``Telemetry``).

Each setting with a form label (``runner.profile.schema``) gets a row: a check box, a
line of text or a drop-down list, as its ``Setting`` says, with its tool tip and, under
it, the parser's own error for that field (``telemetry.stall_timeout: ...``). A setting
added to a spec dataclass shows up here without an edit to this file or the panel.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QFormLayout,
    QGroupBox,
    QLabel,
    QLineEdit,
    QWidget,
)

from gui.gateway.launch_rules import SettingWidget
from gui.gateway.launch_spec import PathSetting
from gui.models.launch_form import Evaluation, FormState, LaunchFormModel, generic_settings

ERROR_STYLE = "color: #d64545;"


def form_sections(form: LaunchFormModel) -> dict[str, list[PathSetting]]:
    """The form's generic settings (those with a label), grouped by section, in declaration order."""
    sections: dict[str, list[PathSetting]] = {}
    for item in generic_settings(form.schema):
        if item.setting.label:
            sections.setdefault(item.setting.section or "More", []).append(item)
    return sections


class SettingsSection(QGroupBox):
    """One section of settings; writes every edit to the form model and shows its errors.

    ``editors`` maps each setting's dotted path to its widget (tests and the panel use it).
    """

    def __init__(self, form: LaunchFormModel, title: str, items: list[PathSetting],
                 parent: QWidget | None = None) -> None:
        super().__init__(title, parent)
        self.setObjectName(f"settings{title.replace(' ', '')}")
        self._form = form
        self._items = items
        self._populating = False
        self.editors: dict[str, QWidget] = {}
        self.errors: dict[str, QLabel] = {}
        self._layout = QFormLayout(self)
        self._layout.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.AllNonFixedFieldsGrow)
        self._layout.setLabelAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        self._layout.setContentsMargins(10, 8, 10, 8)
        self._layout.setHorizontalSpacing(8)
        self._layout.setVerticalSpacing(5)
        for item in items:
            editor = self._make_editor(item)
            editor.setToolTip(f"{item.setting.tool_tip}\n(profile: {item.path})")
            editor.setObjectName(f"setting:{item.path}")
            self.editors[item.path] = editor
            self._layout.addRow(item.setting.label or item.path, editor)  # unlabelled: its dotted path
            error = QLabel()
            error.setObjectName("fieldError")
            error.setStyleSheet(ERROR_STYLE)
            error.setWordWrap(True)
            error.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
            self._layout.addRow("", error)
            self._layout.setRowVisible(error, False)
            self.errors[item.path] = error
        form.state_replaced.connect(self._on_state_replaced)
        form.evaluated.connect(self._on_evaluated)
        self._on_state_replaced(form.state)
        self._on_evaluated(form.evaluation)

    def _make_editor(self, item: PathSetting) -> QWidget:
        described = item.setting
        path = item.path
        widget = SettingWidget.of(item)
        if widget is SettingWidget.CHECK:
            box = QCheckBox(described.placeholder)
            box.toggled.connect(lambda checked, path=path: self._on_edited(path, checked))
            return box
        if widget is SettingWidget.COMBO:
            combo = QComboBox()
            for choice in described.choices:
                combo.addItem(choice, choice)
            combo.currentIndexChanged.connect(
                lambda _index, path=path, combo=combo: self._on_edited(path, combo.currentData()))
            return combo
        line = QLineEdit()
        line.setPlaceholderText(described.placeholder)
        line.textEdited.connect(lambda text, path=path: self._on_edited(path, text))
        return line

    def _on_edited(self, path: str, value: Any) -> None:
        if not self._populating:
            self._form.update_setting(path, value)

    def _on_state_replaced(self, state: FormState) -> None:
        self._populating = True
        try:
            for item in self._items:
                editor = self.editors[item.path]
                value = state.setting(item.path)
                if isinstance(editor, QCheckBox):
                    editor.setChecked(bool(value))
                elif isinstance(editor, QComboBox):
                    editor.setCurrentIndex(max(editor.findData(value), 0))
                elif isinstance(editor, QLineEdit):
                    editor.setText("" if value is None else str(value))
        finally:
            self._populating = False

    def _on_evaluated(self, evaluation: Evaluation) -> None:
        for path, label in self.errors.items():
            messages = evaluation.errors_for(path)
            label.setText("\n".join(messages))
            self._layout.setRowVisible(label, bool(messages))
