"""The gateway's one store reader against a real run store: reads off the GUI thread, results
on it, in order; failures in words; nothing for a closed panel; polls deliver changes only."""

from __future__ import annotations

import threading

import pytest
from PySide6.QtWidgets import QWidget

from gui.gateway.store_reader import THREAD_NAME, store_reader
from gui.gateway.store_reads import StoreReads
from runner.store.store import RunStore

pytestmark = pytest.mark.gui


def add_run(profile: str) -> int:
    with RunStore() as store:
        return store.create_run(run_key=f"{profile}-key", profile=profile, spec_toml="", command=None, host="h",
                                workdir=None, runner_pid=0, socket=None, world_size=1, status="succeeded")


def test_reads_run_on_the_reader_thread_and_arrive_on_the_gui_thread_in_order(qtbot):
    first, second = add_run("alpha"), add_run("beta")
    read_on, delivered_on, results = [], [], []

    def read(run_id: int):
        def profile(store: RunStore) -> str:
            read_on.append(threading.current_thread().name)
            return store.stored_run(run_id).profile
        return profile

    def done(value: str) -> None:
        delivered_on.append(threading.current_thread() is threading.main_thread())
        results.append(value)

    for run_id in (first, second, first):
        store_reader().read(read(run_id), done)
    qtbot.waitUntil(lambda: len(results) == 3, timeout=15_000)
    assert results == ["alpha", "beta", "alpha"]
    assert read_on == [THREAD_NAME] * 3 and delivered_on == [True] * 3


def test_a_failed_read_is_told_in_words_and_a_missing_store_can_read_as_a_default(qtbot):
    errors, values = [], []
    store_reader().read(lambda store: store.stored_run(1), values.append, errors.append)  # no store yet
    store_reader().read(lambda store: store.stored_run(1), values.append, errors.append, when_no_store=None)
    qtbot.waitUntil(lambda: len(errors) + len(values) == 2, timeout=15_000)
    assert len(errors) == 1 and "no run store yet" in errors[0]
    assert values == [None]
    add_run("alpha")
    store_reader().read(lambda store: store.stored_run(999), values.append, errors.append)
    qtbot.waitUntil(lambda: len(errors) == 2, timeout=15_000)
    assert "999" in errors[1]


def test_nothing_is_delivered_to_a_closed_panel(qtbot):
    add_run("alpha")
    owner = QWidget()
    delivered, after = [], []
    started, release = threading.Event(), threading.Event()

    def slow(store: RunStore) -> int:
        started.set()
        release.wait(5)
        return len(store.runs())

    store_reader().read(slow, delivered.append, owner=owner)
    assert started.wait(5)
    owner.deleteLater()
    qtbot.waitUntil(lambda: not _alive(owner), timeout=15_000)
    release.set()
    store_reader().read(lambda store: 1, after.append)  # served after the slow one
    qtbot.waitUntil(lambda: after == [1], timeout=15_000)
    assert delivered == []


def test_a_poll_delivers_the_runs_list_when_it_changed_and_stops(qtbot):
    seen: list[list[str]] = []
    poll = store_reader().every(0.05, lambda store: [run.run.profile for run in StoreReads.runs(store, 10)],
                                seen.append, when_no_store=[])
    qtbot.waitUntil(lambda: seen == [[]], timeout=15_000)
    qtbot.wait(200)
    assert seen == [[]]  # unchanged: not delivered again
    add_run("alpha")
    qtbot.waitUntil(lambda: seen == [[], ["alpha"]], timeout=15_000)
    poll.now()  # asked for: delivered even unchanged
    qtbot.waitUntil(lambda: len(seen) == 3, timeout=15_000)
    poll.stop()
    add_run("beta")
    qtbot.wait(300)
    assert seen == [[], ["alpha"], ["alpha"]]


def _alive(widget: QWidget) -> bool:
    import shiboken6

    return shiboken6.isValid(widget)
