"""Data wait and samples per step (the rule in ``rankwatch._data_wait``), on real torch, in-process.

Training batches come from a dataset that sleeps ``TRAIN_SECONDS`` per batch, evaluation
batches from one that sleeps ``EVAL_SECONDS`` (much longer), so which waits a step
counted shows in its data wait; samples tell which batches were counted.
"""

from __future__ import annotations

import time

import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset
from worker_harness import FakeHub, run_worker, worker_environment

from rankwatch import protocol
from runner.hub.live_model import LiveModel

TRAIN_SECONDS = 0.02
EVAL_SECONDS = 0.15
TRAIN_BATCH = 4
EVAL_BATCH = 5


class Sleepy(Dataset):
    """Samples that take ``seconds_per_batch / batch_size`` each to produce."""

    def __init__(self, size: int, batch_size: int, seconds_per_batch: float):
        self.size = size
        self.delay = seconds_per_batch / batch_size

    def __len__(self):
        return self.size

    def __getitem__(self, index):
        time.sleep(self.delay)
        return torch.full((8,), float(index % 7)), torch.ones(1)


def _train_loader(batches: int = 100) -> DataLoader:
    return DataLoader(Sleepy(batches * TRAIN_BATCH, TRAIN_BATCH, TRAIN_SECONDS), batch_size=TRAIN_BATCH)


def _eval_loader(batches: int = 3) -> DataLoader:
    return DataLoader(Sleepy(batches * EVAL_BATCH, EVAL_BATCH, EVAL_SECONDS), batch_size=EVAL_BATCH)


def _train_step(model, optimizer, batch) -> None:
    x, y = batch
    F.mse_loss(model(x), y).backward()
    optimizer.step()
    optimizer.zero_grad()


def _setup():
    model = torch.nn.Linear(8, 1)
    return model, torch.optim.SGD(model.parameters(), lr=0.01)


def test_a_script_without_a_data_loader_has_no_data_wait_not_a_zero(measured):
    model, optimizer = _setup()
    for _ in range(3):
        _train_step(model, optimizer, (torch.randn(4, 8), torch.randn(4, 1)))

    steps = measured.steps()
    assert [step["data_wait"] for step in steps] == [None, None, None]
    assert [step["samples"] for step in steps] == [0, 0, 0]


def test_training_batches_count_from_the_first_batch_of_each_epoch(measured):
    model, optimizer = _setup()
    for _epoch in range(2):
        for batch in _train_loader(batches=3):  # a fresh iterator every epoch
            _train_step(model, optimizer, batch)

    steps = measured.steps()
    assert len(steps) == 6
    for step in steps:
        assert step["data_wait"] >= TRAIN_SECONDS * 0.9, step
        assert step["samples"] == TRAIN_BATCH


def test_accumulated_micro_batches_all_count(measured):
    model, optimizer = _setup()
    batches = iter(_train_loader())
    for _ in range(3):
        for _ in range(4):
            x, y = next(batches)
            (F.mse_loss(model(x), y) / 4).backward()
        optimizer.step()
        optimizer.zero_grad()

    for step in measured.steps():
        assert step["data_wait"] >= 4 * TRAIN_SECONDS * 0.9
        assert step["samples"] == 4 * TRAIN_BATCH


@pytest.mark.parametrize("evaluation", ["no_grad, stopped early", "autograd on, to its end"])
def test_evaluation_batches_between_two_steps_are_not_the_next_steps_wait(measured, evaluation):
    """no_grad and a limit on batches: Lightning's validation loop (``limit_val_batches``) and
    most scripts. Autograd on, iterated to its end: the Hugging Face ``Trainer.evaluate``."""
    model, optimizer = _setup()
    batches = iter(_train_loader())
    _train_step(model, optimizer, next(batches))
    for _ in range(2):
        autograd = evaluation.startswith("autograd")
        evaluation_batches = iter(_eval_loader(batches=4))  # kept alive, as Lightning's fetcher does
        with torch.set_grad_enabled(autograd):
            for index, (x, y) in enumerate(evaluation_batches):
                if not autograd and index == 3:
                    break
                with torch.no_grad():
                    F.mse_loss(model(x), y)
        _train_step(model, optimizer, next(batches))

    steps = measured.steps()
    assert len(steps) == 3
    for step in steps:
        assert step["samples"] == TRAIN_BATCH  # not the evaluation's batches of 5
        assert TRAIN_SECONDS * 0.9 <= step["data_wait"] < EVAL_SECONDS  # 3 x 0.15 s were evaluation
        assert step["step_time"] is None or step["step_time"] >= step["data_wait"]
    assert steps[1]["step_time"] >= 3 * EVAL_SECONDS  # the evaluation is still in the step's time


def test_an_iterator_with_prefetching_counts_every_training_batch(measured):
    """accelerate's DataLoaderShard and Lightning's fetcher take the next batch before the
    current one's backward; at the end the iterator runs out before the last backward."""
    model, optimizer = _setup()

    def prefetching(loader):
        iterator = iter(loader)
        current = next(iterator)
        for upcoming in iterator:
            yield current
            current = upcoming
        yield current

    for _epoch in range(2):
        for batch in prefetching(_train_loader(batches=3)):
            _train_step(model, optimizer, batch)

    steps = measured.steps()
    assert sum(step["samples"] for step in steps) == 6 * TRAIN_BATCH
    assert sum(step["data_wait"] or 0.0 for step in steps) >= 6 * TRAIN_SECONDS * 0.9


def test_without_a_data_loader_no_data_wait_reaches_the_hub_and_its_live_row_stays_unmeasured():
    with FakeHub() as hub:
        completed = run_worker(["no_loader.py"], worker_environment(hub.address))
        assert completed.returncode == 0, completed.stderr
        hub.wait_message("exit")
        items = hub.metric_items()
    model = LiveModel()
    for t, step, name, value, source in items:
        model.on_metric(0, t, step, name, value, source)

    names = {item[2] for item in items}
    assert {protocol.LOSS, protocol.STEP_TIME} <= names
    assert protocol.DATA_WAIT not in names and protocol.SAMPLES_PER_SECOND not in names
    row = model.row(0)
    assert row.step == 4 and row.step_time is not None
    assert row.steps_per_s == 1.0 / row.step_time  # derived from the step time, never sent
    assert row.data_wait_share is None  # shown as "–", not 0 %
