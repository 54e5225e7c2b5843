"""Read loss values from printed lines, for scripts whose loss is only in their output.

Off by default (the bootstrap measures the loss itself); values read this way are
labelled ``parsed`` so nobody mistakes them for measured ones. The default pattern
reads the forms training scripts commonly print::

    loss: 0.123          Loss 6.8553e+00 (8.3677e+00)     train_loss=0.5
    'loss': 1.25         loss 3.2                          Loss: nan

The step, when the line names one (``step 40``, ``iter 40``, ``[40/500]``), is taken
from it; otherwise the rank's current step is used.
"""

from __future__ import annotations

import math
import re

NUMBER = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|nan|inf"
DEFAULT_LOSS_PATTERN = rf"(?i)(?<![a-z])(?:train[_ ]?)?loss['\"]?\s*[:=]?\s*({NUMBER})"
STEP_PATTERN = re.compile(r"(?i)\b(?:step|iter(?:ation)?|it|batch)['\"]?\s*[:=#]?\s*(\d+)|\[\s*(\d+)\s*/\s*\d+\]")


class LossParser:
    def __init__(self, pattern: str | None = None):
        self.pattern = re.compile(pattern or DEFAULT_LOSS_PATTERN)
        self._needs_loss_word = pattern is None

    def parse(self, line: str) -> tuple[float, int | None] | None:
        """(loss, step or None) from one line, or None when the line has no loss."""
        if self._needs_loss_word and "oss" not in line and "OSS" not in line:
            return None  # fast path: most lines are not loss lines
        match = self.pattern.search(line)
        if not match:
            return None
        try:
            value = float(match.group(1))
        except (TypeError, ValueError, IndexError):
            return None
        if math.isinf(value):
            return None
        step_match = STEP_PATTERN.search(line)
        step = None
        if step_match:
            step = int(step_match.group(1) or step_match.group(2))
        return value, step
