"""Metrics read from the lines a training script prints (``--parse-stdout``).

Off by default (the bootstrap measures the loss itself); values read this way are
labelled ``parsed`` so nobody mistakes them for measured ones. Each metric name
becomes its own curve. The formats recognised, first match wins:

1. **A printed dict of metrics** (Python or JSON syntax), as the Hugging Face
   ``Trainer`` prints its logs: 5.x quotes the values
   (``{'loss': '5.391', 'grad_norm': '1.23', 'learning_rate': '5e-05', 'epoch': '0.5'}``),
   earlier versions and its ``PrinterCallback`` do not. Every numeric key is a
   metric under its own name (evaluation logs carry ``eval_loss``,
   ``eval_runtime``...); a ``step`` or ``global_step`` key is the step. A dict is
   metrics only when a loss key (``loss``, ``*_loss``) or ``epoch`` has a number,
   so a printed configuration is not; the end-of-training summary (``train_runtime``,
   with an average ``train_loss``) describes the whole run, not a step, and is
   ignored.
2. **nanoGPT**: ``iter N: loss X, time Yms, mfu Z%`` (training, step N) gives
   ``loss``, ``iter_time_ms``, ``mfu`` (percent; the ``-100.00%`` nanoGPT prints
   before it has measured is skipped) and any other ``name value`` part
   (``grad_norm``); ``step N: train loss X, val loss Y`` is its periodic
   evaluation, which gives ``val_loss`` and ``eval_train_loss``, never ``loss``.
3. **Other lines with a loss word**::

       loss: 0.123        Loss 6.8553e+00 (8.3677e+00)     train_loss=0.5
       'loss': 1.25       val_loss=0.7                     test loss 2.1

   ``train`` or no prefix gives ``loss``; ``val``/``valid``/``validation`` give
   ``val_loss``; ``eval`` ``eval_loss``; ``test`` ``test_loss``. The step, when the
   line names one (``step 40``, ``iter 40``, ``[40/500]``), is taken from it.
   ``inf`` is not read here (too easily the start of a word).

A custom ``loss_pattern`` (one capturing group) replaces all of this: it reads
``loss`` only.

``StdoutMetrics`` turns parsed lines into points: a line's step comes from the
line when it has one, else from the rank's measured step (the zero-code
instrumentation's), else it counts that metric's earlier points (as
``rankwatch.log`` without a step does); and a metric never gets a second point at
the step of its previous one (a line printed twice, a summary echoed at the same
step): the first value is kept.
"""

from __future__ import annotations

import ast
import json
import math
import re
from dataclasses import dataclass

NUMBER = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|nan|inf"
DEFAULT_LOSS_PATTERN = rf"(?i)(?<![a-z_])(?:(train|val|valid|validation|eval|test)[_ /-]?)?loss['\"]?\s*[:=]?\s*['\"]?({NUMBER})"
STEP_PATTERN = re.compile(r"(?i)\b(?:step|iter(?:ation)?|it|batch)['\"]?\s*[:=#]?\s*(\d+)|\[\s*(\d+)\s*/\s*\d+\]")

MAX_DICT_CHARS = 8192
"""Longer lines are not read as dicts (``ast.literal_eval`` cost grows with the line)."""
MAX_NAME_CHARS = 64
SPLIT_NAMES = {None: "loss", "train": "loss", "val": "val_loss", "valid": "val_loss",
               "validation": "val_loss", "eval": "eval_loss", "test": "test_loss"}  # fmt: skip
SUMMARY_KEY = "train_runtime"
STEP_KEYS = ("step", "global_step")

_NANOGPT_LINE = re.compile(r"^\s*(iter|step) (\d+): (.*)$")
_NANOGPT_PART = re.compile(rf"^([A-Za-z_][\w/]*(?: [A-Za-z_]\w*)?) ({NUMBER})\s*(ms|%|s)?$")
_NAME = re.compile(r"^[\w./-]+$")


@dataclass(frozen=True)
class ParsedLine:
    """The metrics of one line, and its step when the line names one."""

    values: dict[str, float]
    step: int | None = None


class LineParser:
    """Reads one printed line into named metrics (module docstring); no state between lines."""

    def __init__(self, loss_pattern: str | None = None):
        self._custom = re.compile(loss_pattern) if loss_pattern else None
        self._generic = re.compile(DEFAULT_LOSS_PATTERN)

    def parse(self, line: str) -> ParsedLine | None:
        """The metrics in ``line``, or None when it has none."""
        if self._custom is not None:
            return self._parse_custom(self._custom, line)
        text = line.strip()
        if text.startswith("{") and text.endswith("}"):
            parsed = _parse_dict(text)
            if parsed is not None:
                return parsed if parsed.values else None
        if text.startswith(("iter ", "step ")):
            parsed = _parse_nanogpt(text)
            if parsed is not None:
                return parsed
        if "oss" not in line and "OSS" not in line:
            return None  # fast path: most lines are not metric lines
        return self._parse_generic(line)

    @staticmethod
    def _parse_custom(pattern: re.Pattern[str], line: str) -> ParsedLine | None:
        match = pattern.search(line)
        if not match:
            return None
        value = _number(match.group(1))
        if value is None or math.isinf(value):
            return None
        return ParsedLine({"loss": value}, _step_in(line))

    def _parse_generic(self, line: str) -> ParsedLine | None:
        values: dict[str, float] = {}
        for match in self._generic.finditer(line):
            split = match.group(1).lower() if match.group(1) else None
            value = _number(match.group(2))
            if value is None or math.isinf(value):
                continue
            values.setdefault(SPLIT_NAMES[split], value)
        if not values:
            return None
        return ParsedLine(values, _step_in(line))


def _parse_dict(text: str) -> ParsedLine | None:
    """A printed metrics dict; ``ParsedLine({})`` for a dict that is not metrics, None for no dict."""
    if len(text) > MAX_DICT_CHARS:
        return None
    try:
        data = ast.literal_eval(text)
    except Exception:  # SyntaxError, ValueError, RecursionError, MemoryError...
        try:
            data = json.loads(text)
        except ValueError:
            return None
    if not isinstance(data, dict) or SUMMARY_KEY in data:
        return ParsedLine({})
    names = [name for name in data if isinstance(name, str)]
    if not any(_is_marker(name) and _number(data[name]) is not None for name in names):
        return ParsedLine({})  # a configuration, a result: not a metrics log
    step = None
    values: dict[str, float] = {}
    for name in names:
        raw = data[name]
        if name in STEP_KEYS:
            if type(raw) is int:
                step = raw
            continue
        value = _number(raw)
        if value is not None and len(name) <= MAX_NAME_CHARS and _NAME.match(name):
            values[name] = value
    return ParsedLine(values, step)


def _is_marker(name: str) -> bool:
    """A key that only metrics logs have: a loss, or the fractional epoch the Trainer adds."""
    return name == "epoch" or name == "loss" or name.endswith("_loss")


def _parse_nanogpt(text: str) -> ParsedLine | None:
    match = _NANOGPT_LINE.match(text)
    if not match:
        return None
    kind, step, rest = match.group(1), int(match.group(2)), match.group(3)
    parts = {}
    for part in rest.split(","):
        found = _NANOGPT_PART.match(part.strip())
        if found:
            value = _number(found.group(2))
            if value is not None:
                parts[found.group(1)] = (value, found.group(3))
    if kind == "step":
        if "val loss" not in parts:
            return None  # not nanoGPT's evaluation line: read as any other line
        values = {"val_loss": parts["val loss"][0]}
        if "train loss" in parts:
            values["eval_train_loss"] = parts["train loss"][0]
        return ParsedLine(values, step)
    if "loss" not in parts:
        return None
    values = {}
    for name, (value, unit) in parts.items():
        if name == "time" and unit == "ms":
            values["iter_time_ms"] = value
        elif name == "mfu":
            if value >= 0:  # nanoGPT prints -100.00% until it has measured
                values["mfu"] = value
        elif " " not in name:
            values[name] = value
    return ParsedLine(values, step)


def _number(raw: object) -> float | None:
    if type(raw) is bool:
        return None
    if isinstance(raw, (int, float)):
        return float(raw)
    if isinstance(raw, str):
        try:
            return float(raw)
        except ValueError:
            return None
    return None


def _step_in(line: str) -> int | None:
    match = STEP_PATTERN.search(line)
    if not match:
        return None
    return int(match.group(1) or match.group(2))


class StdoutMetrics:
    """Points ``(step, name, value)`` from each rank's printed lines, by the rules of the module docstring."""

    def __init__(self, loss_pattern: str | None = None):
        self.parser = LineParser(loss_pattern)
        self._last_step: dict[tuple[int, str], int] = {}
        self._count: dict[tuple[int, str], int] = {}

    def points(self, rank: int, line: str, measured_step: int | None) -> list[tuple[int, str, float]]:
        """The new points in ``line`` of ``rank``; ``measured_step`` is the rank's current step, if known."""
        parsed = self.parser.parse(line)
        if parsed is None:
            return []
        line_step = parsed.step if parsed.step is not None else measured_step
        points = []
        for name, value in parsed.values.items():
            key = (rank, name)
            count = self._count.get(key, 0)
            step = line_step if line_step is not None else count
            if self._last_step.get(key) == step:
                continue  # never a second point at the step of the previous one
            self._last_step[key] = step
            self._count[key] = count + 1
            points.append((step, name, value))
        return points
