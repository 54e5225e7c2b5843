"""An ended run's per-rank statistics are kept once by its hub and read back whole: `runs show`
reads one row instead of every record. A real hub on a real socket with its SQLite store, fake
workers speaking the real protocol."""

from __future__ import annotations

import asyncio
import time

from rankwatch import protocol
from runner.store import rank_stats, run_figures
from runner.store.rank_stats import computed_run_statistics, keep_run_statistics, run_statistics
from runner.store.store import RunStore
from tests.hubs import fake_worker, open_hub


async def _a_run(tmp_path, end: bool) -> int:
    hub, socket_path = await open_hub(tmp_path)
    await asyncio.gather(*(fake_worker(socket_path, rank, 600) for rank in range(3)))
    await asyncio.sleep(0.3)
    if end:
        await hub.update_run(ended=time.time(), status="succeeded", exit_code=0)
    run_id = hub.run_id
    await hub.close(reason="succeeded" if end else "runner gone")
    assert run_id is not None
    return run_id


def test_the_hub_keeps_an_ended_runs_statistics_equal_to_those_computed_from_its_records(tmp_path):
    run_id = asyncio.run(_a_run(tmp_path, end=True))
    with RunStore(tmp_path / "runs.db") as store:
        computed = computed_run_statistics(store, run_id)
        assert [entry.last_step for entry in computed[0]] == [599, 599, 599]
        [(version,)] = store.connection.execute("SELECT version FROM run_statistics WHERE run_id = ?", (run_id,))
        assert version == run_figures.KEPT_VERSION
        assert run_statistics(store, run_id) == computed
        figures = run_figures.computed_run_figures(store, [run_id])
        assert figures[run_id].steps == 600 and figures[run_id].samples_per_s is None  # losses only
        assert run_figures.run_figures(store, [run_id]) == figures
        # read from the kept row, not the records: with the records gone the figures stay
        store.connection.execute("DELETE FROM metrics WHERE run_id = ?", (run_id,))
        store.connection.commit()
        assert run_statistics(store, run_id) == computed
        assert computed_run_statistics(store, run_id)[0][0].last_step is None
        assert run_figures.computed_run_figures(store, [run_id]) == {}
        assert run_figures.run_figures(store, [run_id]) == figures


def test_a_run_that_did_not_end_keeps_nothing_and_figures_of_another_version_are_not_read(tmp_path, monkeypatch):
    run_id = asyncio.run(_a_run(tmp_path, end=False))
    with RunStore(tmp_path / "runs.db") as store:
        assert not store.connection.execute("SELECT * FROM run_statistics").fetchall()
        kept = keep_run_statistics(store, run_id)
        store.connection.execute("DELETE FROM metrics WHERE run_id = ? AND name = ?", (run_id, protocol.LOSS))
        store.connection.commit()
        assert run_statistics(store, run_id) == kept  # kept: read back as they were
        monkeypatch.setattr(rank_stats, "KEPT_VERSION", run_figures.KEPT_VERSION + 1)
        assert run_statistics(store, run_id)[0][0].last_loss is None  # another version: computed afresh
