"""What a bounded replay (or a big stored run opened) leaves out is counted up to
``HistoryEnd.COUNTED_UP_TO``, then said as "more than" that: counting 12.7 million process samples
to the last took 0.6 s of opening a 1,024-rank run."""

from __future__ import annotations

import pytest

from rankwatch import protocol
from rankwatch.protocol import ProcessSample
from runner.runstate.messages import HistoryEnd
from runner.store.replay_window import recent_start
from runner.store.store import RecordBatch, RunStore
from tests.runner.test_pyramid import new_run


@pytest.fixture
def counted_up_to_ten(monkeypatch):
    monkeypatch.setattr(protocol.HistoryEnd, "COUNTED_UP_TO", 10)


def test_rows_left_out_are_counted_exactly_up_to_the_limit_and_then_as_more(counted_up_to_ten):
    with RunStore() as store:
        run_id = new_run(store)
        store.write_batch(run_id, RecordBatch(process_samples=[ProcessSample(1000.0 + i, 0, 1, 50.0, 10, 1)
                                                               for i in range(40)]))
        last = store.last_rowids(run_id)["process_samples"]
        _start, few = recent_start(store.connection, "process_samples", run_id, last, keep=32)
        _start, many = recent_start(store.connection, "process_samples", run_id, last, keep=5)
    assert few == 8  # exact below the limit
    assert many == 11  # the limit and one more: "more than 10"
    assert "8 process samples are not shown" in HistoryEnd(False, {"process_samples": few}).describe(1)
    assert "more than 10 process samples are not shown" in HistoryEnd(False, {"process_samples": many}).describe(1)
