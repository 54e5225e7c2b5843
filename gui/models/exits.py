"""How a rank (or a run) ended, in one wording for every panel (Qt-free).

The rank table, the Diagnosis panel and the history all say it through
:func:`ended_by` (defined in the contract, ``rankwatch._protocol``, with the rest of
how a rank ended): ``exit code 1``, ``SIGTERM``, ``SIGKILL`` -- never "Exit 1" in one
place and "signal SIGTERM (exit code -15)" in another. A negative exit status is
how Python's ``subprocess`` and torchrun report a process killed by a signal, so
it is named by its signal.

Where the run's triage (the summary stored when the run ended) names how a rank
ended, that is what every panel shows (:func:`rank_exits`): it is the considered
verdict, with the signal torchrun reported; otherwise the rank's row as the store
recorded it.
"""

from __future__ import annotations

from typing import Any

from gui.gateway.run_state import RankInfo
from rankwatch._protocol import UNKNOWN_END as UNKNOWN
from rankwatch._protocol import as_int as _int
from rankwatch._protocol import ended_by

__all__ = ["NOT_ENDED", "UNKNOWN", "ended_by", "rank_ended_by", "rank_exits"]

NOT_ENDED = ""
"""A rank that is still running has no end to tell."""


def rank_exits(summary: dict[str, Any] | None) -> dict[int, tuple[int | None, str | None]]:
    """rank -> (exit code, signal name) as the run's triage found them (first failure and others)."""
    if not isinstance(summary, dict):
        return {}
    fates = [summary.get("first_failure"), *list(summary.get("other_failures") or [])]
    found: dict[int, tuple[int | None, str | None]] = {}
    for fate in reversed(fates):  # the first failure wins over a repeat in "others"
        if isinstance(fate, dict) and _int(fate.get("rank")) is not None:
            found[_int(fate["rank"])] = (_int(fate.get("exit_code")), fate.get("signal") or None)
    return found


def rank_ended_by(row: RankInfo, summary: dict[str, Any] | None, finished: bool) -> str:
    """What a rank's "Ended by" says: the triage's verdict, else its row; empty while it runs."""
    verdict = rank_exits(summary).get(row.rank)
    if verdict is not None and (verdict[0] is not None or verdict[1]):
        return ended_by(*verdict)
    code = row.exit_code
    if code is not None:
        return ended_by(code)
    return UNKNOWN if finished else NOT_ENDED
