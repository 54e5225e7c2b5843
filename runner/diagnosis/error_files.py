"""torchrun's error files: a traceback source when the worker could not tell the hub itself.

torchrun gives every worker ``TORCHELASTIC_ERROR_FILE`` =
``<log_dir>/<run id>/attempt_<N>/<local rank>/error.json``. torch's ``@record``
writes the exception there, and so does the Rankwatch bootstrap (same format,
also without ``@record``). The bootstrap normally reports the exception over the
socket too; the file is the fallback when that message never arrived (the hub
was unreachable, telemetry was off, the file came from ``@record``)::

    {"message": {"message": "ValueError: bad batch",
                 "extraInfo": {"py_callstack": "Traceback ...", "timestamp": "1763770000"}}}

torch also accepts ``"message"`` being a plain string; both are read.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

MAX_ERROR_FILE_BYTES = 1 << 20


@dataclass(frozen=True)
class ErrorFile:
    path: str
    message: str | None
    traceback: str | None
    timestamp: float | None


def read_error_file(path: str | Path) -> ErrorFile | None:
    """The exception recorded in one error file, or None when absent or unreadable."""
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            data = json.loads(handle.read(MAX_ERROR_FILE_BYTES))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    body = data.get("message")
    if isinstance(body, str):
        return ErrorFile(str(path), body, None, None)
    if not isinstance(body, dict):
        return None
    extra_info = body.get("extraInfo")
    extra = extra_info if isinstance(extra_info, dict) else {}
    stamp = extra.get("timestamp")
    try:
        timestamp = float(stamp) if stamp is not None else None
    except (TypeError, ValueError):
        timestamp = None
    message = body.get("message")
    callstack = extra.get("py_callstack")
    return ErrorFile(str(path), message if isinstance(message, str) else None,
                     callstack if isinstance(callstack, str) else None, timestamp)


ATTEMPT = re.compile(r"attempt_(\d+)$")


def find_error_files(log_dir: str | Path) -> dict[int, Path]:
    """local rank -> error file of the latest attempt under torchrun's ``--log-dir`` (one node)."""
    root = Path(log_dir)
    found: dict[int, tuple[int, Path]] = {}
    try:
        candidates = list(root.glob("*/attempt_*/*/error.json"))
    except OSError:
        return {}
    for path in candidates:
        attempt = ATTEMPT.match(path.parent.parent.name)
        if not attempt or not path.parent.name.isdigit():
            continue
        local_rank, number = int(path.parent.name), int(attempt.group(1))
        if local_rank not in found or number > found[local_rank][0]:
            found[local_rank] = (number, path)
    return {rank: path for rank, (_number, path) in found.items()}
