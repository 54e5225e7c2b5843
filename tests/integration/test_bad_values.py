"""A worker logging values no store can hold: every good record and line is stored, the bad ones
are dropped, counted per rank and told, and nothing prints a traceback. Cost: ~25 s (one real run)."""

from __future__ import annotations

import re

import pytest

from runner.store.store import RunStore
from tests.jobs import SCRIPTS, rankwatch

pytestmark = pytest.mark.torchrun

SECONDS = 15
"""Long enough for ~50 bad steps per rank among thousands of good ones."""


def test_out_of_range_values_every_100_steps_lose_nothing_else():
    result = rankwatch("run", "--plain", "--status-every", "0", "--nproc-per-node", "2", "--gpus", "cpu",
                       str(SCRIPTS / "out_of_range_values.py"), str(SECONDS), timeout=SECONDS + 120)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Traceback" not in result.stdout + result.stderr
    done = {int(rank): (int(steps), int(bad)) for rank, steps, bad in
            re.findall(r"^\[rank \d\] rank (\d) done: (\d+) steps, (\d+) bad records", result.stdout, re.M)}
    assert sorted(done) == [0, 1]
    with RunStore(readonly=True) as store:
        run_id = store.resolve_run_id("last")
        ranks = {row.rank: row for row in store.ranks(run_id)}
        for rank, (steps, bad) in done.items():
            losses = store.metrics(run_id, name="loss", rank=rank)
            assert [record.step for record in losses] == list(range(steps)), f"rank {rank}"
            assert len(store.metrics(run_id, name="fine", rank=rank)) == bad // 3  # the good half of a bad call
            printed = [row for row in store.log_lines(run_id, rank=rank) if re.match(r"rank \d step \d+$", row.line)]
            assert len(printed) == (steps + 9) // 10, f"rank {rank}"
            assert ranks[rank].rejected == bad and ranks[rank].dropped == 0
            assert ranks[rank].first_seen is not None
        told = store.stored_events(run_id, kind="records_rejected")
    assert {event.rank for event in told} == {0, 1}
    for rank, (_steps, bad) in done.items():
        assert f"rank {rank}: {bad} records dropped by the runner (values the store cannot hold)" in result.stderr
        assert max(e.fields["count"] for e in told if e.rank == rank) == bad
