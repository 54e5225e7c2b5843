"""Rankwatch's own frames are left out of a failure's traceback, and only those that passed the call on.

In process, with the real wrapper of a timed collective (``_phases._marked``): what passes
through it reads as without Rankwatch; a failure in its own work keeps its frame.
"""

from __future__ import annotations

import json
import threading
import traceback
from types import SimpleNamespace

import pytest

from rankwatch import _failures, _phases
from rankwatch._failures import format_exception, hide_own_frames, write_error_file


def _collective_that_fails():
    raise RuntimeError("peer gone")


def _train(collective):
    collective()


def _caught(function, *args) -> BaseException:
    try:
        function(*args)
    except BaseException as exc:  # what the test inspects
        return exc
    raise AssertionError("did not raise")


def _files_and_functions(text: str) -> list[str]:
    return [line.strip().split('"')[1].rsplit("/", 1)[-1] + " " + line.rsplit(" in ", 1)[-1]
            for line in text.splitlines() if line.strip().startswith('File "')]


def test_a_wrapper_that_passed_the_call_on_is_left_out():
    marked = _phases._marked(_collective_that_fails, SimpleNamespace(timing=False), lambda: False)

    text = format_exception(_caught(_train, marked))

    assert _files_and_functions(text) == ["test_failures.py _caught", "test_failures.py _train",
                                          "test_failures.py _collective_that_fails"]
    assert text.endswith("RuntimeError: peer gone\n")


def test_a_failure_in_rankwatchs_own_code_keeps_its_frame():
    broken = _phases._marked(_collective_that_fails, SimpleNamespace(), lambda: False)  # no .timing: our bug

    text = format_exception(_caught(_train, broken))

    assert _files_and_functions(text)[-1] == "_phases.py collective"
    assert "AttributeError" in text


def test_our_frame_calling_the_standard_library_is_kept():
    """Only a call of what the wrapper holds is passing on; its own calls are its work."""

    def wrapper_like():
        json.loads("{")  # the standard library raising in our code

    wrapper_like.__code__ = wrapper_like.__code__.replace(co_filename=_phases.__file__)

    text = format_exception(_caught(wrapper_like))

    assert "_phases.py" in text and "decoder.py" in text


def test_chained_exceptions_lose_the_wrapper_too():
    marked = _phases._marked(_collective_that_fails, SimpleNamespace(timing=False), lambda: False)

    def handle():
        try:
            marked()
        except RuntimeError as exc:
            raise ValueError("could not sum") from exc

    exc = hide_own_frames(_caught(handle))

    printed = "".join(traceback.format_exception(exc))
    assert "_phases.py" not in printed
    assert "The above exception was the direct cause" in printed
    assert "_collective_that_fails" in printed


def test_the_thread_hook_reports_and_prints_without_the_wrapper(monkeypatch):
    marked = _phases._marked(_collective_that_fails, SimpleNamespace(timing=False), lambda: False)
    printed: list[str] = []
    reported: list[str] = []
    monkeypatch.setattr(threading, "excepthook", lambda args: printed.append(
        "".join(traceback.format_exception(args.exc_type, args.exc_value, args.exc_traceback))))
    _failures.install_thread_excepthook(lambda args: reported.append(
        "".join(traceback.format_exception(args.exc_type, args.exc_value, args.exc_traceback))))

    thread = threading.Thread(target=_train, args=(marked,))
    thread.start()
    thread.join()

    assert len(printed) == len(reported) == 1
    assert printed == reported
    assert "_phases.py" not in printed[0] and "_collective_that_fails" in printed[0]


@pytest.mark.parametrize("recorded_message", ["RuntimeError: peer gone", "RuntimeError: another failure"])
def test_an_error_file_recorded_by_at_record_gets_the_trimmed_traceback(tmp_path, recorded_message):
    """``@record`` writes torchrun's error file first, from inside our wrappers: the same exception's
    traceback is replaced by the trimmed one; a file about anything else is left alone."""
    marked = _phases._marked(_collective_that_fails, SimpleNamespace(timing=False), lambda: False)
    exc = _caught(_train, marked)
    recorded = {"message": {"message": recorded_message,
                            "extraInfo": {"py_callstack": "".join(traceback.format_exception(exc)),
                                          "timestamp": "1763770000"}}}
    error_file = tmp_path / "error.json"
    error_file.write_text(json.dumps(recorded))
    assert "_phases.py" in recorded["message"]["extraInfo"]["py_callstack"]

    text = format_exception(exc)
    written = write_error_file(str(error_file), exc, text)

    content = json.loads(error_file.read_text())
    if recorded_message == "RuntimeError: peer gone":
        assert written
        assert content["message"]["extraInfo"] == {"py_callstack": text, "timestamp": "1763770000"}
    else:
        assert not written
        assert content == recorded
    assert list(tmp_path.iterdir()) == [error_file]
