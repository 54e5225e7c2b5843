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

**A rank that ended because another failed** (torchrun's SIGTERM once one rank failed, or
its own error that only says a peer went away, "Connection closed by peer") did not fail by
itself: its state is ``stopped`` and every surface says so the same way, ``stopped after rank 1
failed`` (:func:`rank_end_words`). Its exit code follows the rule above (torchrun's SIGTERM
beats the "exit code 1" its dying interpreter announced); while the run goes on and torchrun has
not reported it yet, it has none ("–"), rather than a code the report will contradict.

**The ``rankwatch run`` process** exits with the run's code, except when the process
itself received the signal that stopped the run: then it exits like any shell job
killed by signal N, 128 + N: **130 after Ctrl-C** (SIGINT), **143 after SIGTERM**,
**129 after SIGHUP**.
"""

from __future__ import annotations

import re
import signal
from typing import Any

from runner.rank_failure import Evidence, RankFailure

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


# ---- how a rank ended, in words: the one wording every surface uses ------------------------
#
# Three forms of one status, each for its place:
#   describe_exit_code  a table's "exit" cell            ``1``, ``SIGTERM (-15)``, ``–``
#   ended_by            a phrase, a panel, a rank row    ``exit code 1``, ``SIGTERM``, ``–``
#   describe_end_of     a failure's headline             ``exit code 1``, ``signal SIGKILL``
# and, for a rank that ended because another failed, ``stopped after rank 1 failed`` before them
# (rank_end_words, rank_exit_message).

UNKNOWN_END = "\u2013"
"""A rank that ended without a known status: not measured ("–")."""

STOPPING_SIGNALS = frozenset({signal.SIGTERM, signal.SIGINT})
"""What torchrun (or a person) sends to stop ranks: a rank ended by one did not fail by itself."""
PEER_GONE = re.compile(r"Connection closed by peer|Connection reset by peer|remote worker crashing|"
                       r"NCCL communicator was aborted|remote process exited|Broken pipe")
"""What a rank says when a peer went away while it talked to it: an echo of the peer's end, not a cause."""

EVIDENCE_WORDS = {
    Evidence.EXCEPTION: "its uncaught exception (reported by the worker)",
    Evidence.CONNECTION_LOST: "its connection to the runner dropped without an exit message",
    Evidence.EXIT_CODE: "its exit status",
    Evidence.TORCHRUN_REPORT: "torchrun's failure report",
}
TRACEBACK_SOURCE_WORDS = {"bootstrap": "reported by the worker", "error file": "from torchrun's error file",
                          "torchrun report": "from torchrun's report"}


def signal_name(exit_code: int | None) -> str | None:
    """``-15`` -> ``SIGTERM``: the signal a negative exit status names (torchrun's and Python's
    convention for death by signal N); None for an ordinary exit."""
    if exit_code is None or exit_code >= 0:
        return None
    try:
        return signal.Signals(-exit_code).name
    except ValueError:
        return f"signal {-exit_code}"


def is_stopping_signal(exit_code: int | None) -> bool:
    """A death by SIGTERM or SIGINT: the rank was stopped, by torchrun or a person."""
    return exit_code is not None and exit_code < 0 and -exit_code in STOPPING_SIGNALS


def only_says_peer_gone(exception_line: str | None) -> bool:
    """An error that only reports that another rank went away (not a cause of its own)."""
    return bool(exception_line and PEER_GONE.search(exception_line))


def describe_exit_code(exit_code: int | None) -> str:
    """A rank's exit code as a table's cell: ``0``, ``1``, ``SIGTERM (-15)``, "–" when unknown."""
    if exit_code is None:
        return UNKNOWN_END
    name = signal_name(exit_code)
    return f"{name} ({exit_code})" if name else str(exit_code)


def ended_by(exit_code: int | None, signal: str | None = None) -> str:
    """``exit code 0``, ``exit code 1``, ``SIGTERM``, ``SIGKILL``; ``–`` when nothing is known.

    ``signal`` is a name already given (``SIGKILL``); else a negative ``exit_code`` names it.
    """
    if signal:
        return signal if signal.startswith(("SIG", "signal ")) else f"SIG{signal}"
    if exit_code is None:
        return UNKNOWN_END
    return signal_name(exit_code) or f"exit code {exit_code}"


def describe_end_of(exit_code: int | None, signal: str | None, evidence: str | None = None) -> str:
    """How a rank ended, as a failure's headline says it: ``signal SIGKILL``, ``exit code 1``,
    or what is known without an exit status (from the evidence)."""
    if signal:
        return f"signal {signal}"
    if exit_code is not None:
        return f"exit code {exit_code}"
    return _end_without_status(evidence)


def how_it_ended(exit_code: int | None, signal: str | None, evidence: str | None = None) -> str:
    """How a rank ended, as a table or a panel says it: ``SIGKILL``, ``exit code 1`` (``ended_by``),
    or what is known without an exit status."""
    if signal or exit_code is not None:
        return ended_by(exit_code, signal)
    return _end_without_status(evidence)


def _end_without_status(evidence: str | None) -> str:
    if evidence == Evidence.CONNECTION_LOST:
        return "its connection dropped without an exit: killed, or its node went away"
    if evidence == Evidence.EXCEPTION:
        return "an uncaught exception"
    return "no exit code known"


def stopped_after_words(after: int | None) -> str:
    """``stopped after rank 1 failed``: a rank that ended because another failed."""
    return "stopped after " + ("another rank failed" if after is None else f"rank {after} failed")


def rank_end_words(exit_code: int | None, signal: str | None = None, evidence: str | None = None,
                   after: int | None = None, stopped_by_failure: bool = False) -> str:
    """How one rank ended, for a rank row, a panel or the summary's list: ``exit code 1``,
    ``SIGKILL``; a rank that ended because rank 1 failed (``after``, or ``stopped_by_failure``
    when which one is not known): ``SIGTERM, stopped after rank 1 failed``."""
    if after is None and not stopped_by_failure:
        return how_it_ended(exit_code, signal, evidence)
    words = stopped_after_words(after)
    return f"{ended_by(exit_code, signal)}, {words}" if signal or exit_code is not None else words


def failure_end_words(failure: RankFailure | dict[str, Any]) -> str:
    """:func:`rank_end_words` of a summary's failure (a ``RankFailure`` or its wire form)."""
    if isinstance(failure, dict):
        failure = RankFailure.from_wire(failure)
    return rank_end_words(failure.exit_code, failure.signal, failure.evidence, failure.after)


def rank_exit_message(rank: int, exit_code: int | None, after: int | None = None,
                      stopped_by_failure: bool = False) -> str:
    """The live line of a rank's exit message: ``rank 1 exited with code 1``, ``rank 0 stopped after
    rank 1 failed`` (no code: torchrun's report gives it, and its SIGTERM beats the dying
    interpreter's "exit code 1")."""
    if after is not None or stopped_by_failure:
        return f"rank {rank} {stopped_after_words(after)}"
    return f"rank {rank} exited with code {exit_code}"
