"""Process-level safety: a worker never outlives torchrun (principle 3, "no orphans")."""

from __future__ import annotations

import signal
import sys

PR_SET_PDEATHSIG = 1


def die_with_parent() -> bool:
    """Ask Linux to SIGKILL this process when its parent (torchrun) dies.

    Without it, a SIGKILLed torchrun leaves its workers running, holding GPUs.
    Returns False where unsupported (not Linux, no libc): nothing else changes.
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) == 0
    except (OSError, AttributeError, ImportError):
        return False
