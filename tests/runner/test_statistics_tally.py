"""The statistics the hub tallies as records arrive are those computed from the stored records.

The store's computation reads every record back (two minutes for a 1,024-rank run of ten
minutes); the tally adds each record up once, as ingest takes it. Both are run here on the same
records, written to a real SQLite store, and compared figure by figure: measured step rows with
phases, a wait that arrives in a later message than its step time, skipped steps, a NaN loss,
losses logged and parsed beside the measured ones, keys the script logged, GPU memory readings,
records without a step. And a real hub on a real socket keeps the tallied ones.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import random
import time

import pytest

from rankwatch import protocol
from runner.cli import run_history
from runner.store import run_figures
from runner.store.rank_stats import (
    RankStats,
    computed_run_statistics,
    run_statistics,
    statistics_with,
)
from runner.store.statistics_tally import EXACT_STEP_TIMES, STEP_TIME_BIN, RunTally, StepTimes
from runner.store.store import RecordBatch, RunStore
from tests.hubs import hello, open_hub

T0 = 1_700_000_000.0


def _step_row(rng: random.Random, step: int, t: float, skipped: bool = False, nan_loss: bool = False) -> list:
    step_time = 0.2 * (1 + rng.random())
    wait = step_time * 0.1 * rng.random()
    phases = [protocol.CLOCK_CPU, wait, *(step_time * share for share in (0.05, 0.3, 0.4, 0.1, 0.05, 0.0))]
    loss = math.nan if nan_loss else 2.0 * math.exp(-step / 50) + rng.random() / 10
    return [t, step, loss, step_time, wait, 16, 0.001, skipped, phases]


def _rank_messages(rank: int, steps: int) -> list[list[list]]:
    """One rank's metric messages (wire items), varied as real scripts make them."""
    rng = random.Random(rank)
    messages: list[list[list]] = []
    for step in range(steps):
        t = T0 + step * 0.25 + rank * 0.001
        row = _step_row(rng, step, t, skipped=step % 17 == 5, nan_loss=step == 9)
        if rank == 2 and step % 3 == 0:  # the wait arrives in the next message, not beside its step time
            waited = row[4]
            row[4] = None
            messages.append([row])
            messages.append([[t + 0.01, step, protocol.DATA_WAIT, waited, protocol.SOURCE_AUTO]])
        else:
            messages.append([row])
        if step % 4 == 0 and rank != 1:
            messages.append([[t, step, protocol.LOSS, 1.5 + rng.random(), protocol.SOURCE_LOG],
                             [t, step, "lr", 0.1 / (step + 1), protocol.SOURCE_LOG]])
        if step % 5 == 0 and rank == 0:
            messages.append([[t, step, protocol.LOSS, 3.0 + rng.random(), protocol.SOURCE_PARSED],
                             [t, step, "val_loss", None if step == 10 else rng.random(), protocol.SOURCE_PARSED]])
        if step % 6 == 0:
            messages.append([[t, None, protocol.GPU_MEMORY_ALLOCATED, 1e9 + step, protocol.SOURCE_AUTO],
                             [t, None, protocol.GPU_MEMORY_RESERVED, 2e9 + step, protocol.SOURCE_AUTO],
                             [t, None, protocol.GPU_MEMORY_PEAK, 3e9 - step, protocol.SOURCE_AUTO]])
    return messages


def _records(rank: int, items: list[list]) -> list[protocol.MetricRow]:
    return protocol.Metrics.from_wire({"rank": rank, "items": items}).records


def _assert_same(tallied: list[RankStats], computed: list[RankStats]) -> None:
    assert [entry.rank for entry in tallied] == [entry.rank for entry in computed]
    for ours, theirs in zip(tallied, computed, strict=True):
        for name, value in ours.to_json().items():
            expected = getattr(theirs, name)
            if isinstance(value, (float, dict)):
                assert value == pytest.approx(expected, rel=1e-9), (ours.rank, name)
            else:
                assert value == expected, (ours.rank, name)


def test_the_tally_of_a_runs_records_equals_the_statistics_computed_from_the_store(tmp_path):
    tally = RunTally()
    with RunStore(tmp_path / "runs.db") as store:
        run_id = store.create_run(run_key="k", profile=None, spec_toml="", command=None, host="h", workdir=None,
                                  runner_pid=1, socket=None, world_size=4, status="running")
        for rank in range(4):
            for items in _rank_messages(rank, 60):
                records = _records(rank, items)
                tally.add(rank, records)
                store.write_batch(run_id, RecordBatch(metrics=records))
        computed, computed_logged = computed_run_statistics(store, run_id)
        tallied, tallied_logged = statistics_with(store, run_id, tally.figures(), tally.logged_keys())
        _assert_same(tallied, computed)
        assert tallied_logged == computed_logged
        assert [key.name for key in tallied_logged] == ["lr", "val_loss"]
        assert computed[0].loss_source == protocol.SOURCE_AUTO and computed[0].skipped_steps == 4
        assert computed[2].data_wait_share is not None
        (ours, known), theirs = tally.run_figures(), run_figures.computed_run_figures(store, [run_id])[run_id]
        assert known and ours is not None and ours.steps == theirs.steps == 60
        assert ours.final_loss == pytest.approx(theirs.final_loss, rel=1e-9)
        assert ours.best_loss == pytest.approx(theirs.best_loss, rel=1e-9)
        assert ours.samples_per_s == pytest.approx(theirs.samples_per_s, rel=1e-9)


def test_a_ranks_loss_from_a_better_source_replaces_its_other_losses_in_the_runs_means(tmp_path):
    """Rank 1 logs its loss first and is measured later: its logged losses leave the per-step
    means, as the store's query keeps one source per rank."""
    tally = RunTally()
    with RunStore(tmp_path / "runs.db") as store:
        run_id = store.create_run(run_key="k", profile=None, spec_toml="", command=None, host="h", workdir=None,
                                  runner_pid=1, socket=None, world_size=2, status="running")
        batches = [(0, [[T0, 0, protocol.LOSS, 1.0, protocol.SOURCE_AUTO]]),
                   (1, [[T0, 0, protocol.LOSS, 9.0, protocol.SOURCE_LOG]]),
                   (0, [[T0 + 1, 1, protocol.LOSS, 0.5, protocol.SOURCE_AUTO]]),
                   (1, [[T0 + 1, 1, protocol.LOSS, 0.7, protocol.SOURCE_AUTO],
                        [T0 + 1, 1, protocol.LOSS, 8.0, protocol.SOURCE_LOG]])]
        for rank, items in batches:
            records = _records(rank, items)
            tally.add(rank, records)
            store.write_batch(run_id, RecordBatch(metrics=records))
        ours, known = tally.run_figures()
        theirs = run_figures.computed_run_figures(store, [run_id])[run_id]
        assert known and ours is not None and ours.steps == theirs.steps
        assert ours.final_loss == pytest.approx(theirs.final_loss) == 0.6
        assert ours.best_loss == pytest.approx(theirs.best_loss) == 0.6


def test_the_median_step_time_is_exact_while_few_and_within_the_bin_width_after():
    rng = random.Random(7)
    values = [rng.lognormvariate(-1.5, 0.3) for _ in range(EXACT_STEP_TIMES)]
    times = StepTimes()
    for value in values:
        times.add(value)
    exact = sorted(values)
    assert times.median() == (exact[len(exact) // 2 - 1] + exact[len(exact) // 2]) / 2
    more = [rng.lognormvariate(-1.5, 0.3) for _ in range(3 * EXACT_STEP_TIMES + 1)] + [0.0]
    for value in more:
        times.add(value)
    everything = sorted(values + more)
    truth = everything[len(everything) // 2] if len(everything) % 2 else \
        (everything[len(everything) // 2 - 1] + everything[len(everything) // 2]) / 2
    assert times.exact is None  # the histogram now
    assert times.median() == pytest.approx(truth, rel=STEP_TIME_BIN)


async def _send_ranks(socket_path, ranks: int, steps: int, exit_after: bool) -> None:
    """Fake workers on the real protocol: each rank's hello, its varied messages, maybe its exit."""
    for rank in range(ranks):
        _reader, writer = await asyncio.open_unix_connection(str(socket_path))
        writer.write(hello(rank))
        for items in _rank_messages(rank, steps):
            writer.write(protocol.encode_metric_items(rank, items))
        if exit_after:
            writer.write(protocol.Exit(rank, time.time(), 0).encode())
        await writer.drain()
        writer.close()
        await writer.wait_closed()
    await asyncio.sleep(0.3)


async def _a_varied_run(tmp_path) -> tuple[int, int]:
    hub, socket_path = await open_hub(tmp_path)
    await _send_ranks(socket_path, 3, 40, exit_after=True)
    await hub.update_run(ended=time.time(), status="succeeded", exit_code=0)
    run_id, taken = hub.run_id, hub.ingest.tally.records
    await hub.close(reason="succeeded")
    assert run_id is not None
    return run_id, taken


def test_the_hub_keeps_the_statistics_it_tallied_from_every_record_it_stored(tmp_path):
    run_id, taken = asyncio.run(_a_varied_run(tmp_path))
    with RunStore(tmp_path / "runs.db") as store:
        assert taken == store.count("metrics", run_id)
        computed, logged = computed_run_statistics(store, run_id)
        kept, kept_logged = run_statistics(store, run_id)  # the kept row
        _assert_same(kept, computed)
        assert kept_logged == logged
        kept_figures = run_figures.run_figures(store, [run_id])[run_id]
        computed_figures = run_figures.computed_run_figures(store, [run_id])[run_id]
        assert kept_figures.steps == computed_figures.steps == 40
        assert kept_figures.final_loss == pytest.approx(computed_figures.final_loss, rel=1e-9)


def test_a_record_the_tally_cannot_add_stops_the_tally_not_ingest():
    tally = RunTally()
    tally.add(0, [(0, T0, 0, protocol.LOSS, 1.0, protocol.SOURCE_AUTO)])
    tally.add(0, [(0, T0, "one", protocol.LOSS, 1.0, protocol.SOURCE_AUTO)])  # type: ignore[list-item]
    assert tally.failed is not None and "TypeError" in tally.failed
    tally.add(0, [(0, T0, 2, protocol.LOSS, 1.0, protocol.SOURCE_AUTO)])  # ignored, without raising


async def _a_live_run_with_its_tally_written(tmp_path) -> int:
    hub, socket_path = await open_hub(tmp_path)
    await _send_ranks(socket_path, 2, 30, exit_after=False)
    await hub.flush()
    await hub.keep_live_statistics()
    run_id = hub.run_id
    await hub.close(reason="runner gone")  # not ended: nothing kept, the live row stays
    assert run_id is not None
    return run_id


def test_a_live_runs_statistics_are_read_from_what_its_hub_tallied_while_fresh(tmp_path, monkeypatch, capsys):
    run_id = asyncio.run(_a_live_run_with_its_tally_written(tmp_path))
    monkeypatch.setenv("RANKWATCH_STORE", str(tmp_path / "runs.db"))
    assert run_history.show_main(argparse.Namespace(run=str(run_id), json=False, ranks=None)) == 0
    assert "ranks (as the hub had counted them at " in capsys.readouterr().out  # says how fresh they are
    with RunStore(tmp_path / "runs.db") as store:
        computed = computed_run_statistics(store, run_id)
        figures = run_figures.computed_run_figures(store, [run_id])[run_id]
        assert [entry.steps for entry in computed[0]] == [30, 30]
        store.connection.execute("DELETE FROM metrics WHERE run_id = ?", (run_id,))  # only the tally can tell now
        store.connection.commit()
        live, logged = run_statistics(store, run_id)
        _assert_same(live, computed[0])
        assert logged == computed[1]
        assert run_figures.run_figures(store, [run_id])[run_id].steps == figures.steps == 30
        # a tally its hub stopped writing (the runner stuck for minutes) is not read
        store.connection.execute("UPDATE live_statistics SET t = t - ?", (run_figures.LIVE_STALE_SECONDS + 1,))
        store.connection.commit()
        assert [entry.steps for entry in run_statistics(store, run_id)[0]] == [None, None]
        assert run_id not in run_figures.run_figures(store, [run_id])
        # nor is a fresh one of a runner that is gone: it stored records after its last tally
        store.connection.execute("UPDATE live_statistics SET t = ?", (time.time(),))
        store.connection.execute("UPDATE runs SET runner_pid = ? WHERE id = ?", (2**22 + 1, run_id))
        store.connection.commit()
        assert [entry.steps for entry in run_statistics(store, run_id)[0]] == [None, None]
        assert run_id not in run_figures.run_figures(store, [run_id])


def test_a_long_runs_loss_means_are_folded_and_its_runs_list_figures_stay_those_of_the_store(tmp_path):
    """A run of days has hundreds of thousands of steps: the tally keeps the newest
    ``LOSS_STEPS_KEPT`` steps' means open and folds older ones into the best and the newest, so it
    holds a bounded amount. A loss for a step at or before the folded ones makes it defer to the
    store."""
    from runner.store.statistics_tally import LOSS_SEAL_BATCH, LOSS_STEPS_KEPT

    steps = LOSS_STEPS_KEPT + 3 * LOSS_SEAL_BATCH
    rng = random.Random(3)
    tally = RunTally()
    with RunStore(tmp_path / "runs.db") as store:
        run_id = store.create_run(run_key="k", profile=None, spec_toml="", command=None, host="h", workdir=None,
                                  runner_pid=1, socket=None, world_size=2, status="running")
        by_rank = []
        for rank in range(2):
            losses = [2.0 - step / steps + rng.random() / 10 for step in range(steps)]
            losses[500] = 0.01 if rank == 0 else 0.03  # the best mean, early: folded away long before the end
            by_rank.append(_records(rank, [[T0 + step, step, protocol.LOSS, loss, protocol.SOURCE_AUTO]
                                           for step, loss in enumerate(losses)]))
            store.write_batch(run_id, RecordBatch(metrics=by_rank[-1]))
        for first in range(0, steps, 500):  # the ranks' batches interleaved, as a hub receives them
            for rank, records in enumerate(by_rank):
                tally.add(rank, records[first:first + 500])
        assert len(tally._loss_steps[0]) <= LOSS_STEPS_KEPT + LOSS_SEAL_BATCH  # bounded, not every step
        (ours, known), theirs = tally.run_figures(), run_figures.computed_run_figures(store, [run_id])[run_id]
        assert known and ours is not None
        assert ours.best_loss == pytest.approx(theirs.best_loss) == pytest.approx(0.02)
        assert ours.final_loss == pytest.approx(theirs.final_loss) and ours.steps == theirs.steps == steps
        tally.add(1, _records(1, [[T0 + steps, 7, protocol.LOSS, 5.0, protocol.SOURCE_AUTO]]))  # a folded step again
        assert tally.run_figures() == (None, False)  # left to the store
