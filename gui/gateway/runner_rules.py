"""The runner's Qt-free values and rules that the GUI shows as they are (one truth in both).

The states of a run, a rank and a node, and how a run ended (``Outcome``, ``RunSummary``); a
hint and its keys (``Hint``, ``HintKey``); a doctor check (``DoctorCheck``, ``CheckStatus``) and the facts it judged (``doctor_facts``); how
a rank ended, in words (``exit_status``); progress as the terminal view counts it; how a stack
capture's verdict is worded; the GPU report the probe parses; where Rankwatch keeps its files
(``paths``, which ``RANKWATCH_HOME`` moves) and its private-file umask.
Only this gateway package reaches into ``runner``; the GUI's models and widgets take
these names from here (an import-linter contract in ``pyproject.toml``).
"""

from __future__ import annotations

from runner import paths
from runner.diagnosis import doctor_facts
from runner.diagnosis.doctor_checks import CheckStatus, DoctorCheck
from runner.diagnosis.hints import Hint, HintKey
from runner.diagnosis.stack_places import plural
from runner.diagnosis.stacks import ensure_verdict
from runner.diagnosis.summary import RunSummary
from runner.exit_status import (
    EVIDENCE_WORDS,
    TRACEBACK_SOURCE_WORDS,
    UNKNOWN_END,
    ended_by,
    failure_end_words,
    how_it_ended,
    rank_end_words,
)
from runner.format import ranks_text
from runner.privacy import adopt_private_umask
from runner.rank_failure import RankFailure, stall_outcome
from runner.runstate.progress import Progress, ProgressTracker, compute_progress, progress_texts
from runner.sampling.gpu_report import GpuProcess, GpuReport, GpuSnapshot
from runner.state import NodeState, Outcome, RankState, RunStatus

__all__ = [
    "EVIDENCE_WORDS",
    "TRACEBACK_SOURCE_WORDS",
    "UNKNOWN_END",
    "CheckStatus",
    "DoctorCheck",
    "GpuProcess",
    "GpuReport",
    "GpuSnapshot",
    "Hint",
    "HintKey",
    "NodeState",
    "Outcome",
    "Progress",
    "ProgressTracker",
    "RankFailure",
    "RankState",
    "RunStatus",
    "RunSummary",
    "adopt_private_umask",
    "compute_progress",
    "doctor_facts",
    "ended_by",
    "ensure_verdict",
    "failure_end_words",
    "how_it_ended",
    "paths",
    "plural",
    "progress_texts",
    "rank_end_words",
    "ranks_text",
    "stall_outcome",
]
