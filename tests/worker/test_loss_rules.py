"""The loss of a step, shape by shape (the rule in ``rankwatch._loss``), on real torch, in-process.

Each test runs a few steps of a tiny CPU model in one training shape under the real
instrumentation (``in_process.measured``) and compares the step records it queued
with what the script itself computes the way frameworks report it.
"""

from __future__ import annotations

import functools
import math
import os
import socket

import pytest
import torch
import torch.nn.functional as F
from in_process import Measured
from torch.utils.checkpoint import checkpoint

STEPS = 4


def _model() -> torch.nn.Module:
    return torch.nn.Linear(8, 1)


def _batch(size: int = 4) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(size, 8), torch.randn(size, 1)


def _assert_losses(measured: Measured, expected: list[float]) -> None:
    reported = measured.losses()
    assert len(reported) == len(expected)
    for got, want in zip(reported, expected, strict=True):
        assert got == pytest.approx(want, rel=1e-6, abs=1e-9)


def test_one_backward_per_step_is_that_loss(measured):
    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    expected = []
    for _ in range(STEPS):
        loss = F.mse_loss(model(_batch()[0]), torch.zeros(4, 1))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        expected.append(loss.item())

    _assert_losses(measured, expected)
    assert [step["step"] for step in measured.steps()] == list(range(STEPS))


@pytest.mark.parametrize("micro_batches", [2, 4])
def test_gradient_accumulation_stores_the_mean_of_the_unscaled_micro_batch_losses(measured, micro_batches):
    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    expected = []
    for _ in range(STEPS):
        unscaled = []
        for _ in range(micro_batches):
            x, y = _batch()
            loss = F.mse_loss(model(x), y)
            (loss / micro_batches).backward()  # the idiom of Lightning, accelerate, HF, nanoGPT
            unscaled.append(loss.item())
        optimizer.step()
        optimizer.zero_grad()
        expected.append(sum(unscaled) / micro_batches)  # what those frameworks report

    _assert_losses(measured, expected)


def _accumulate_epochs(micro_batches: int, accumulate: int, backward, scaler=None, epochs: int = 2) -> list[float]:
    """``epochs`` passes over ``micro_batches`` micro-batches, an optimizer step every ``accumulate`` of
    them and at each epoch's end (accelerate's and Lightning's loop: the last group may be partial);
    ``backward(loss, accumulate)`` backpropagates a micro-batch's loss, a ``scaler`` steps (GradScaler).
    Returns what the frameworks
    report per step: the mean of the step's unscaled micro-batch losses."""
    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    expected, unscaled = [], []
    for _ in range(epochs):
        for index in range(micro_batches):
            x, y = _batch()
            loss = F.mse_loss(model(x), y)
            backward(loss, accumulate)
            unscaled.append(loss.item())
            if (index + 1) % accumulate == 0 or index + 1 == micro_batches:
                if scaler is None:
                    optimizer.step()
                else:
                    scaler.step(optimizer)
                    scaler.update()
                optimizer.zero_grad()
                expected.append(sum(unscaled) / len(unscaled))
                unscaled = []
    return expected


@pytest.mark.parametrize(
    ("micro_batches", "scale"),
    [(7, "divide"), (8, "divide"), (7, "multiply"), (7, "grad scaler")],
)  # fmt: skip
def test_a_partial_last_accumulation_group_stores_the_mean_of_its_unscaled_losses(measured, micro_batches, scale):
    """accelerate's ``gradient_accumulation_steps=3`` over 7 (8) micro-batches an epoch: steps of 3, 3
    and 1 (2) micro-batches, every one ``backward(loss / 3)``; the last step's loss is its one
    micro-batch's loss (the mean of its two), not a third (two thirds) of it."""
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**8)

    def backward(loss, accumulate):
        if scale == "divide":
            (loss / accumulate).backward()  # accelerate's accelerator.backward, Lightning, nanoGPT
        elif scale == "multiply":
            (loss * (1 / accumulate)).backward()
        else:
            scaler.scale(loss / accumulate).backward()  # nanoGPT and accelerate under fp16

    expected = _accumulate_epochs(micro_batches, 3, backward, scaler if scale == "grad scaler" else None)

    assert len(expected) == 6
    _assert_losses(measured, expected)


def test_a_partial_group_divided_by_its_own_size_is_unchanged(measured):
    """The Hugging Face ``Trainer`` divides a partial last group by its own size: already the mean."""

    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    expected = []
    for group in (3, 3, 2, 3, 1):
        unscaled = []
        for _ in range(group):
            x, y = _batch()
            loss = F.mse_loss(model(x), y)
            (loss / group).backward()
            unscaled.append(loss.item())
        optimizer.step()
        optimizer.zero_grad()
        expected.append(sum(unscaled) / group)

    _assert_losses(measured, expected)


def test_a_partial_group_of_a_script_that_does_not_divide_stays_the_sum(measured):
    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    expected = []
    for group in (3, 3, 1, 3, 2):
        total = 0.0
        for _ in range(group):
            x, y = _batch()
            loss = F.mse_loss(model(x), y)
            loss.backward()
            total += loss.item()
        optimizer.step()
        optimizer.zero_grad()
        expected.append(total)

    _assert_losses(measured, expected)


def test_a_token_count_normalisation_stays_the_sum_in_a_partial_group(measured):
    """The ``Trainer``'s ``num_items_in_batch``: every micro-batch's summed token loss divided by
    the tokens of the whole group (a CPU tensor, the same for the group's micro-batches); the sum
    is the group's mean token loss, in full and partial groups alike."""
    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    expected = []
    for sizes in ((2, 3, 4), (4, 4, 1), (1,), (3, 2, 4), (2, 1)):
        batches = [_batch(size) for size in sizes]
        num_items_in_batch = torch.tensor(sum(sizes))
        total = 0.0
        for x, y in batches:
            loss = F.mse_loss(model(x), y, reduction="sum") / num_items_in_batch
            loss.backward()
            total += loss.item()
        optimizer.step()
        optimizer.zero_grad()
        expected.append(total)

    _assert_losses(measured, expected)


def test_one_backward_divided_by_a_constant_per_step_is_that_value(measured):
    """No step ever had 2 micro-batches divided by 2: ``backward(loss / 2)`` is not a partial group."""
    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    expected = []
    for _ in range(STEPS):
        x, y = _batch()
        halved = F.mse_loss(model(x), y) / 2
        halved.backward()
        optimizer.step()
        optimizer.zero_grad()
        expected.append(halved.item())

    _assert_losses(measured, expected)


def test_accumulation_without_dividing_stores_the_sum_whose_gradient_is_applied(measured):
    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    expected = []
    for _ in range(STEPS):
        total = 0.0
        for _ in range(3):
            x, y = _batch()
            loss = F.mse_loss(model(x), y)
            loss.backward()
            total += loss.item()
        optimizer.step()
        optimizer.zero_grad()
        expected.append(total)

    _assert_losses(measured, expected)


def test_two_losses_backpropagated_separately_for_one_optimizer_add_up(measured):
    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    expected = []
    for _ in range(STEPS):
        x, y = _batch()
        fit = F.mse_loss(model(x), y)
        penalty = 0.1 * model.weight.pow(2).sum()
        fit.backward()
        penalty.backward()
        optimizer.step()
        optimizer.zero_grad()
        expected.append(fit.item() + penalty.item())  # the same as (fit + penalty).backward()

    _assert_losses(measured, expected)


def test_gan_style_two_optimizers_keep_the_first_optimizers_loss_unmixed(measured):
    generator, discriminator = torch.nn.Linear(4, 8), torch.nn.Linear(8, 1)
    generator_optimizer = torch.optim.SGD(generator.parameters(), lr=0.01)
    discriminator_optimizer = torch.optim.SGD(discriminator.parameters(), lr=0.01)
    discriminator_losses = []
    for _ in range(STEPS):
        real, noise = torch.randn(4, 8), torch.randn(4, 4)
        fake = generator(noise)
        d_loss = (F.softplus(-discriminator(real)) + F.softplus(discriminator(fake.detach()))).mean()
        d_loss.backward()
        discriminator_optimizer.step()  # the first optimizer to step: the step clock
        discriminator_optimizer.zero_grad()
        g_loss = F.softplus(-discriminator(fake)).mean()
        g_loss.backward()
        generator_optimizer.step()  # not a step boundary; its loss is not mixed in
        generator_optimizer.zero_grad()
        discriminator_losses.append(d_loss.item())

    _assert_losses(measured, discriminator_losses)
    assert measured.clock.steps == STEPS


def test_grad_scaler_reports_the_unscaled_loss_and_a_skipped_step_still_counts(measured):
    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**16)
    expected, skipped = [], []
    for index in range(STEPS):
        unscaled = []
        for _ in range(2):
            x, y = _batch()
            loss = F.mse_loss(model(x), y)
            scaler.scale(loss / 2).backward()
            unscaled.append(loss.item())
        if index == 1:
            model.weight.grad[0, 0] = float("inf")  # the scaler skips this step
        scale_before = scaler.get_scale()
        scaler.step(optimizer)
        scaler.update()
        skipped.append(scaler.get_scale() < scale_before)
        optimizer.zero_grad()
        expected.append(sum(unscaled) / 2)

    assert skipped == [False, True, False, False]
    _assert_losses(measured, expected)  # finite, and the skipped step is there
    assert [step["step"] for step in measured.steps()] == list(range(STEPS))


def test_a_grad_scaler_subclass_overriding_scale_defined_after_install_is_unscaled_too(measured):
    class OwnScale(torch.amp.GradScaler):  # like FSDP's ShardedGradScaler: scale() not via super()
        def scale(self, outputs):
            return outputs * 1024.0

        def step(self, optimizer, *args, **kwargs):
            return super().step(optimizer, *args, **kwargs)

    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    scaler = OwnScale("cpu", enabled=False)
    expected = []
    for _ in range(STEPS):
        x, y = _batch()
        loss = F.mse_loss(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)  # through both wrapped steps: one clock step, not two
        optimizer.zero_grad()
        expected.append(loss.item())

    _assert_losses(measured, expected)
    assert measured.clock.steps == STEPS


def test_fsdps_sharded_grad_scaler_reports_the_unscaled_loss(measured, single_process_group):
    from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler

    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    scaler = ShardedGradScaler(device="cpu", init_scale=2.0**10)
    expected = []
    for _ in range(STEPS):
        x, y = _batch()
        loss = F.mse_loss(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
        expected.append(loss.item())

    _assert_losses(measured, expected)


def test_closure_steps_count_the_first_evaluation_like_lightning_accumulating(measured):
    """Lightning (accumulate_grad_batches=2): the first micro-batch's closure runs outside
    ``step``, the last one inside ``optimizer.step(closure)``."""
    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    expected = []
    values: list[float] = []

    def training_step(batch):
        loss = F.mse_loss(model(batch[0]), batch[1])
        (loss / 2).backward()
        values.append(loss.item())
        return loss

    for _ in range(STEPS):
        values.clear()
        first, last = _batch(), _batch()
        training_step(first)
        optimizer.step(closure=functools.partial(training_step, last))
        optimizer.zero_grad()
        expected.append(sum(values) / 2)

    _assert_losses(measured, expected)


def test_lbfgs_stores_what_its_step_returns_the_first_closure_evaluation(measured):
    model = _model()
    optimizer = torch.optim.LBFGS(model.parameters(), lr=0.5, max_iter=5)
    x, y = _batch(16)
    evaluations, returned = [], []

    def closure():
        optimizer.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        evaluations.append(loss.item())
        return loss

    for _ in range(STEPS):
        before = len(evaluations)
        returned.append(optimizer.step(closure).item())
        assert len(evaluations) - before > 1  # LBFGS evaluates its closure several times per step

    _assert_losses(measured, returned)


def test_backward_of_a_list_is_the_sum_and_an_explicit_gradient_is_not_a_loss(measured):
    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    x, y = _batch()

    first, second = F.mse_loss(model(x), y), model(x).abs().mean()
    torch.autograd.backward([first, second])  # the gradient of first + second
    optimizer.step()
    hidden = model(x)  # a pipeline stage: backward of an activation with its incoming gradient
    hidden.backward(gradient=torch.ones_like(hidden))
    optimizer.step()
    hidden = model(x)
    loss = F.mse_loss(hidden, y)
    torch.autograd.backward([hidden, loss], grad_tensors=[torch.ones_like(hidden), None])
    optimizer.step()
    weighted = F.mse_loss(model(x), y)
    weighted.backward(gradient=torch.tensor(3.0))  # the gradient of 3 x weighted: no loss value
    optimizer.step()

    reported = measured.losses()
    assert reported[0] == pytest.approx(first.item() + second.item())
    assert reported[1] is None  # nothing but an activation: not measured
    assert reported[2] == pytest.approx(loss.item())  # the activation is ignored, the loss counts
    assert reported[3] is None


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_autocast_half_precision_loss_is_read_as_is(measured, dtype):
    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    expected = []
    for _ in range(STEPS):
        values = []
        for _ in range(2):
            x, _ = _batch()
            with torch.autocast("cpu", dtype=dtype):
                loss = model(x).pow(2).mean()
            assert loss.dtype == dtype
            (loss / 2).backward()
            values.append((loss / 2).item())
        optimizer.step()
        optimizer.zero_grad()
        expected.append(sum(values))

    _assert_losses(measured, expected)


def test_reentrant_checkpointing_counts_the_outer_backward_only(measured):
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    expected = []
    for _ in range(STEPS):
        x, y = _batch()
        x.requires_grad_(True)
        loss = F.mse_loss(checkpoint(model, x, use_reentrant=True), y)
        loss.backward()  # runs a nested backward through the checkpointed segment
        optimizer.step()
        optimizer.zero_grad()
        expected.append(loss.item())

    _assert_losses(measured, expected)


def test_a_tensor_subclass_loss_is_not_measured_rather_than_read(measured):
    class Traced(torch.Tensor):
        pass

    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    x, y = _batch()
    F.mse_loss(model(x), y).as_subclass(Traced).backward()
    optimizer.step()

    assert measured.losses() == [None]


def test_a_step_with_no_backward_has_no_loss(measured):
    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    model.weight.grad = torch.ones_like(model.weight)
    optimizer.step()

    assert measured.losses() == [None]


def test_a_loop_without_an_optimizer_steps_at_each_backward_until_an_optimizer_is_made(measured):
    """PyTorch's word language model and regression examples update the weights themselves."""
    model = _model()
    expected = []
    for _ in range(STEPS):
        model.zero_grad()
        loss = F.mse_loss(model(_batch()[0]), torch.zeros(4, 1))
        loss.backward()
        for parameter in model.parameters():
            parameter.data.add_(parameter.grad, alpha=-0.05)
        expected.append(loss.item())
    _assert_losses(measured, expected)
    steps = measured.steps()
    assert [step["step"] for step in steps] == list(range(STEPS))
    assert steps[0]["step_time"] is None and all(step["step_time"] > 0 for step in steps[1:])

    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)  # from now on, the optimizer is the clock
    for _ in range(2):
        expected_sum = 0.0
        for _micro_batch in range(2):
            loss = F.mse_loss(model(_batch()[0]), torch.zeros(4, 1)) / 2
            loss.backward()
            expected_sum += loss.item()
        optimizer.step()
        optimizer.zero_grad()
        expected.append(expected_sum)
    _assert_losses(measured, expected)
    assert [step["step"] for step in measured.steps()] == list(range(STEPS + 2))


@pytest.fixture
def single_process_group():
    """A real gloo process group of one rank (DDP's reducer and no_sync run for real)."""
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    torch.distributed.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    try:
        yield
    finally:
        torch.distributed.destroy_process_group()


def test_ddp_no_sync_accumulation_is_per_rank_and_unchanged(measured, single_process_group):
    model = torch.nn.parallel.DistributedDataParallel(_model())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    expected = []
    for _ in range(STEPS):
        unscaled = []
        with model.no_sync():  # the first micro-batches skip the gradient all-reduce
            for _ in range(2):
                x, y = _batch()
                loss = F.mse_loss(model(x), y)
                (loss / 3).backward()
                unscaled.append(loss.item())
        x, y = _batch()
        loss = F.mse_loss(model(x), y)
        (loss / 3).backward()
        unscaled.append(loss.item())
        optimizer.step()
        optimizer.zero_grad()
        expected.append(sum(unscaled) / 3)

    _assert_losses(measured, expected)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_losses_are_summed_without_a_device_synchronisation(measured):
    """The last step is a partial accumulation group (2 micro-batches, each divided by 4): its
    divisor, a Python number, is read on the CPU, and its copies are scaled by 4 / 2."""
    model = _model().cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    device_losses = []
    torch.cuda.set_sync_debug_mode("error")  # any synchronising call on this thread raises
    try:
        for micro_batches in (4, 4, 4, 2):
            step_losses = []
            for _ in range(micro_batches):
                x, y = torch.randn(4, 8, device="cuda"), torch.randn(4, 1, device="cuda")
                with torch.autocast("cuda", dtype=torch.bfloat16):
                    loss = F.mse_loss(model(x).float(), y)
                (loss / 4).backward()
                step_losses.append(loss.detach())
            optimizer.step()
            optimizer.zero_grad()
            device_losses.append(torch.stack(step_losses).mean())
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()
    expected = [value.item() for value in device_losses]

    reported = measured.losses()
    assert all(not math.isnan(value) for value in reported)
    for got, want in zip(reported, expected, strict=True):
        assert got == pytest.approx(want, rel=1e-5)
