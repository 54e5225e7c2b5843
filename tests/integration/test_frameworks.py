"""Real frameworks under the real ``rankwatch run``: the stored loss is the one the framework reports.

One 2-rank job per framework (CPU, gloo, a tiny model, nothing downloaded), with
gradient accumulation, each shared by every test of that framework (module-scoped
fixtures). The training scripts (tests/scripts/frameworks/) record, per rank and per
optimizer step, what the framework itself reports; the tests compare it with the run
store and with ``rankwatch runs export last --csv``, and check the step counts and
that evaluation batches did not count as training data (samples per step).

* PyTorch Lightning, ``accumulate_grad_batches=2``: the mean of the values
  ``training_step`` returned and logged in the step (its progress bar and loggers
  show these), validation at every epoch's end;
* accelerate, ``gradient_accumulation_steps=3`` over 49 micro-batches an epoch: the
  mean of the micro-batch losses of the step, as its guide computes it, the epoch's
  last step (one micro-batch, its loss still divided by 3) included; an evaluation
  pass after every epoch;
* the Hugging Face ``Trainer``, ``gradient_accumulation_steps=2``: the sum of what
  ``training_step`` returned in the step, and the logged ``loss`` (the mean over
  ranks); run with ``--parse-stdout``, its printed logs must become one parsed curve
  per key;
* Lightning Fabric, the loss passed to ``fabric.backward``; a plain ``Fabric()`` under
  torchrun trains a whole copy per rank without a process group, which Rankwatch names
  (live and in the summary) with the way Fabric wants to be launched; with that
  environment (``--env LT_...``, what ``fabric run`` sets) the same script is one DDP job
  and nothing is named.
"""

from __future__ import annotations

import csv
import json
import os
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import pytest

from rankwatch.protocol import NO_PROCESS_GROUP, EventKind
from runner.store.store import RunStore
from tests.jobs import SCRIPTS, rankwatch

pytestmark = pytest.mark.torchrun

FRAMEWORKS = SCRIPTS / "frameworks"
RANKS = (0, 1)
RELATIVE = 1e-5


class FrameworkJob:
    """One finished job: the runner's result, the store, each rank's record, its CSV export."""

    def __init__(self, script: str, tmp: Path, *flags: str):
        self.home = tmp / "home"
        records = tmp / "records"
        records.mkdir()
        environment = dict(os.environ, RANKWATCH_HOME=str(self.home),
                           RANKWATCH_SOCKET_DIR=tempfile.mkdtemp(prefix="rw-", dir="/tmp"))  # fmt: skip
        started = time.monotonic()  # run once more after the upstream teardown abort (tests.jobs.rankwatch)
        self.result = rankwatch("run", "--plain", "--nproc-per-node", "2", *flags,
                                str(FRAMEWORKS / script), str(records), env=environment, timeout=300)  # fmt: skip
        self.seconds = time.monotonic() - started
        self.environment = environment
        output = self.result.stdout + self.result.stderr
        assert self.result.returncode == 0, self.result.stderr[-3000:] + self.result.stdout[-3000:]
        assert "rankwatch: instrumentation incomplete" not in output  # every hook in place
        self.records = {rank: json.loads((records / f"rank-{rank}.json").read_text()) for rank in RANKS}
        with RunStore(self.home / "data" / "runs.db", readonly=True) as store:
            run_id = store.resolve_run_id("last")
            self.rows = store.metrics(run_id)
        exported = rankwatch("runs", "export", "last", "--csv", str(tmp / "csv"), env=environment)
        assert exported.returncode == 0, exported.stderr
        with (tmp / "csv" / "metrics.csv").open(newline="") as handle:
            self.exported = list(csv.DictReader(handle))

    def stored(self, name: str, rank: int, source: str = "auto") -> dict[int, float]:
        values = {}
        for row_rank, _t, step, row_name, value, row_source in self.rows:
            if (row_rank, row_name, row_source) == (rank, name, source):
                assert step not in values, f"two {name} points at step {step} on rank {rank}"
                values[step] = value
        return values

    def exported_loss(self, rank: int) -> dict[int, float]:
        return {int(row["step"]): float(row["value"]) for row in self.exported
                if row["name"] == "loss" and row["source"] == "auto" and int(row["rank"]) == rank}  # fmt: skip

    def samples_per_step(self, rank: int) -> dict[int, float]:
        """Samples counted in each step (samples/s x step time; the first step has no step time)."""
        rates = self.stored("samples_per_s", rank)
        times = self.stored("step_time", rank)
        return {step: rates[step] * times[step] for step in rates}


def _job(tmp_path_factory, name: str, script: str, *flags: str) -> FrameworkJob:
    job = FrameworkJob(script, tmp_path_factory.mktemp(name), *flags)
    print(f"\n{name} job: {job.seconds:.1f} s")  # shown with -s; the cost of this file
    return job


def _assert_equal_per_step(stored: dict[int, float], reported: dict[int, float]) -> None:
    assert sorted(stored) == sorted(reported)
    for step, value in reported.items():
        assert stored[step] == pytest.approx(value, rel=RELATIVE), step


# -- PyTorch Lightning ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def lightning(tmp_path_factory) -> FrameworkJob:
    return _job(tmp_path_factory, "lightning", "lightning_accumulate.py")


def _lightning_reported(record: dict) -> dict[int, float]:
    logged = defaultdict(list)
    for batch in record["batches"]:
        logged[batch["step"]].append(batch["logged"])
    return {step: sum(values) / len(values) for step, values in logged.items()}


def test_lightning_stored_loss_is_the_mean_of_the_logged_training_step_losses(lightning):
    for rank in RANKS:
        record = lightning.records[rank]
        reported = _lightning_reported(record)
        assert record["global_step"] == 24 and sorted(reported) == list(range(24))
        _assert_equal_per_step(lightning.stored("loss", rank), reported)
        _assert_equal_per_step(lightning.exported_loss(rank), reported)
        # Lightning hands on_train_batch_end the loss divided by accumulate_grad_batches: their sum
        outputs = defaultdict(float)
        for batch in record["batches"]:
            outputs[batch["step"]] += batch["output"]
        _assert_equal_per_step(lightning.stored("loss", rank), dict(outputs))


def test_lightning_validation_batches_are_not_training_samples(lightning):
    for rank in RANKS:
        samples = lightning.samples_per_step(rank)
        assert sorted(samples) == list(range(1, 24))
        assert all(value == pytest.approx(8) for value in samples.values()), samples  # 2 x 4, no validation
        assert sorted(lightning.stored("data_wait", rank)) == list(range(24))


# -- accelerate -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def accelerate(tmp_path_factory) -> FrameworkJob:
    return _job(tmp_path_factory, "accelerate", "accelerate_accumulate.py")


ACCELERATE_GROUPS = ([3] * 16 + [1]) * 2
"""Micro-batches of each optimizer step: 2 epochs of 49, accumulated by 3, each ending with a step of 1."""
ACCELERATE_PARTIAL_STEPS = (16, 33)


def test_accelerate_stored_loss_is_the_mean_of_the_micro_batch_losses(accelerate):
    for rank in RANKS:
        record = accelerate.records[rank]
        reported = {int(step): value for step, value in record["steps"].items()}
        assert sorted(reported) == list(range(len(ACCELERATE_GROUPS)))
        assert [len(record["micro_batches"][str(step)]) for step in sorted(reported)] == ACCELERATE_GROUPS
        _assert_equal_per_step(accelerate.stored("loss", rank), reported)
        _assert_equal_per_step(accelerate.exported_loss(rank), reported)


def test_accelerate_partial_last_group_stores_its_micro_batch_loss_not_a_third_of_it(accelerate):
    for rank in RANKS:
        record, stored = accelerate.records[rank], accelerate.stored("loss", rank)
        for step in ACCELERATE_PARTIAL_STEPS:
            [own] = record["micro_batches"][str(step)]  # backpropagated as own / 3
            assert stored[step] == pytest.approx(own, rel=RELATIVE), step


def test_accelerate_evaluation_batches_are_not_training_samples(accelerate):
    steps = len(ACCELERATE_GROUPS)
    for rank in RANKS:
        samples = accelerate.samples_per_step(rank)
        # 2 epochs x 49 micro-batches of 4 samples; the loader fetches one batch ahead, so step 0
        # holds 3 or 4 of them and an epoch's last step none: its one micro-batch came with the step
        # before, it only meets the end of the loader (evaluation would add 24 per epoch)
        assert sorted(samples) == [step for step in range(1, steps) if step not in ACCELERATE_PARTIAL_STEPS]
        total = sum(samples.values())
        assert 2 * 49 * 4 - 4 * 4 <= total <= 2 * 49 * 4 - 3 * 4, samples
        assert all(value <= 4 * 4 + 0.01 for value in samples.values()), samples


# -- Hugging Face Trainer ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def hf_trainer(tmp_path_factory) -> FrameworkJob:
    return _job(tmp_path_factory, "hf-trainer", "hf_trainer_accumulate.py", "--parse-stdout")


def test_hf_trainer_stored_loss_is_what_training_step_returned_and_its_rank_mean_is_the_logged_loss(hf_trainer):
    stored = {}
    for rank in RANKS:
        record = hf_trainer.records[rank]
        reported = {int(step): value for step, value in record["training_step"].items()}
        assert record["global_step"] == 12 and sorted(reported) == list(range(12))
        stored[rank] = hf_trainer.stored("loss", rank)
        _assert_equal_per_step(stored[rank], reported)
        _assert_equal_per_step(hf_trainer.exported_loss(rank), reported)
    logged = {int(step): value for step, value in hf_trainer.records[0]["logged"].items()}
    mean_over_ranks = {step: (stored[0][step] + stored[1][step]) / 2 for step in stored[0]}
    _assert_equal_per_step(mean_over_ranks, logged)


def test_hf_trainer_evaluation_batches_are_not_training_samples(hf_trainer):
    assert hf_trainer.records[0]["evaluations"] == 3
    for rank in RANKS:
        samples = hf_trainer.samples_per_step(rank)
        assert all(value <= 2 * 4 + 0.01 for value in samples.values()), samples  # evaluation: 8 more


def test_hf_trainer_printed_logs_become_one_parsed_curve_per_key(hf_trainer):
    parsed = defaultdict(dict)
    for rank, _t, step, name, value, source in hf_trainer.rows:
        if source == "parsed":
            assert rank == 0  # the Trainer prints on the main process only
            assert step not in parsed[name], f"two parsed {name} points at step {step}"
            parsed[name][step] = value
    assert set(parsed) == {"loss", "grad_norm", "learning_rate", "epoch", "eval_loss", "eval_runtime",
                           "eval_samples_per_second", "eval_steps_per_second"}  # no train_runtime summary
    # Every step's printed loss (4 digits), at the step it was printed after: the lines reach the
    # runner before the steps' records do (runner.telemetry.printed_metrics)
    logged = {int(step): f"{value:.4g}" for step, value in hf_trainer.records[0]["logged"].items()}
    assert sorted(logged) == list(range(12))
    assert {step: f"{value:.4g}" for step, value in parsed["loss"].items()} == logged
    assert len(parsed["eval_loss"]) >= 2


# -- Lightning Fabric -------------------------------------------------------------------------

FABRIC_ENVIRONMENT = ("LT_CLI_USED=1", "LT_ACCELERATOR=cpu", "LT_DEVICES=2", "LT_STRATEGY=ddp")


def _fabric_findings(job: FrameworkJob) -> tuple[list[dict], dict]:
    """The run's ``no_process_group`` events and its summary, from the store."""
    with RunStore(job.home / "data" / "runs.db", readonly=True) as store:
        run_id = store.resolve_run_id("last")
        events = [event for event in store.stored_events(run_id, EventKind.LAUNCH_MISMATCH.value)
                  if event.fields.get("key") == NO_PROCESS_GROUP]
        return events, store.stored_run(run_id).summary or {}


@pytest.fixture(scope="module")
def fabric_plain(tmp_path_factory) -> FrameworkJob:
    return _job(tmp_path_factory, "fabric-plain", "fabric_train.py")


@pytest.fixture(scope="module")
def fabric_ddp(tmp_path_factory) -> FrameworkJob:
    return _job(tmp_path_factory, "fabric-ddp", "fabric_train.py",
                *(word for setting in FABRIC_ENVIRONMENT for word in ("--env", setting)))


def test_a_plain_fabric_under_torchrun_is_named_independent_copies_with_how_fabric_wants_to_be_launched(
        fabric_plain):
    for rank in RANKS:  # what Fabric itself says: two whole jobs of one process, no group
        record = fabric_plain.records[rank]
        assert (record["world_size"], record["global_rank"], record["strategy"], record["process_group"]) == (
            1, 0, "SingleDeviceStrategy", False)
    assert fabric_plain.records[0]["steps"] == fabric_plain.records[1]["steps"]  # the same training twice
    events, summary = _fabric_findings(fabric_plain)
    assert len(events) == 1
    title = "Lightning Fabric runs 2 independent copies under torchrun: no process group, identical losses"
    assert events[0].fields["title"] == title and events[0].fields["level"] == "warning"
    live = ("[rankwatch] torchrun started 2 processes (WORLD_SIZE=2), but no rank had a process group by its 5th "
            "optimizer step, and all report identical losses")
    assert live in fabric_plain.result.stderr  # the event, as the terminal prints it
    launch = " ".join(f"--env {setting}" for setting in FABRIC_ENVIRONMENT)
    assert f"`rankwatch run --nproc-per-node 2 {launch} SCRIPT`" in events[0].fields["advice"]
    [hint] = [hint for hint in summary["hints"] if hint["key"] == NO_PROCESS_GROUP]
    assert "the script uses Lightning Fabric, which counts a world of 1 on every rank (SingleDeviceStrategy)" in (
        hint["cause"])
    shown = rankwatch("runs", "show", "last", env=fabric_plain.environment)
    assert shown.returncode == 0, shown.stderr
    assert "hint: torchrun started 2 processes" in shown.stdout and launch in shown.stdout


def test_fabric_given_its_launch_environment_is_one_ddp_job_and_nothing_is_named(fabric_ddp):
    for rank in RANKS:
        record = fabric_ddp.records[rank]
        assert (record["world_size"], record["global_rank"], record["strategy"], record["process_group"]) == (
            2, rank, "DDPStrategy", True)
        assert sorted(map(int, record["steps"])) == list(range(32))  # each rank its half of the data
    assert fabric_ddp.records[0]["steps"] != fabric_ddp.records[1]["steps"]
    events, summary = _fabric_findings(fabric_ddp)
    assert events == [] and NO_PROCESS_GROUP not in [hint["key"] for hint in summary.get("hints") or []]


def test_fabric_stored_loss_is_the_loss_passed_to_fabric_backward(fabric_plain, fabric_ddp):
    for job in (fabric_plain, fabric_ddp):
        for rank in RANKS:
            reported = {int(step): value for step, value in job.records[rank]["steps"].items()}
            _assert_equal_per_step(job.stored("loss", rank), reported)
