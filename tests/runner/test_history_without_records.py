"""A view of rank rows (the terminal's ``attach``) asks for a history without the stored records.

At 1,024 fake ranks, ``rankwatch attach`` took ~40 s to reach ``history_end``, replaying metric
records the terminal does not chart, and stayed behind the run all that time. With
``records=False`` the history is the log lines and events; the snapshot's rank rows carry the
figures the table shows. A real hub and store, a fake worker speaking the real protocol, real
``HubClient`` subscribers.
"""

from __future__ import annotations

import asyncio

from rankwatch import protocol
from tests.hubs import fake_worker, open_hub, stored_count
from tests.runner.test_bounded_replay import fill, replay

STORED_METRICS, STORED_LOGS = 20_000, 300


def test_a_history_without_records_has_the_lines_and_the_rank_rows_but_no_metric_records(tmp_path):
    async def scenario():
        hub, socket_path = await open_hub(tmp_path)
        try:
            await hub.writer.call(fill, hub.run_id, STORED_METRICS, STORED_LOGS)
            await fake_worker(socket_path, 0, 100)
            while stored_count(tmp_path, hub) < STORED_METRICS + 100:
                await asyncio.sleep(0.05)
            return await asyncio.wait_for(replay(socket_path, records=False), 30), await asyncio.wait_for(
                replay(socket_path, records=True), 60)
        finally:
            await hub.close(reason="succeeded")

    rows_only, charted = asyncio.run(scenario())
    assert rows_only["history_end"] is not None and rows_only["metrics"] == []
    assert [line[3] for line in rows_only["logs"]] == [f"line {index}" for index in range(STORED_LOGS)]
    assert rows_only["ranks"] == charted["ranks"] >= 1
    assert charted["metrics"], "a subscriber that charts still gets the records"


def test_an_old_subscribe_without_the_field_still_gets_the_records():
    assert protocol.Subscribe.from_wire({"type": "subscribe", "history": True}).records is True
    assert protocol.Subscribe.from_wire(protocol.Subscribe(records=False).to_wire()).records is False
