"""One bad metric item costs only itself: rejected, counted and named, never the records beside it."""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path

from rankwatch import protocol
from rankwatch._buffer import KIND_LOG, RecordBuffer
from rankwatch._reporter import Reporter
from rankwatch._values import capture_all
from runner.store.store import RunStore
from tests.hubs import TOKEN, open_hub, stored_count

LONG_NAME = "x" * (2 << 20)  # alone, over a line's bound (MAX_LINE_BYTES)


def _rejected_events(tmp_path: Path, hub) -> list[protocol.Event]:
    with RunStore(tmp_path / "runs.db", readonly=True) as store:
        return store.stored_events(hub.run_id, kind="records_rejected")


def test_an_oversized_name_and_a_string_value_cost_only_their_own_records(tmp_path):
    """The real reporter sends a rank's 47 good values beside a 2 MiB name, two names of 129+
    characters that share their first 128, and a lone surrogate string: the 47 are stored,
    the 4 others rejected, counted and named, and no record is said lost to a broken connection."""
    async def scenario():
        hub, socket_path = await open_hub(tmp_path)
        buffer = RecordBuffer()
        reporter = Reporter(str(socket_path), protocol.Hello(rank=3, token=TOKEN, pid=os.getpid()), buffer, rank=3)
        reporter.start()
        good = {f"metric_{index}": float(index) for index in range(47)}
        bad = {LONG_NAME: 1.0, "y" * 128 + "a": 2.0, "y" * 128 + "b": 3.0, "note": "\ud800"}
        buffer.put((KIND_LOG, time.time(), 7, capture_all({**good, **bad})))
        await asyncio.sleep(0.5)
        assert await asyncio.to_thread(reporter.close, 5.0)
        await asyncio.sleep(0.3)
        losses = hub.model.ranks[3]
        await hub.close()
        return hub, losses
    hub, row = asyncio.run(scenario())
    assert stored_count(tmp_path, hub) == 47
    assert row.rejected == 4
    assert hub.stats["bad_line_oversized"] == 0
    with RunStore(tmp_path / "runs.db", readonly=True) as store:
        names = {name for _rank, _t, _step, name, *_ in store.metrics(hub.run_id)}
    assert not any(name.startswith("y") for name in names)  # never cut short into one merged key
    [event] = _rejected_events(tmp_path, hub)
    assert event.fields["reasons"] == {f"name longer than {protocol.MAX_NAME_CHARS} characters": 3,
                                 "value not a number": 1}
    message = event.message
    assert "e.g. 'note'" in message and "e.g. 'xxxx" in message


def test_a_string_value_on_the_wire_is_rejected_not_stored_as_unmeasured():
    rejected: dict[str, int] = {}
    examples: dict[str, str] = {}
    items = json.loads(json.dumps([[time.time(), 1, "lr", "0.1", "log"], [time.time(), 1, "ok", 1.0, "log"]]))
    records = protocol.metric_records(0, items, rejected, examples)
    assert [record[3] for record in records] == ["ok"]
    assert rejected == {"value not a number": 1} and examples == {"value not a number": "lr"}
