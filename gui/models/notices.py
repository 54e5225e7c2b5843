"""What the desktop is told when a run ends: the notification and the window title (Qt-free).

A run that ends while the person looks elsewhere should not go unnoticed (docker
and VS Code notify when a long task ends): :func:`run_end_notice` says whether a
status change deserves a notification and words it; :func:`window_title` puts the
outcome into the window title, which taskbars show.
"""

from __future__ import annotations

from dataclasses import dataclass

from gui.gateway.run_state import RunReading
from gui.gateway.runner_rules import RunStatus

APP_NAME = "Rankwatch"

OUTCOME_MARKS = {
    RunStatus.SUCCEEDED.value: "✓",
    RunStatus.FAILED.value: "✗",
    RunStatus.STOPPED.value: "■",
    RunStatus.LOST.value: "?",
}
OUTCOME_WORDS = {
    RunStatus.SUCCEEDED.value: "finished",
    RunStatus.FAILED.value: "failed",
    RunStatus.STOPPED.value: "was stopped",
    RunStatus.LOST.value: "was lost (its runner died)",
}


@dataclass(frozen=True)
class Notice:
    title: str
    body: str
    urgent: bool
    """A failure: the taskbar entry asks for attention too."""


def run_label(run_id: int | None, profile: str | None) -> str:
    run = "Run" if run_id is None else f"Run {run_id}"
    return f"{run} ({profile})" if profile else run


def run_end_notice(old_status: str | None, new_status: str | None, run_id: int | None, profile: str | None,
                   headline: str = "") -> Notice | None:
    """A notice for a run that just ended (a live status became a final one); ``None`` otherwise.

    A run opened from the store already finished (no live status before) gets none:
    nothing happened while the person was away.
    """
    if new_status not in OUTCOME_WORDS or old_status == new_status:
        return None
    if old_status not in (RunStatus.STARTING.value, RunStatus.PENDING.value, RunStatus.RUNNING.value,
                          RunStatus.STOPPING.value, RunReading.HUNG):
        return None
    title = f"{run_label(run_id, profile)} {OUTCOME_WORDS[new_status]}"
    body = headline or {RunStatus.SUCCEEDED.value: "Every rank exited with code 0."}.get(new_status, "")
    return Notice(title, body, urgent=new_status in (RunStatus.FAILED.value, RunStatus.LOST.value))


def window_title(profile: str | None, run_id: int | None, run_status: str | None, unseen_end: bool) -> str:
    """``✗ Run 12 failed — example — Rankwatch`` while an ended run is unseen; else the profile.

    ``[*]`` is Qt's place for the unsaved-changes mark of the profile.
    """
    parts = []
    if unseen_end and run_status in OUTCOME_WORDS:
        parts.append(f"{OUTCOME_MARKS[run_status]} {run_label(run_id, None)} {OUTCOME_WORDS[run_status]}")
    if profile:
        parts.append(f"{profile}[*]")
    parts.append(APP_NAME)
    return " — ".join(parts)
