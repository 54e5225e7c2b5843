"""The runner's Qt-free typed values that the GUI shows as they are (one truth in both).

The states of a run, a rank and a node (``RunStatus``, ``RankState``, ``NodeState``) and how a
run ended (``Outcome``, ``RunSummary`` with its ``RankFailure`` s); a hint and its keys
(``Hint``, ``HintKey``); a doctor check (``DoctorCheck``, ``CheckStatus``) and the facts it
judged (``DoctorFacts``); progress as the terminal view counts it (``Progress``); the GPU report
the probe parses (``GpuReport``). Values only: what the runner does with them is a facade of
its own (``wording.RunWording``, ``run_state.RunReading``, ``launch_rules.LaunchRules``...).
"""

from __future__ import annotations

from runner.diagnosis.doctor_checks import CheckStatus, DoctorCheck
from runner.diagnosis.doctor_facts import DoctorFacts
from runner.diagnosis.hints import Hint, HintKey
from runner.diagnosis.summary import RunSummary
from runner.rank_failure import RankFailure
from runner.runstate.progress import Progress
from runner.sampling.gpu_report import GpuReport
from runner.state import NodeState, Outcome, RankState, RunStatus

__all__ = [
    "CheckStatus",
    "DoctorCheck",
    "DoctorFacts",
    "GpuReport",
    "Hint",
    "HintKey",
    "NodeState",
    "Outcome",
    "Progress",
    "RankFailure",
    "RankState",
    "RunStatus",
    "RunSummary",
]
