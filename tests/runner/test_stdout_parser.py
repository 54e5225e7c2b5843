"""Metrics read from printed lines (``--parse-stdout``; off by default, values labelled "parsed").

The Hugging Face lines were captured from transformers 5.23's ``Trainer`` (the
``ProgressCallback.on_log`` format, ``f"{v:.4g}"`` values) in this suite's own job
(tests/scripts/frameworks/hf_trainer_accumulate.py); the nanoGPT lines follow its
train.py's f-strings (``iter {iter_num}: loss {lossf:.4f}, time {dt*1000:.2f}ms,
mfu {running_mfu*100:.2f}%`` and ``step {iter_num}: train loss {...:.4f}, val loss
{...:.4f}``).
"""

from __future__ import annotations

import math

import pytest

from runner.telemetry.stdout_parser import LineParser, ParsedLine, StdoutMetrics

HF_TRAIN = "{'loss': '3.909', 'grad_norm': '0.387', 'learning_rate': '0.001', 'epoch': '0.08333'}"
HF_TRAIN_SMALL_LR = "{'loss': '3.899', 'grad_norm': '0.3855', 'learning_rate': '8.333e-05', 'epoch': '1'}"
HF_EVAL = ("{'eval_loss': '3.903', 'eval_runtime': '0.0275', 'eval_samples_per_second': '1165', "
           "'eval_steps_per_second': '72.8', 'epoch': '0.4167'}")  # fmt: skip
HF_SUMMARY = ("{'train_runtime': '0.4223', 'train_samples_per_second': '454.7', "
              "'train_steps_per_second': '28.42', 'train_loss': '3.904', 'epoch': '1'}")  # fmt: skip
HF_4X = "{'loss': 5.391, 'grad_norm': 1.23, 'learning_rate': 5e-05, 'epoch': 0.5}"
NANOGPT_TRAIN = "iter 250: loss 1.8765, time 35.12ms, mfu 12.34%"
NANOGPT_FIRST = "iter 0: loss 4.2874, time 12345.67ms, mfu -100.00%"
NANOGPT_GRAD_NORM = "iter 20: loss 3.1234, time 40.00ms, mfu 11.50%, grad_norm 0.912"
NANOGPT_EVAL = "step 250: train loss 1.7001, val loss 1.8623"


def parse(line: str) -> ParsedLine | None:
    return LineParser().parse(line)


def test_hugging_face_trainer_5_quoted_values_are_one_metric_per_key():
    assert parse(HF_TRAIN) == ParsedLine(
        {"loss": 3.909, "grad_norm": 0.387, "learning_rate": 0.001, "epoch": 0.08333}
    )
    assert parse(HF_TRAIN_SMALL_LR).values["learning_rate"] == pytest.approx(8.333e-05)
    assert parse(HF_4X) == ParsedLine({"loss": 5.391, "grad_norm": 1.23, "learning_rate": 5e-05, "epoch": 0.5})


def test_hugging_face_evaluation_keys_stay_their_own_and_the_summary_is_ignored():
    evaluation = parse(HF_EVAL)
    assert "loss" not in evaluation.values
    assert evaluation.values == {"eval_loss": 3.903, "eval_runtime": 0.0275, "eval_samples_per_second": 1165.0,
                                 "eval_steps_per_second": 72.8, "epoch": 0.4167}  # fmt: skip
    assert parse(HF_SUMMARY) is None  # the average of the whole run is not a point at a step


def test_a_json_metrics_line_takes_its_step_and_a_printed_configuration_is_not_metrics():
    assert parse('{"step": 40, "loss": 0.25, "lr": 0.001}') == ParsedLine({"loss": 0.25, "lr": 0.001}, step=40)
    assert parse("{'lr': 0.001, 'batch_size': 32, 'epochs': 10}") is None
    assert parse("{'loss': 'mse', 'lr': 0.001}") is None  # the loss function's name, not a value
    assert parse("{'loss': 1.5, 'note': 'warmup', 'flag': True}") == ParsedLine({"loss": 1.5})


def test_nanogpt_training_line():
    assert parse(NANOGPT_TRAIN) == ParsedLine({"loss": 1.8765, "iter_time_ms": 35.12, "mfu": 12.34}, step=250)
    assert parse(NANOGPT_FIRST) == ParsedLine({"loss": 4.2874, "iter_time_ms": 12345.67}, step=0)  # mfu not measured yet
    assert parse(NANOGPT_GRAD_NORM).values["grad_norm"] == 0.912


def test_nanogpt_evaluation_line_is_never_a_training_loss_point():
    assert parse(NANOGPT_EVAL) == ParsedLine({"val_loss": 1.8623, "eval_train_loss": 1.7001}, step=250)


@pytest.mark.parametrize(("line", "expected"), [
    ("epoch 0 step 10 loss: 0.1234", ParsedLine({"loss": 0.1234}, 10)),
    ("Epoch: [0][ 10/500]\tTime  0.5\tLoss 6.8553e+00 (8.3677e+00)", ParsedLine({"loss": 6.8553}, 10)),
    ("train_loss=0.5", ParsedLine({"loss": 0.5})),
    ("{'loss': 1.25, 'step': 3}", ParsedLine({"loss": 1.25}, 3)),
    ("iter 7 | Loss = -2.5E-3", ParsedLine({"loss": -0.0025}, 7)),
    ("step 5: loss 0.3", ParsedLine({"loss": 0.3}, 5)),
    ("epoch 2 train_loss=0.5 val_loss=0.7 test loss 0.9", ParsedLine({"loss": 0.5, "val_loss": 0.7, "test_loss": 0.9})),
    ("Epoch 1: 100%|##########| 32/32 [00:01<00:00, 25.6it/s, v_num=0, train_loss=0.123]", ParsedLine({"loss": 0.123})),
    ("validation loss: 2.5", ParsedLine({"val_loss": 2.5})),
])  # fmt: skip
def test_other_common_forms(line, expected):
    assert parse(line) == expected


@pytest.mark.parametrize("line", ["no losses here", "closs 5", "lossless compression", "loss: inf",
                                  "mse_loss: 0.3", "using loss_fn=0", "{'a': 1}", "{not a dict}"])
def test_lines_without_a_metric(line):
    assert parse(line) is None


def test_nan_is_kept_as_nan():
    value = parse("loss: nan").values["loss"]
    assert math.isnan(value)


def test_custom_pattern_reads_loss_only():
    parser = LineParser(r"objective=(\d+\.\d+)")
    assert parser.parse("objective=3.25 at step 4") == ParsedLine({"loss": 3.25}, 4)
    assert parser.parse(HF_TRAIN) is None


def test_points_take_the_lines_step_else_the_measured_one_else_a_count():
    metrics = StdoutMetrics()

    assert metrics.points(0, NANOGPT_EVAL, measured_step=3) == [(250, "val_loss", 1.8623), (250, "eval_train_loss", 1.7001)]
    assert metrics.points(0, NANOGPT_TRAIN, measured_step=3) == [(250, "loss", 1.8765), (250, "iter_time_ms", 35.12),
                                                                 (250, "mfu", 12.34)]  # fmt: skip
    assert metrics.points(1, "loss: 0.5", measured_step=7) == [(7, "loss", 0.5)]
    assert metrics.points(2, "loss: 0.5", measured_step=None) == [(0, "loss", 0.5)]
    assert metrics.points(2, "loss: 0.4", measured_step=None) == [(1, "loss", 0.4)]
    assert metrics.points(0, "nothing to see", measured_step=3) == []


def test_a_metric_never_gets_a_second_point_at_the_same_step():
    metrics = StdoutMetrics()

    assert metrics.points(0, HF_TRAIN, measured_step=4) == [
        (4, "loss", 3.909), (4, "grad_norm", 0.387), (4, "learning_rate", 0.001), (4, "epoch", 0.08333)]
    # the evaluation at the same step adds its own keys; its epoch repeats the step's: dropped
    assert metrics.points(0, HF_EVAL, measured_step=4) == [
        (4, "eval_loss", 3.903), (4, "eval_runtime", 0.0275), (4, "eval_samples_per_second", 1165.0),
        (4, "eval_steps_per_second", 72.8)]  # fmt: skip
    assert metrics.points(0, "step 9 loss 0.5", measured_step=4) == [(9, "loss", 0.5)]
    assert metrics.points(0, "step 9 loss 0.6", measured_step=4) == []  # printed twice: the first stays
    assert metrics.points(1, "step 9 loss 0.7", measured_step=4) == [(9, "loss", 0.7)]  # another rank
