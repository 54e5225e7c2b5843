"""The runner's words for what the GUI tells: how ranks ended, stalls, rank lists, progress.

``rankwatch``'s terminal view, its summary and the GUI say the same thing the same way, so the
GUI takes its words from the runner (``runner.exit_status``, ``runner.format``,
``runner.runstate.progress``, ``runner.rank_failure``) through ``RunWording``, the one facade of
this module, and writes none of its own for these.
"""

from __future__ import annotations

from collections.abc import Iterable

from runner.diagnosis.findings import StallFinding
from runner.diagnosis.stack_places import plural
from runner.exit_status import (
    EVIDENCE_WORDS,
    TRACEBACK_SOURCE_WORDS,
    UNKNOWN_END,
    ended_by,
    failure_end_words,
    rank_end_words,
)
from runner.format import rank_ranges, ranks_text
from runner.rank_failure import RankFailure, stall_outcome
from runner.runstate.progress import Progress, progress_texts

__all__ = ["RunWording"]


class RunWording:
    """How the runner words a run's ends, stalls, ranks and progress (one wording everywhere)."""

    NOT_MEASURED = UNKNOWN_END
    """A rank that ended without a known status ("–")."""

    @staticmethod
    def ended_by(exit_code: int | None, signal: str | None = None) -> str:
        """``exit code 0``, ``exit code 1``, ``SIGTERM``, ``SIGKILL``; ``–`` when nothing is known."""
        return ended_by(exit_code, signal)

    @staticmethod
    def rank_end(exit_code: int | None, signal: str | None = None, *, after: int | None = None) -> str:
        """How one rank ended; one stopped because rank ``after`` failed says so
        (``SIGTERM, stopped after rank 1 failed``)."""
        return rank_end_words(exit_code, signal, after=after)

    @staticmethod
    def failure_end(failure: RankFailure) -> str:
        """How a failed rank of the run's triage ended (``rank_end`` of its code, signal, evidence)."""
        return failure_end_words(failure)

    @staticmethod
    def evidence(evidence: str) -> str:
        """What the first failure was told by (``its uncaught exception (reported by the worker)``);
        an evidence the runner has no words for as it is, an empty one as ``unknown``."""
        return EVIDENCE_WORDS.get(evidence, evidence or "unknown")

    @staticmethod
    def traceback_source(source: str | None) -> str:
        """Where a failure's traceback came from (``from torchrun's error file``); empty for none."""
        return TRACEBACK_SOURCE_WORDS.get(source or "", source or "")

    @staticmethod
    def ranks(ranks: Iterable[int]) -> str:
        """``rank 3``, ``ranks 0, 1`` or ``ranks 0-511, 513-1023``: how every message names ranks."""
        return ranks_text(ranks)

    @staticmethod
    def rank_numbers(ranks: Iterable[int]) -> str:
        """``3`` or ``0, 2-1023``: the ranks alone, as a table's rank column names a group of them."""
        return rank_ranges(ranks)

    @staticmethod
    def for_several_ranks(what: str) -> str:
        """A stack place's words for several ranks: ``waits in barrier`` -> ``wait in barrier``."""
        return plural(what)

    @staticmethod
    def stall_outcome(stall: StallFinding) -> str:
        """How a stall ended, as the tail of its summary line (empty while it lasts)."""
        return stall_outcome(stall.to_json())

    @staticmethod
    def progress(progress: Progress, status: str | None) -> tuple[str, str]:
        """(position, timing), e.g. ``("epoch 2/10 · 121/640 steps", "elapsed 1:05 · ETA 4:31")``."""
        return progress_texts(progress, status)
