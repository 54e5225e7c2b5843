"""A fingerprint of a model's parameters, to check that DDP replicas stay in sync.

Replicas in sync hold bitwise-identical parameters, so per-parameter float64
sums and sums of squares, computed by the same kernels in the same order, are
identical too; their SHA-1 is a short digest the hub can compare across ranks.
Sharded models (FSDP, tensor parallel) differ per rank by design.

Costs one device synchronisation (one ``.cpu()`` of the stacked statistics),
which is why it only runs every ``RANKWATCH_HASH_EVERY`` steps.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterable
from typing import Any


def parameter_digest(torch: Any, parameters: Iterable[Any]) -> str:
    """SHA-1 hex digest of (sum, sum of squares) of each parameter in order, in float64."""
    with torch.no_grad():
        statistics = []
        for parameter in parameters:
            values = parameter.detach().to(torch.float64)
            statistics.append(values.sum())
            statistics.append(values.square().sum())
        if not statistics:
            numbers: list[float] = []
        else:
            try:
                numbers = torch.stack(statistics).cpu().tolist()
            except RuntimeError:  # parameters on several devices
                numbers = [statistic.item() for statistic in statistics]
    return hashlib.sha1(struct.pack(f"<{len(numbers)}d", *numbers)).hexdigest()


def optimizer_parameters(optimizer: Any) -> list[Any]:
    """The parameters an optimizer steps, in its own order."""
    return [parameter for group in optimizer.param_groups for parameter in group["params"]]
