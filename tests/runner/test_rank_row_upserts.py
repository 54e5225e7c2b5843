"""A flush's rank rows go into the store in batches (one statement per run of rows with the same
columns): every row must still land with its own values, in order, and a row naming a column the
store does not have must still refuse the whole write."""

from __future__ import annotations

import pytest

from runner.store.store import RecordBatch, RunStore


def _new_run(store: RunStore) -> int:
    return store.create_run(run_key="upserts", profile=None, spec_toml="", command=None, host="h", workdir=None,
                            runner_pid=1, socket=None, world_size=4, status="running")


def test_rank_rows_of_mixed_columns_are_each_stored_and_the_later_row_of_a_rank_wins(tmp_path):
    with RunStore(tmp_path / "runs.db") as store:
        run_id = _new_run(store)
        store.write_batch(run_id, RecordBatch(), [
            (0, {"host": "a", "pid": 10, "state": "running"}),
            (1, {"host": "b", "pid": 11, "state": "running"}),
            (2, {"state": "failed", "exit_code": 3}),
            (0, {"host": "a", "pid": 10, "state": "exited"}),
            (3, {"host": "d", "pid": 13, "state": "running"}),
        ])
        ranks = {row.rank: row for row in store.ranks(run_id)}

    assert sorted(ranks) == [0, 1, 2, 3]
    assert (ranks[0].host, ranks[0].pid, ranks[0].state) == ("a", 10, "exited")
    assert (ranks[1].host, ranks[1].state) == ("b", "running")
    assert (ranks[2].state, ranks[2].exit_code) == ("failed", 3)
    assert (ranks[3].host, ranks[3].pid) == ("d", 13)


def test_a_rank_row_with_an_unknown_column_refuses_the_whole_write(tmp_path):
    with RunStore(tmp_path / "runs.db") as store:
        run_id = _new_run(store)
        with pytest.raises(ValueError, match="not rank columns: \\['colour'\\]"):
            store.write_batch(run_id, RecordBatch(), [
                (0, {"host": "a", "state": "running"}),
                (1, {"host": "b", "colour": "red"}),
            ])
        assert store.ranks(run_id) == []
