"""The question before a run is stopped, with buttons that say what they do.

"Yes" / "No" to "Stop run 12?" makes a person read the question again; "Stop run" /
"Keep running" (and "Kill now" / "Keep waiting" for a forced stop) can be clicked on sight.
"""

from __future__ import annotations

from PySide6.QtWidgets import QMessageBox, QWidget

STOP_VERB, KEEP_VERB = "Stop run", "Keep running"
KILL_VERB, WAIT_VERB = "Kill now", "Keep waiting"


def stop_question(parent: QWidget | None, run_id: int | None, force: bool) -> QMessageBox:
    """The dialog, not yet shown (tests read its buttons; :func:`confirm_stop` shows it)."""
    if force:
        box = QMessageBox(QMessageBox.Icon.Warning, "Force stop",
                          f"Run {run_id} is still stopping. Kill it now? Every worker process is killed "
                          "(SIGKILL); anything not yet saved is lost.", parent=parent)
        act, keep = KILL_VERB, WAIT_VERB
    else:
        box = QMessageBox(QMessageBox.Icon.Question, "Stop the run",
                          f"Stop run {run_id}? Every rank gets SIGTERM and a few seconds to exit; "
                          "stop again to force.", parent=parent)
        act, keep = STOP_VERB, KEEP_VERB
    stop_button = box.addButton(act, QMessageBox.ButtonRole.DestructiveRole)
    keep_button = box.addButton(keep, QMessageBox.ButtonRole.RejectRole)
    box.setDefaultButton(keep_button if force else stop_button)
    box.setEscapeButton(keep_button)
    box.setObjectName("stopQuestion")
    return box


def confirm_stop(parent: QWidget | None, run_id: int | None, force: bool) -> bool:
    """Ask; ``True`` when the person chose to stop (or kill)."""
    box = stop_question(parent, run_id, force)
    box.exec()
    return box.clickedButton() is not None and box.clickedButton().text() in (STOP_VERB, KILL_VERB)
