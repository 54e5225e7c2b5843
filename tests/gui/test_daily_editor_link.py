"""Click to open in the editor: the command ``gui.editor_link`` builds for each kind of editor, and
the log view's traceback lines and the stacks view's frames, clicked in a real window on recorded
runs (``replay_run.py``: the real store and hub), reaching a real editor program (a recorder)."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest
from PySide6.QtCore import QPoint, Qt
from PySide6.QtGui import QTextCursor
from replay_run import load_fixture, store_fixture

from gui.editor_link import SourceLocation, editor_command, traceback_locations
from gui.widgets.log_view import LogView

PLACE = SourceLocation("/work/train.py", 36)


def no_programs(_name: str) -> str | None:
    return None


@pytest.mark.parametrize(("editor", "expected"), [
    ("vim", ["vim", "+36", "/work/train.py"]),
    ("emacsclient -n", ["emacsclient", "-n", "+36", "/work/train.py"]),
    ("/usr/bin/nano", ["/usr/bin/nano", "+36", "/work/train.py"]),
    ("code -w", ["code", "-w", "--goto", "/work/train.py:36"]),
    ("subl", ["subl", "/work/train.py:36"]),
    ("kate", ["kate", "--line", "36", "/work/train.py"]),
    ("my-editor", ["my-editor", "/work/train.py"]),  # unknown: the file, without the line it may not read
])
def test_the_editor_in_visual_gets_the_line_in_its_own_form(editor, expected):
    assert editor_command(PLACE, {"VISUAL": editor}, no_programs) == expected


def test_visual_wins_over_editor_and_editor_is_used_without_visual():
    assert editor_command(PLACE, {"VISUAL": "gvim", "EDITOR": "nano"}, no_programs)[0] == "gvim"
    assert editor_command(PLACE, {"EDITOR": "emacs"}, no_programs) == ["emacs", "+36", "/work/train.py"]


def test_a_terminal_editor_gets_a_terminal_window_when_there_is_one():
    which = {"xterm": "/usr/bin/xterm"}.get
    assert editor_command(PLACE, {"EDITOR": "vim"}, which) == ["xterm", "-e", "vim", "+36", "/work/train.py"]
    assert editor_command(PLACE, {"EDITOR": "nano", "TERMINAL": "kitty"}, {"kitty": "/bin/kitty"}.get) == [
        "kitty", "-e", "nano", "+36", "/work/train.py"]


def test_without_an_editor_vs_code_on_path_then_the_system_opener():
    assert editor_command(PLACE, {}, {"code": "/usr/bin/code"}.get) == ["/usr/bin/code", "--goto", "/work/train.py:36"]
    assert editor_command(PLACE, {}, no_programs) is None
    assert editor_command(SourceLocation("/work/train.py"), {"EDITOR": "vim"}, no_programs) == ["vim", "/work/train.py"]


def test_traceback_locations_are_found_where_they_are_written():
    line = '[r1] [rank1]:   File "/work/my dir/train.py", line 19, in <module>'
    [span] = traceback_locations(line)
    assert span.location == SourceLocation("/work/my dir/train.py", 19)
    assert line[span.start:span.end] == 'File "/work/my dir/train.py", line 19'


# ---- clicking in a real window ---------------------------------------------------------------

@pytest.fixture
def recorder(tmp_path, monkeypatch) -> Path:
    """``$VISUAL`` is a program named ``emacs`` that writes the arguments it was started with."""
    record = tmp_path / "opened.txt"
    program = tmp_path / "bin" / "emacs"
    program.parent.mkdir()
    program.write_text(f"#!{sys.executable}\nimport sys\nimport json; open({str(record)!r}, 'w').write(json.dumps(sys.argv[1:]))\n")
    program.chmod(0o755)
    monkeypatch.setenv("VISUAL", str(program))
    return record


@pytest.fixture
def window(example_window):
    return example_window


def point_of(view: LogView, text: str) -> QPoint:
    """The viewport point in the middle of the first occurrence of ``text`` in the log view."""
    document = view.text.document()
    found = document.find(text)
    assert not found.isNull(), f"{text!r} is not shown"
    cursor = QTextCursor(document)
    cursor.setPosition(found.selectionStart() + len(text) // 2)  # nothing selected
    view.text.setTextCursor(cursor)
    view.text.ensureCursorVisible()
    point = view.text.cursorRect(cursor).center()
    assert view.text.viewport().rect().contains(point)
    return point


def wait_for_record(record: Path) -> list[str]:
    deadline = time.monotonic() + 10
    while not record.exists() or not record.read_text():
        assert time.monotonic() < deadline, "the editor was not started"
        time.sleep(0.05)
    return json.loads(record.read_text())


def test_clicking_a_traceback_line_in_the_log_view_opens_that_file_at_that_line(qtbot, window, recorder):
    panel = window.monitor
    panel.attach(store_fixture(load_fixture("exception")))
    window.tabs.setCurrentWidget(window.monitors)
    panel.tabs.setCurrentWidget(panel.log_view)
    view = panel.log_view
    location = 'File "/work/main/tests/scripts/diag_exception.py", line 10'
    qtbot.waitUntil(lambda: not view.text.document().find(location).isNull(), timeout=15_000)
    point = point_of(view, location)
    with qtbot.waitSignal(view.open_requested, timeout=15_000) as opened:
        qtbot.mouseClick(view.text.viewport(), Qt.MouseButton.LeftButton, pos=point)
    assert opened.args == [SourceLocation("/work/main/tests/scripts/diag_exception.py", 10)]
    assert wait_for_record(recorder) == ["+10", "/work/main/tests/scripts/diag_exception.py"]

    # A click beside the location is an ordinary click in the text.
    with qtbot.assertNotEmitted(view.open_requested):
        qtbot.mouseClick(view.text.viewport(), Qt.MouseButton.LeftButton, pos=QPoint(3, point.y()))


def test_double_clicking_a_frame_in_the_stacks_view_opens_it(qtbot, window, recorder):
    panel = window.monitor
    panel.attach(store_fixture(load_fixture("hang")))
    window.tabs.setCurrentWidget(window.monitors)
    view = panel.stacks_view
    panel.tabs.setCurrentWidget(view)
    qtbot.waitUntil(lambda: view.layout_shown is not None and bool(view.marked_cells()), timeout=15_000)
    row, column, _text = view.marked_cells()[0]
    frame = view.layout_shown.columns[column].frames[row]
    item = view.table.item(row, column)
    view.table.scrollToItem(item)
    rect = view.table.visualItemRect(item)
    with qtbot.waitSignal(view.open_requested, timeout=15_000) as opened:
        # What a person's double-click sends: press, release, then the double-click.
        qtbot.mouseClick(view.table.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())
        qtbot.mouseDClick(view.table.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())
    assert opened.args == [SourceLocation(frame.file, frame.line)] and frame.file.endswith("diag_hang.py")
    assert wait_for_record(recorder) == [f"+{frame.line}", frame.file]
