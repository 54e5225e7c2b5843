"""Exit codes: one rule for what a run and its ranks record, whoever stopped them.

**A run** (the store's ``runs.exit_code``, the summary, ``runs list``, the GUI):

* it ended on its own: the job's exit status (torchrun's; 0 when every rank succeeded);
* it was **stopped on request** — Ctrl-C, the GUI's Stop, ``rankwatch stop``, SIGTERM
  or SIGHUP sent to the runner, it makes no difference: the runner ends the job with
  SIGTERM, so the run records status ``stopped`` and exit code **143** (128 + SIGTERM),
  or **137** (128 + SIGKILL) when it had to kill (``--force``, a second Ctrl-C, or the
  grace period ran out). What asked for the stop is recorded beside it (the summary's
  ``stopped_by``), not folded into the number. This is what ``docker stop`` reports.
* it could not start (a launch error after the checks): 127.

**A rank** (``ranks.exit_code``, the rank table, the diagnosis): the status its process
ended with as the OS reported it (torchrun's ``waitpid``): 0..255 for an exit, **-N for
death by signal N** (torchrun's and Python's convention), always shown with the
signal's name, ``SIGTERM (-15)``. The rank's own last word (the bootstrap's exit
message, sent before the process is really gone) is used only when torchrun reported
nothing for it; a rank that vanished without either has no exit code ("–") and its
state says what is known (``stopped``, ``lost``).

**The ``rankwatch run`` process** exits with the run's code, except when the process
itself received the signal that stopped the run: then it exits like any shell job
killed by signal N, 128 + N: **130 after Ctrl-C** (SIGINT), **143 after SIGTERM**,
**129 after SIGHUP**.
"""

from __future__ import annotations

import signal

from rankwatch._protocol import UNKNOWN_END, signal_name

SIGNAL_BASE = 128
EXIT_STOPPED = SIGNAL_BASE + int(signal.SIGTERM)
"""143: a run ended on request with SIGTERM, within the grace period."""
EXIT_KILLED = SIGNAL_BASE + int(signal.SIGKILL)
"""137: a run ended on request that had to be killed (forced, or the grace period ran out)."""
EXIT_NOT_STARTED = 127

STOP_REASONS = {
    "SIGINT": "Ctrl-C",
    "SIGTERM": "SIGTERM sent to the runner",
    "SIGHUP": "SIGHUP: its terminal closed",
}
SUBSCRIBER_STOP = "the GUI's Stop or `rankwatch stop`"


def stopped_run_exit_code(killed: bool) -> int:
    """What a run stopped on request records: 143, or 137 when it had to be killed."""
    return EXIT_KILLED if killed else EXIT_STOPPED


def process_exit_code(run_exit_code: int, received_signal: int | None, stopped: bool) -> int:
    """What the ``rankwatch run`` process returns: 128 + N when signal N stopped the run."""
    if stopped and received_signal is not None:
        return SIGNAL_BASE + int(received_signal)
    return run_exit_code


def describe_stop_reason(reason: str | None) -> str:
    """``"SIGINT"`` -> ``"Ctrl-C"``; a subscriber's request reads as what sends one."""
    if reason is None:
        return "a stop request"
    return STOP_REASONS.get(reason, SUBSCRIBER_STOP if "subscriber" in reason else reason)


def describe_exit_code(exit_code: int | None) -> str:
    """A rank's exit code as people read it: ``0``, ``1``, ``SIGTERM (-15)``, "–" when unknown."""
    if exit_code is None:
        return UNKNOWN_END
    name = signal_name(exit_code)
    return f"{name} ({exit_code})" if name else str(exit_code)
