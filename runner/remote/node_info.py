"""What a node offers a multi-node job, told by the node itself.

``python -m runner node-info --json`` runs on the node over ssh (during preflight)
in the interpreter the job will use there, so its answer is exactly what the
job would find: that interpreter's Rankwatch and torch versions (read from the
installed packages' metadata, without importing torch: milliseconds instead of
seconds), whether the working directory and the script exist there, and the
node's GPUs. If Rankwatch is not installed for that interpreter, this command
cannot run at all, and ``runner.remote.preflight`` explains that instead.
"""

from __future__ import annotations

import os
import platform
import socket
import sys
from importlib import metadata
from typing import Any

from runner.sampling.nvml import shared_nvml

DISTRIBUTION = "rankwatch"


def installed_version(distribution: str) -> str | None:
    """The installed version of ``distribution`` in this interpreter, or ``None``."""
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def node_info(workdir: str | None = None, script: str | None = None) -> dict[str, Any]:
    info: dict[str, Any] = {
        "hostname": socket.gethostname(),
        "python": sys.executable,
        "python_version": platform.python_version(),
        "rankwatch": installed_version(DISTRIBUTION),
        "torch": installed_version("torch"),
        "workdir": None,
        "script": None,
        "gpus": _gpus(),
    }
    if workdir is not None:
        info["workdir"] = {"path": workdir, "exists": os.path.isdir(workdir)}
    if script is not None:
        path = script if os.path.isabs(script) or workdir is None else os.path.join(workdir, script)
        info["script"] = {"path": path, "exists": os.path.isfile(path)}
    return info


def _gpus() -> dict[str, Any]:
    report = shared_nvml().report(with_processes=False)  # never raises: no driver is a state
    return {"available": report.available, "count": len(report.gpus),
            "reason": None if report.available else report.describe_unavailable()}
