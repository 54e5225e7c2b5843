"""Ask an interpreter what it can do: Python and torch versions, CUDA, backends.

The probe runs *in that interpreter* (it may be another venv or conda env than
Rankwatch's), as a short script on ``python -c``; it imports torch there, which
takes a few seconds, so callers run it off any latency-sensitive thread (the GUI
runs ``rankwatch probe --json`` in a QProcess).
"""

from __future__ import annotations

import json
import subprocess
from typing import Any

from runner import privacy

PROBE_TIMEOUT_SECONDS = 60

PROBE_SCRIPT = r"""
import json, os, platform, sys
info = {"python": sys.executable, "python_version": platform.python_version(), "torch": None,
        "cuda_available": False, "cuda_version": None, "device_count": 0, "nccl_version": None,
        "backends": {}, "ok": True, "error": None}
# For `rankwatch doctor`: the environment this interpreter lives in, and more of torch's build.
info["environment"] = {"prefix": sys.prefix, "base_prefix": getattr(sys, "base_prefix", sys.prefix),
                       "virtualenv": sys.prefix != getattr(sys, "base_prefix", sys.prefix),
                       "conda": os.path.isdir(os.path.join(sys.prefix, "conda-meta")),
                       "conda_env": os.environ.get("CONDA_DEFAULT_ENV")}
info["torch_path"] = None
info["cuda_built"] = None
info["cudnn_version"] = None
try:
    import torch
    import torch.distributed as dist
except Exception as exc:
    info["ok"] = False
    info["error"] = f"cannot import torch: {type(exc).__name__}: {exc}"
    for name in ("gloo", "nccl", "mpi"):
        info["backends"][name] = {"available": False, "reason": "torch is not importable"}
else:
    info["torch"] = torch.__version__
    info["cuda_version"] = torch.version.cuda
    info["torch_path"] = os.path.dirname(torch.__file__)
    try:
        info["cuda_built"] = bool(torch.backends.cuda.is_built())
        info["cudnn_version"] = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    except Exception:
        pass
    try:
        info["cuda_available"] = bool(torch.cuda.is_available())
        info["device_count"] = torch.cuda.device_count() if info["cuda_available"] else 0
    except Exception as exc:
        info["cuda_error"] = str(exc)
    try:
        version = torch.cuda.nccl.version() if dist.is_nccl_available() else None
        info["nccl_version"] = ".".join(map(str, version)) if isinstance(version, tuple) else version
    except Exception:
        pass
    def backend(name, built, why_not_built):
        if not dist.is_available():
            return {"available": False, "reason": "this torch build has no torch.distributed"}
        if not built:
            return {"available": False, "reason": why_not_built}
        if name == "nccl" and not info["cuda_available"]:
            return {"available": False, "reason": "CUDA is not available (no NVIDIA GPU or driver)"}
        return {"available": True, "reason": None}
    info["backends"]["gloo"] = backend("gloo", dist.is_gloo_available(), "this torch build has no Gloo")
    info["backends"]["nccl"] = backend("nccl", dist.is_nccl_available(), "this torch build has no NCCL (CPU-only build?)")
    info["backends"]["mpi"] = backend("mpi", dist.is_mpi_available(), "this torch build has no MPI (only source builds with MPI have it)")
print("RANKWATCH_PROBE " + json.dumps(info))
"""


def probe_interpreter(python: str, timeout: float = PROBE_TIMEOUT_SECONDS) -> dict[str, Any]:
    """What ``python`` offers; never raises (failures are in ``ok``/``error``)."""
    failed = {"python": python, "ok": False, "python_version": None, "torch": None, "cuda_available": False,
              "cuda_version": None, "device_count": 0, "nccl_version": None,
              "backends": {name: {"available": False, "reason": "the interpreter could not be probed"}
                           for name in ("gloo", "nccl", "mpi")}}
    try:
        result = subprocess.run([python, "-c", PROBE_SCRIPT], capture_output=True, text=True, timeout=timeout,
                                errors="replace", umask=privacy.user_umask())  # the user's interpreter: the user's umask
    except FileNotFoundError:
        return {**failed, "error": f"{python}: no such interpreter"}
    except PermissionError:
        return {**failed, "error": f"{python}: not executable"}
    except subprocess.TimeoutExpired:
        return {**failed, "error": f"{python} did not answer within {timeout:.0f} s"}
    except (OSError, ValueError) as error:  # ValueError: a NUL byte in the path
        return {**failed, "error": f"{python}: {getattr(error, 'strerror', None) or error}"}
    for line in result.stdout.splitlines():
        if line.startswith("RANKWATCH_PROBE "):
            try:
                answer = json.loads(line[len("RANKWATCH_PROBE "):])
            except ValueError:
                continue
            if isinstance(answer, dict) and isinstance(answer.get("backends"), dict):
                return answer
    detail = (result.stderr.strip().splitlines() or ["no output"])[-1]
    return {**failed, "error": f"{python} is not a working Python ({detail})"}
