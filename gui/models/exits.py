"""How a rank (or a run) ended, in one wording for every panel (Qt-free).

The rank table, the Diagnosis panel and the history all say it through the runner's
one wording (``runner.exit_status``, through the gateway): ``exit code 1``, ``SIGTERM``,
``SIGKILL``, ``SIGTERM, stopped after rank 1 failed`` -- never "Exit 1" in one place and
"signal SIGTERM (exit code -15)" in another. A negative exit status is
how Python's ``subprocess`` and torchrun report a process killed by a signal, so
it is named by its signal.

Where the run's triage (the summary stored when the run ended) names how a rank
ended, that is what every panel shows (:func:`rank_exits`): it is the considered
verdict, with the signal torchrun reported; otherwise the rank's row as the store
recorded it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gui.gateway.run_state import RankInfo
from gui.gateway.runner_rules import RunSummary
from gui.gateway.wording import RunWording

__all__ = ["NOT_ENDED", "UNKNOWN", "ended_by", "rank_ended_by", "rank_exits", "run_summary"]

UNKNOWN = RunWording.NOT_MEASURED
"""A rank that ended without a known status ("–")."""
NOT_ENDED = ""
"""A rank that is still running has no end to tell."""


def run_summary(summary: RunSummary | Mapping[str, Any] | None) -> RunSummary | None:
    """The run's triage typed: as it is, or decoded from the RUN row's ``summary`` as sent
    (``RunSummary.from_wire``, lenient); None for a run without one."""
    if isinstance(summary, RunSummary):
        return summary
    return RunSummary.from_wire(dict(summary)) if isinstance(summary, Mapping) else None


def rank_exits(summary: RunSummary | Mapping[str, Any] | None
               ) -> dict[int, tuple[int | None, str | None, int | None]]:
    """rank -> (exit code, signal name, the rank whose failure it followed) as the run's triage found
    them (first failure and others)."""
    decoded = run_summary(summary)
    if decoded is None:
        return {}
    found: dict[int, tuple[int | None, str | None, int | None]] = {}
    for fate in reversed([decoded.first_failure, *decoded.other_failures]):  # the first wins over a repeat
        if fate is not None and fate.rank is not None:
            found[fate.rank] = (fate.exit_code, fate.signal or None, fate.after)
    return found


def rank_ended_by(row: RankInfo, summary: RunSummary | Mapping[str, Any] | None, finished: bool) -> str:
    """What a rank's "Ended by" says: the triage's verdict, else its row; empty while it runs."""
    verdict = rank_exits(summary).get(row.rank)
    if verdict is not None and (verdict[0] is not None or verdict[1] or verdict[2] is not None):
        code, signal, after = verdict
        return RunWording.rank_end(code, signal, after=after)
    code = row.exit_code
    if code is not None:
        return ended_by(code)
    return UNKNOWN if finished else NOT_ENDED


def ended_by(exit_code: int | None, signal: str | None = None) -> str:
    """What "Ended by" says of an exit status: the runner's words (``RunWording.ended_by``)."""
    return RunWording.ended_by(exit_code, signal)
