"""Quitting protects what the person has, like an editor with an unsaved file: a new, never-saved
form is marked in the title and asked about; and every question is asked before anything is done.
Real window, real profile files in the test's RANKWATCH_HOME, a real runner with fake ranks."""

from __future__ import annotations

import pytest
from PySide6.QtWidgets import QMessageBox

from gui.gateway.probe import RunnerProbe
from gui.main_window import LEAVE_RUNNING, MainWindow

pytestmark = pytest.mark.gui


@pytest.fixture
def questions(monkeypatch):
    """Answer ``QMessageBox.question`` with the next answer queued; record each question's text."""
    asked: list[str] = []
    answers: list[QMessageBox.StandardButton] = []

    def question(_parent, _title, text, *args, **kwargs):
        asked.append(text)
        return answers.pop(0) if answers else QMessageBox.StandardButton.Cancel

    monkeypatch.setattr(QMessageBox, "question", question)
    monkeypatch.setattr(QMessageBox, "exec", lambda self: int(QMessageBox.StandardButton.Cancel))
    return asked, answers


@pytest.fixture
def window(qtbot, tmp_path):
    window = MainWindow(probe=RunnerProbe(command=[str(tmp_path / "no-probe")]), initial_profile="example")
    qtbot.addWidget(window)
    window.show()
    yield window
    for panel in window.monitors.panels():
        panel.detach()


def test_cancel_at_the_unsaved_question_leaves_the_live_run_watched(qtbot, window, live_run, questions,
                                                                   monkeypatch):
    asked, answers = questions
    runner = live_run(ranks=2, rate_hz=20)
    panel = window.monitor
    panel.attach(runner.run_id)
    qtbot.waitUntil(lambda: panel.model.status == "running", timeout=15_000)
    window.form.update(args_text="--epochs 7")  # an edited profile
    monkeypatch.setattr(window, "_ask_live_run_choice", lambda: LEAVE_RUNNING)

    answers.append(QMessageBox.StandardButton.Cancel)
    window.quit_action.trigger()
    assert len(asked) == 1 and "unsaved changes" in asked[0]
    assert window.isVisible()
    assert panel.has_live_run() and not panel.is_detached and panel.link.is_connected()
    assert runner.subscriber_count() == 1

    answers.append(QMessageBox.StandardButton.Discard)  # all confirmed: now it acts
    window.quit_action.trigger()
    assert not window.isVisible() and panel.is_detached
    qtbot.waitUntil(lambda: runner.subscriber_count() == 0, timeout=15_000)
    assert not runner.ended


def test_a_new_unsaved_form_marks_the_title_and_asks_on_quit(qtbot, window, questions, tmp_path):
    asked, answers = questions
    script = tmp_path / "train.py"
    script.write_text("print('training')\n")
    window.new_profile_action.trigger()
    assert not window.isWindowModified()  # the empty form is what a new form is
    window.form.update(entry=str(script), args_text="--my-important-args 123")
    assert window.isWindowModified() and window.windowTitle().startswith("New profile[*]")

    answers.append(QMessageBox.StandardButton.Cancel)
    window.quit_action.trigger()
    assert window.isVisible() and "not saved" in asked[0]
    assert window.form.state.args_text == "--my-important-args 123"

    answers.append(QMessageBox.StandardButton.Discard)
    window.quit_action.trigger()
    assert not window.isVisible() and len(asked) == 2


def test_switching_away_from_a_new_unsaved_form_asks_first(qtbot, window, questions):
    asked, _answers = questions
    window.new_profile_action.trigger()
    window.form.update(args_text="--my-important-args 123")
    assert not window.launch_panel.profile_list.select("example")  # Cancel: stay on the new form
    assert "not saved" in asked[0] and window.form.profile_name is None
    assert window.form.state.args_text == "--my-important-args 123"
