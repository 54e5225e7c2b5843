"""Process-level safety: a worker never outlives torchrun (principle 3, "no orphans")."""

from __future__ import annotations

import os
import signal
import sys

PR_SET_PDEATHSIG = 1
RUN_KEY_VARIABLE = "RANKWATCH_RUN_KEY"


def die_with_parent(signal_number: int = signal.SIGKILL, parent: int | None = None) -> bool:
    """Ask Linux to send ``signal_number`` (SIGKILL) to this process when its parent (torchrun) dies.

    Without it, a SIGKILLed torchrun leaves its workers running, holding GPUs.
    If the parent died before this call (while the interpreter was starting), no signal
    will ever come: the process then sends it to itself at once, as the kernel would have.
    ``parent``: the pid the parent had (a self-spawned rank's, ``_spawn``); without it, a
    torchrun worker tells by the run's marker (``parent_is_gone``).
    Returns False where unsupported (not Linux, no libc): nothing else changes.
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, int(signal_number), 0, 0, 0) != 0:
            return False
    except (OSError, AttributeError, ImportError):
        return False
    if (os.getppid() != parent) if parent is not None else parent_is_gone():
        os.kill(os.getpid(), signal_number)
    return True


def parent_is_gone(environ=None) -> bool:
    """Whether the process that started this worker has already died.

    Under Rankwatch every process of a run carries the run's marker variable, torchrun
    included, so a torchrun worker (``TORCHELASTIC_RUN_ID`` set) whose parent lacks our
    marker was re-parented (to init or a subreaper) because torchrun died. Without a
    marker, or not started by torchrun, nothing can be told, and the answer is False.
    """
    environ = os.environ if environ is None else environ
    marker = environ.get(RUN_KEY_VARIABLE)
    if not marker or not environ.get("TORCHELASTIC_RUN_ID"):
        return False
    parent = os.getppid()
    try:
        with open(f"/proc/{parent}/environ", "rb") as handle:
            parent_environ = handle.read().split(b"\0")
    except OSError:
        return parent == 1  # init's environment is not readable to a user: re-parented to init
    return f"{RUN_KEY_VARIABLE}={marker}".encode() not in parent_environ
