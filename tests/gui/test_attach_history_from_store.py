"""Attaching to a live run reads its history from the store, in the GUI's process.

At 1,024 ranks the hub's replay of a run's history took 30-80 s to reach the GUI: the hub's
reads wait for the GIL of an event loop busy with ingest, and the live updates queued behind the
replay overflowed until the hub dropped the GUI. The store's bounded window, read by the GUI's
own store reader, takes a few seconds (``tests/bench/PERFORMANCE.md``). So the GUI subscribes
with ``from_store``: the hub replays nothing and says where the store's history ends
(``HistoryEnd.stored_through``); the GUI reads up to there and the live updates it held
meanwhile follow on: no gap, no duplicate.
"""

from __future__ import annotations

import pytest
from loop_thread import LoopThread

from gui.gateway.run_state import HistoryEnd, RunInfo, SnapshotMessage
from gui.gateway.store_reads import StoredHistory
from gui.models.monitor import CPU_PERCENT, GPU_UTILIZATION, MonitorModel
from rankwatch import protocol
from rankwatch.protocol import GpuSample, LogLine, MetricRecord, ProcessSample
from runner import paths
from tests.hub_messages import update
from tests.hubs import fake_worker, open_hub

pytestmark = pytest.mark.gui


def test_attach_reads_the_history_from_the_store_and_charts_every_step_once(qtbot, panel, live_run):
    runner = live_run(ranks=4, rate_hz=40)
    qtbot.wait(1_500)  # a history to read
    asked = []
    publisher = runner.run.hub.publisher
    real_add = publisher.add

    async def add(subscriber, **options):
        asked.append(options)
        await real_add(subscriber, **options)

    publisher.add = add
    panel.attach(runner.run_id)
    qtbot.waitUntil(lambda: panel.model.history_done, timeout=10_000)
    qtbot.wait(500)  # live steps after the seam
    assert asked == [{"history": True, "records": True, "from_store": True}]
    assert panel.model.state.history_end.stored_through is not None

    series = panel.model.series(protocol.LOSS)[0]
    sent = runner.sent(0, protocol.LOSS)
    assert len(series) > 40  # history from the store and live steps
    assert list(series.values.values) == pytest.approx(sent[: len(series)])  # no gap, no duplicate
    steps = list(series.steps.values)
    assert steps == sorted(set(steps))
    lines = [entry.line for entry in panel.model.logs.entries if entry.rank == 0]
    assert len(lines) >= 2 and len(lines) == len(set(lines)) and lines == sorted(lines, key=_step_of)


def _step_of(line: str) -> int:
    return int(line.split("step ")[1].split()[0]) if "step " in line else -1


def _stored_history() -> StoredHistory:
    return StoredHistory(
        metrics=[MetricRecord(0, 100.0 + step, step, protocol.LOSS, 1.0 / (step + 1), "auto") for step in range(5)],
        gpu_samples=[GpuSample(100.0 + i, 0, 50.0, 10**9, 8 * 10**10, None, None, None) for i in range(3)],
        process_samples=[ProcessSample(100.0 + i, 0, 42, 90.0, 10**8, 4) for i in range(3)],
        logs=[LogLine(0, 100.0 + i, "stdout", f"stored {i}", None) for i in range(3)],
        events=[], decimated=True, left_out={"metrics": 7, "logs": 10})


def test_live_updates_held_while_the_store_is_read_follow_its_history():
    model = MonitorModel()
    model.history_from_store = True
    model.apply(SnapshotMessage(RunInfo(id=1, created=1.0, status="running"), (), (), {}))
    # what came live while the store was read: right after the rows it holds
    model.apply(update(t=106.0, metrics=[MetricRecord(0, 100.0 + step, step, protocol.LOSS, 1.0 / (step + 1), "auto")
                                         for step in range(5, 8)],
                       gpus=[GpuSample(100.0 + i, 0, 50.0, 10**9, 8 * 10**10, None, None, None) for i in range(3, 5)],
                       procs=[ProcessSample(100.0 + i, 0, 42, 90.0, 10**8, 4) for i in range(3, 5)],
                       logs=[LogLine(0, 104.0, "stdout", "live", None)]))
    model.apply(HistoryEnd(stored_through={"metrics": 5}))
    assert model.series(protocol.LOSS) == {} and not model.logs.entries  # held: shown after the history
    assert not model.history_done

    finished = []
    model.history_finished.connect(lambda: finished.append(True))
    model.take_stored_history(_stored_history())

    assert list(model.series(protocol.LOSS)[0].steps.values) == [0, 1, 2, 3, 4, 5, 6, 7]
    assert list(model.series(GPU_UTILIZATION)[0].times.values) == [100.0, 101.0, 102.0, 103.0, 104.0]
    assert list(model.series(CPU_PERCENT)[0].times.values) == [100.0, 101.0, 102.0, 103.0, 104.0]
    assert [entry.line for entry in model.logs.entries] == ["stored 0", "stored 1", "stored 2", "live"]
    assert model.logs.total == 14 and model.logs.dropped == 10  # the older ones stay in the store
    assert model.history_done and finished == [True]
    assert model.state.history_end == HistoryEnd(True, {"metrics": 7, "logs": 10}, {"metrics": 5})


def test_a_history_that_could_not_be_read_lets_the_held_updates_in_as_they_came():
    model = MonitorModel()
    model.history_from_store = True
    model.apply(SnapshotMessage(RunInfo(id=1, created=1.0, status="running"), (), (), {}))
    model.apply(update(t=102.0, metrics=[MetricRecord(0, 100.0 + step, step, protocol.LOSS, 1.0, "auto")
                                         for step in range(3)]))
    model.take_stored_history(None)
    assert list(model.series(protocol.LOSS)[0].steps.values) == [0, 1, 2]
    model.apply(update(t=103.0, metrics=[MetricRecord(0, 103.0, 3, protocol.LOSS, 1.0, "auto")]))
    assert len(model.series(protocol.LOSS)[0]) == 4  # live from now on


def test_a_store_that_holds_another_run_by_that_id_makes_the_panel_ask_the_hub(qtbot, panel, tmp_path):
    """The GUI's store (``RANKWATCH_HOME``) has a run 1 of its own; the hub writes run 1 into
    another store. The history read here would be another run's: the panel asks the hub to
    replay it instead, and charts what the hub's run holds."""
    loop = LoopThread("test-hubs")
    try:
        gui_hub, _gui_socket = loop.run(open_hub(tmp_path / "gui", store_path=paths.store_path()))
        loop.run(gui_hub.close(reason="succeeded"))
        hub, socket_path = loop.run(open_hub(tmp_path / "other"))
        assert hub.run_id == gui_hub.run_id
        sent = loop.run(fake_worker(socket_path, 0, 300))
        loop.run(hub.flush())
        asked = []
        real_add = hub.publisher.add

        async def add(subscriber, **options):
            asked.append(options["from_store"])
            await real_add(subscriber, **options)

        hub.publisher.add = add
        panel._live = True
        panel._subscribe(str(socket_path))
        qtbot.waitUntil(lambda: panel.model.history_done and len(asked) == 2, timeout=10_000)
        assert asked == [True, False]
        assert len(panel.model.series(protocol.LOSS)[0]) == sent
        loop.run(hub.close(reason="succeeded"))
    finally:
        loop.stop()
