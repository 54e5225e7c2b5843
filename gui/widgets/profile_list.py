"""The profile list: pick a profile to load it into the form; new, save, copy, import, export.

Profiles are the TOML files ``rankwatch run PROFILE`` uses. The current profile is
marked with a dot while the form holds unsaved changes; switching away from it
asks whether to save them first. New starts from an empty form (named when it is
first saved); a name that is not allowed is said in the name dialog, which keeps
what was typed.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QFileDialog,
    QGridLayout,
    QInputDialog,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QMessageBox,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from gui.gateway.launch_spec import LaunchSpec, SpecErrors
from gui.gateway.profiles import ProfileError, ProfileLibrary
from gui.models.launch_form import Evaluation, LaunchFormModel
from gui.models.profiles import ProfileListModel
from gui.widgets.profiles_watcher import ProfilesFolderWatcher

DIRTY_MARK = " •"
TOML_FILTER = "Profiles (*.toml);;All files (*)"


class ProfileList(QWidget):
    """Signals:
        profile_loaded(str): a profile was loaded into the form.
    """

    profile_loaded = Signal(str)

    def __init__(self, profiles: ProfileListModel, form: LaunchFormModel, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._profiles = profiles
        self._form = form

        self.title = QLabel("Profiles")
        self.title.setObjectName("sectionTitle")
        self.list = QListWidget()
        self.list.setObjectName("profileList")
        self.list.setToolTip("Saved launch profiles (also usable as `rankwatch run NAME`)")
        # Selection, not the current item: focusing the list makes its first row current
        # without selecting it, and that must not load a profile.
        self.list.itemSelectionChanged.connect(self._on_selection_changed)

        self.new_button = self._button("New", "Start a new profile from an empty form (Ctrl+N)", self.new_profile)
        self.save_button = self._button("Save", "Save the form over the current profile (Ctrl+S)", self.save_current)
        self.save_as_button = self._button("Save as…", "Save the form as a new profile", self.save_as)
        self.rename_button = self._button("Rename…", "Rename the current profile", self.rename_current)
        self.duplicate_button = self._button("Duplicate", "Copy the current profile under a new name",
                                             self.duplicate_current)
        self.delete_button = self._button("Delete", "Delete the current profile's file", self.delete_current)
        self.import_button = self._button("Import…", "Copy a .toml profile into your profiles", self.import_file)
        self.export_button = self._button("Export…", "Write the form to a .toml file to share or run elsewhere",
                                          self.export_file)

        buttons = QGridLayout()
        buttons.setContentsMargins(0, 0, 0, 0)
        buttons.setSpacing(4)
        for position, button in enumerate((self.new_button, self.save_button, self.save_as_button,
                                           self.rename_button, self.duplicate_button, self.delete_button,
                                           self.import_button, self.export_button)):
            buttons.addWidget(button, position // 2, position % 2)

        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(4)
        layout.addWidget(self.title)
        layout.addWidget(self.list, 1)
        layout.addLayout(buttons)

        profiles.names_changed.connect(self._on_names_changed)
        profiles.current_changed.connect(self._on_current_changed)
        form.evaluated.connect(self._on_form_evaluated)
        self.watcher = ProfilesFolderWatcher(ProfileLibrary.folder(), self)
        self.watcher.profiles_changed.connect(self._on_profiles_changed_on_disk)
        self._update_items()

    def _button(self, text: str, tip: str, slot: Callable[[], object]) -> QPushButton:
        button = QPushButton(text)
        button.setToolTip(tip)
        button.clicked.connect(lambda _checked=False: slot())
        return button

    # Loading.

    def select(self, name: str) -> bool:
        """Load profile ``name`` into the form; ``False`` when it cannot be loaded (the user was told)."""
        if name == self._profiles.current and self._form.profile_name == name:
            return True
        if not self._confirm_discard():
            self._update_current_row()
            return False
        try:
            profile = self._profiles.load(name)
        except (ProfileError, SpecErrors) as exc:
            QMessageBox.warning(self, "Cannot load profile", f"Profile {name!r} cannot be loaded:\n\n{exc}")
            self._update_current_row()
            return False
        self._form.load(profile.spec, profile_name=name, base_dir=profile.base_dir)
        self.profile_loaded.emit(name)
        return True

    def _confirm_discard(self) -> bool:
        """Ask what to do with unsaved changes; ``False`` means stay on the current profile."""
        if not self._form.dirty:
            return True
        name = self._form.profile_name
        answer = QMessageBox.question(
            self, "Unsaved changes",
            f"Profile {name!r} has unsaved changes. Save them first?" if name is not None
            else "The new profile in the form is not saved. Save it first?",
            QMessageBox.StandardButton.Save | QMessageBox.StandardButton.Discard | QMessageBox.StandardButton.Cancel,
            QMessageBox.StandardButton.Save)
        if answer == QMessageBox.StandardButton.Save:
            return self.save_current()
        return answer == QMessageBox.StandardButton.Discard

    def _on_selection_changed(self) -> None:
        selected = self.list.selectedItems()
        if selected:
            self.select(selected[0].data(Qt.ItemDataRole.UserRole))

    # Operations (buttons, menu actions and shortcuts call these).

    def _valid_spec(self, action: str) -> LaunchSpec | None:
        evaluation = self._form.evaluation
        if evaluation.spec is None:
            problems = "\n".join(f"{field}: {message}" for field, message in evaluation.errors)
            QMessageBox.warning(self, f"Cannot {action}", f"Fix these fields first:\n\n{problems}")
            return None
        return evaluation.spec

    def _ask_name(self, title: str, label: str, suggestion: str) -> str | None:
        """A profile name, asked again (with the reason, and what was typed) until it is allowed;
        ``None`` when cancelled."""
        text, problem = suggestion, None
        while True:
            prompt = f"{problem}\n\n{label}" if problem else label
            name, accepted = QInputDialog.getText(self, title, prompt, QLineEdit.EchoMode.Normal, text)
            if not accepted:
                return None
            text = name.strip()
            problem = "A profile needs a name." if not text else self._profiles.name_problem(text)
            if problem is None:
                return text

    def new_profile(self) -> bool:
        """An empty form, not yet a profile (Save asks for its name); unsaved edits are asked about first."""
        if not self._confirm_discard():
            return False
        self._profiles.forget_current()
        self._form.load(LaunchSpec(), profile_name=None, base_dir=Path.cwd())
        return True

    def _report(self, title: str, error: Exception) -> None:
        QMessageBox.warning(self, title, str(error))

    def save_current(self) -> bool:
        """Save the form over the current profile (Save as when there is none or it is bundled)."""
        name = self._form.profile_name
        if name is None or self._profiles.is_bundled(name):
            return self.save_as()  # the bundled example is kept as shipped; save a copy
        spec = self._valid_spec("save")
        if spec is None:
            return False
        try:
            self._profiles.save_as(name, spec, self._form.base_dir, overwrite=True)
        except ProfileError as error:
            self._report("Cannot save profile", error)
            return False
        self._form.mark_saved(profile_name=name, base_dir=self._profiles.base_dir(name))
        return True

    def save_as(self) -> bool:
        spec = self._valid_spec("save")
        if spec is None:
            return False
        source = self._form.profile_name
        own = source if source is not None and not self._profiles.is_bundled(source) else None
        suggestion = self._profiles.unique_name(own or Path(spec.entry_label).stem or "profile")
        name = self._ask_name("Save profile as", "Profile name:", suggestion)
        if name is None:
            return False
        spec = self._profiles.spec_for_save_as(spec, source)
        overwrite = False
        if self._profiles.is_saved(name):
            answer = QMessageBox.question(self, "Replace profile", f"Profile {name!r} exists. Replace it?")
            if answer != QMessageBox.StandardButton.Yes:
                return False
            overwrite = True
        try:
            self._profiles.save_as(name, spec, self._form.base_dir, overwrite=overwrite)
        except ProfileError as error:
            self._report("Cannot save profile", error)
            return False
        self._form.update(description=spec.description)
        self._form.mark_saved(profile_name=name, base_dir=self._profiles.base_dir(name))
        return True

    def rename_current(self) -> bool:
        old = self._profiles.current
        if old is None:
            return False
        new = self._ask_name("Rename profile", f"New name for {old!r}:", old)
        if new is None or new == old:
            return False
        try:
            self._profiles.rename(old, new)
        except ProfileError as error:
            self._report("Cannot rename profile", error)
            return False
        if self._form.profile_name == old:
            self._form.rename(new)  # same file, new name: unsaved edits stay unsaved
        self.profile_loaded.emit(new)
        return True

    def duplicate_current(self) -> bool:
        name = self._profiles.current
        if name is None:
            return False
        new = self._ask_name("Duplicate profile", f"Name of the copy of {name!r}:",
                             self._profiles.unique_name(f"{name}-copy"))
        if new is None:
            return False
        try:
            self._profiles.duplicate(name, new)
            profile = self._profiles.load(new)
        except (ProfileError, SpecErrors) as error:
            self._report("Cannot duplicate profile", error)
            return False
        self._form.load(profile.spec, profile_name=new, base_dir=profile.base_dir)
        self.profile_loaded.emit(new)
        return True

    def delete_current(self) -> bool:
        name = self._profiles.current
        if name is None:
            return False
        if self._profiles.is_bundled(name):
            self._report("Cannot delete profile", ProfileError("the bundled example cannot be deleted"))
            return False
        answer = QMessageBox.question(self, "Delete profile", f"Delete profile {name!r}? Its file is removed.")
        if answer != QMessageBox.StandardButton.Yes:
            return False
        try:
            self._profiles.delete(name)
        except ProfileError as error:
            self._report("Cannot delete profile", error)
            return False
        fallback = self._profiles.names[0] if self._profiles.names else None
        if fallback is not None:
            self._force_load(fallback)
        return True

    def import_file(self) -> bool:
        path, _filter = QFileDialog.getOpenFileName(self, "Import profile", str(Path.home()), TOML_FILTER)
        if not path:
            return False
        if not self._confirm_discard():
            return False
        try:
            name = self._profiles.import_file(Path(path))
        except (ProfileError, SpecErrors) as error:
            self._report("Cannot import profile", error)
            return False
        self._force_load(name)
        return True

    def export_file(self) -> bool:
        spec = self._valid_spec("export")
        if spec is None:
            return False
        suggestion = str(Path.home() / f"{self._form.profile_name or 'profile'}.toml")
        path, _filter = QFileDialog.getSaveFileName(self, "Export profile", suggestion, TOML_FILTER)
        if not path:
            return False
        try:
            self._profiles.export(spec, self._form.base_dir, Path(path))
        except OSError as error:
            self._report("Cannot export profile", error)
            return False
        return True

    def _force_load(self, name: str) -> None:
        """Load ``name`` without asking about unsaved changes (they were dealt with)."""
        try:
            profile = self._profiles.load(name)
        except (ProfileError, SpecErrors) as error:
            self._report("Cannot load profile", error)
            return
        self._form.load(profile.spec, profile_name=name, base_dir=profile.base_dir)
        self.profile_loaded.emit(name)

    def _on_profiles_changed_on_disk(self, names: list[str]) -> None:
        """Profiles written from outside (the CLI, an editor) show up without a restart; the
        current profile, rewritten while the form holds no edits of its own, is read again."""
        self._profiles.refresh()
        current = self._form.profile_name
        if (current in names and not self._form.dirty and self._profiles.current == current
                and self._profiles.is_saved(current)):
            try:
                profile = self._profiles.load(current)
            except (ProfileError, SpecErrors):
                return  # half-edited by hand: keep what the form shows until it parses again
            self._form.load(profile.spec, profile_name=current, base_dir=profile.base_dir)

    # Showing.

    def _on_names_changed(self, _names: list[str]) -> None:
        self._update_items()

    def _on_current_changed(self, _name: str | None) -> None:
        self._update_current_row()
        self._update_buttons()

    def _on_form_evaluated(self, evaluation: Evaluation) -> None:
        self._update_labels(evaluation.dirty)
        self._update_buttons()

    def _update_items(self) -> None:
        self.list.blockSignals(True)
        self.list.clear()
        for name in self._profiles.names:
            item = QListWidgetItem(name)
            item.setData(Qt.ItemDataRole.UserRole, name)
            if self._profiles.is_bundled(name):
                item.setToolTip("The bundled example (Save or Save as to keep your own copy)")
            self.list.addItem(item)
        self.list.blockSignals(False)
        self._update_current_row()
        self._update_labels(self._form.dirty)
        self._update_buttons()

    def _update_current_row(self) -> None:
        current = self._profiles.current
        self.list.blockSignals(True)
        for row in range(self.list.count()):
            if self.list.item(row).data(Qt.ItemDataRole.UserRole) == current:
                self.list.setCurrentRow(row)
                break
        else:
            self.list.clearSelection()
        self.list.blockSignals(False)

    def _update_labels(self, dirty: bool) -> None:
        for row in range(self.list.count()):
            item = self.list.item(row)
            name = item.data(Qt.ItemDataRole.UserRole)
            label = name + (" (bundled)" if self._profiles.is_bundled(name) else "")
            if dirty and name == self._form.profile_name:
                label += DIRTY_MARK
                item.setToolTip("Unsaved changes")
            font = item.font()
            font.setItalic(dirty and name == self._form.profile_name)
            item.setFont(font)
            item.setText(label)

    def _update_buttons(self) -> None:
        current = self._profiles.current
        saved = current is not None and self._profiles.is_saved(current)
        self.save_button.setEnabled(self._form.dirty or current is None)
        self.rename_button.setEnabled(saved)
        self.delete_button.setEnabled(saved)
        self.duplicate_button.setEnabled(current is not None)
