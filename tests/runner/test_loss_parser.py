"""Reading loss values from printed lines (off by default; values labelled "parsed")."""

from __future__ import annotations

import math

import pytest

from runner.telemetry.loss_parser import LossParser


@pytest.mark.parametrize("line, expected", [
    ("epoch 0 step 10 loss: 0.1234", (0.1234, 10)),
    ("Epoch: [0][ 10/500]\tTime  0.5\tLoss 6.8553e+00 (8.3677e+00)", (6.8553, 10)),
    ("train_loss=0.5", (0.5, None)),
    ("{'loss': 1.25, 'step': 3}", (1.25, 3)),
    ("iter 7 | Loss = -2.5E-3", (-0.0025, 7)),
])
def test_default_pattern_reads_common_forms(line, expected):
    assert LossParser().parse(line) == expected


@pytest.mark.parametrize("line", ["no losses here", "closs 5", "lossless compression", "loss: inf"])
def test_lines_without_a_loss_value(line):
    assert LossParser().parse(line) is None


def test_nan_is_kept_as_nan():
    value, _ = LossParser().parse("loss: nan")
    assert math.isnan(value)


def test_custom_pattern():
    assert LossParser(r"objective=(\d+\.\d+)").parse("objective=3.25 at step 4") == (3.25, 4)
