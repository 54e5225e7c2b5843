"""One real 2-rank CPU run of the bundled example (`rankwatch run --example`), shared by
the assertions about output, attribution, the checkpoint and the stored telemetry."""

from __future__ import annotations

import os
import re
import time

import pytest

from runner.store.store import RunStore
from tests.jobs import rankwatch

pytestmark = pytest.mark.torchrun


@pytest.fixture(scope="module")
def example_run(tmp_path_factory):
    home = tmp_path_factory.mktemp("example-home")
    env = dict(os.environ, RANKWATCH_HOME=str(home))
    started = time.monotonic()
    result = rankwatch("run", "--example", "--plain", "--", "--epochs", "3", env=env, timeout=240)
    return {"result": result, "home": home, "seconds": time.monotonic() - started,
            "store": home / "data" / "runs.db"}


def test_example_exits_zero(example_run):
    # Its duration (~12 s on a quiet machine) is a benchmark figure, not asserted here: the
    # fixture's timeout only guards against a hang.
    result = example_run["result"]
    assert result.returncode == 0, result.stderr[-3000:]


def test_every_rank_line_is_attributed_to_its_rank(example_run):
    out = example_run["result"].stdout
    assert re.search(r"^\[rank 0\] rank 0/2 \(local rank 0\)", out, re.M)
    assert re.search(r"^\[rank 1\] rank 1/2 \(local rank 1\)", out, re.M)
    # rank 0 alone prints the loss, as in the tutorials; none of it is attributed to rank 1
    assert re.search(r"^\[rank 0\] epoch 0 step 0 loss: ", out, re.M)
    assert not re.search(r"^\[rank 1\] epoch", out, re.M)


def test_checkpoint_is_written_once_by_rank_zero(example_run):
    out = example_run["result"].stdout
    assert len(re.findall(r"checkpoint saved to", out)) == 1
    assert (example_run["home"] / "data" / "example" / "checkpoint.pt").is_file()


def test_store_has_loss_step_time_and_data_wait_for_both_ranks(example_run):
    with RunStore(example_run["store"], readonly=True) as store:
        run_id = store.resolve_run_id("last")
        assert store.stored_run(run_id).status == "succeeded"
        for rank in (0, 1):
            for name in ("loss", "step_time", "data_wait"):
                assert store.metrics(run_id, name=name, rank=rank), f"no {name} for rank {rank}"


def test_stored_loss_equals_what_rank_zero_printed(example_run):
    printed = {int(step): float(loss) for step, loss in
               re.findall(r"^\[rank 0\] epoch \d+ step (\d+) loss: ([\d.]+)", example_run["result"].stdout, re.M)}
    assert len(printed) >= 10
    with RunStore(example_run["store"], readonly=True) as store:
        stored = {record.step: record.value for record in
                  store.metrics(store.resolve_run_id("last"), name="loss", rank=0, source="auto")}
    for step, loss in printed.items():
        assert round(stored[step], 4) == loss, f"step {step}"


def test_summary_says_it_succeeded(example_run):
    assert "succeeded (exit code 0)" in example_run["result"].stderr
