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
from runner.diagnosis.summary import RunSummary
from runner.privacy import adopt_private_umask
from runner.rank_failure import RankFailure
from runner.runstate.progress import Progress, ProgressTracker, compute_progress
from runner.sampling.gpu_report import GpuProcess, GpuReport, GpuSnapshot
from runner.state import NodeState, Outcome, RankState, RunStatus

__all__ = [
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
    "paths",
]
