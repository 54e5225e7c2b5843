"""Telemetry from unmodified scripts, end to end: a silent script's loss, export, attach."""

from __future__ import annotations

import csv
import json
import re

import pytest

from runner.store.store import RunStore
from tests.jobs import SCRIPTS, rankwatch, wait_for

pytestmark = pytest.mark.torchrun


def test_a_script_that_prints_nothing_still_shows_per_rank_loss(tmp_path):
    result = rankwatch("run", "--plain", "--status-every", "0.5", "--nproc-per-node", "2",
                       str(SCRIPTS / "silent_train.py"))
    assert result.returncode == 0, result.stderr[-2000:]
    assert not re.search(r"^\[rank \d\]", result.stdout, re.M)  # the script itself printed nothing
    # the end-of-run results carry each rank's loss (live status lines may or may not
    # have named both ranks before this short job ended, so they are not what is asserted)
    printed_last_loss = {
        int(rank): float(loss) for rank, loss in re.findall(
            r"^\[rankwatch\] rank (\d) \w+: \d+ steps, last loss (\d+\.\d{4})", result.stdout, re.M)}
    assert set(printed_last_loss) == {0, 1}, result.stdout
    with RunStore(readonly=True) as store:
        run_id = store.resolve_run_id("last")
        ranks = {row.rank: row for row in store.ranks(run_id)}
        for rank in (0, 1):
            losses = store.metrics(run_id, name="loss", rank=rank)
            assert len(losses) == 6 * 16  # 6 epochs x 16 steps per rank
            assert all(source == "auto" for *_, source in losses)
            assert printed_last_loss[rank] == pytest.approx(losses[-1].value, abs=1e-4)
            # nothing lost: every record the rank counted as sent (a step goes as one row, which the hub
            # expands into the step's records) is in the store
            stored = store.metrics(run_id, rank=rank)
            assert (ranks[rank].sent, ranks[rank].dropped, ranks[rank].rejected) == (len(stored), 0, 0)
            step_times = [record for record in stored if record.name == "step_time"]
            assert len(step_times) == 6 * 16 - 1  # the first step has no step before it
    exported = rankwatch("runs", "export", "last", "--csv", str(tmp_path / "csv"))
    assert exported.returncode == 0, exported.stderr
    rows = list(csv.DictReader((tmp_path / "csv" / "metrics.csv").open()))
    assert {r["rank"] for r in rows if r["name"] == "loss"} == {"0", "1"}


def test_detached_run_is_listed_live_and_attach_follows_it_to_the_end():
    started = rankwatch("run", "--detach", "--json", "--nproc-per-node", "2", str(SCRIPTS / "quiet_steps.py"), "6")
    assert started.returncode == 0, started.stderr
    info = json.loads(started.stdout)
    assert set(info) >= {"run_id", "socket", "pid", "log"}
    live = wait_for(lambda: json.loads(rankwatch("runs", "list", "--live", "--json").stdout), 20,
                    what="the run to be listed as live")
    assert [(run["id"], run["profile"]) for run in live] == [(info["run_id"], "quiet_steps")]
    attached = rankwatch("attach", str(info["run_id"]), "--plain", "--status-every", "1", timeout=120)
    assert attached.returncode == 0, attached.stderr[-2000:]
    # history first (lines printed before we attached), then live lines, then the summary
    assert re.search(r"^\[rank 0\] rank 0 step \d+", attached.stdout, re.M)
    assert re.search(r"^\[rank 1\] rank 1 step \d+", attached.stdout, re.M)
    assert "succeeded (exit code 0)" in attached.stderr
    assert json.loads(rankwatch("runs", "list", "--live", "--json").stdout) == []
