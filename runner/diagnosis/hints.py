"""The catalogue of known failure causes, each with what to do about it.

A hint is a pure function of the evidence (the first failure, the other ranks'
failures, the tails of their stderr, torchrun's own lines, the launch settings).
Each entry has a test with a real failing job or its real output.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class Hint:
    key: str
    cause: str
    advice: str

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Evidence:
    first: Any  # RankFailure | None (runner.diagnosis.triage)
    others: list = field(default_factory=list)
    launcher_lines: list[str] = field(default_factory=list)
    stderr_tails: dict[int, list[str]] = field(default_factory=dict)
    legacy_local_rank: bool = False
    backend: str | None = None
    cpu_mode: bool = False
    interpreter: str | None = None
    kernel_log: list[str] | None = None

    def first_text(self) -> str:
        """Everything known about the first failure, as one searchable text."""
        parts = []
        if self.first is not None:
            parts += [self.first.exception_line or "", self.first.traceback or ""]
            parts += self.stderr_tails.get(self.first.rank, [])
        return "\n".join(parts)

    def all_text(self) -> str:
        lines = list(self.launcher_lines)
        for tail in self.stderr_tails.values():
            lines += tail
        return "\n".join([self.first_text(), *lines])


Rule = Callable[[Evidence], Hint | None]
RULES: list[Rule] = []


def rule(function: Rule) -> Rule:
    RULES.append(function)
    return function


def find_hints(evidence: Evidence) -> list[Hint]:
    hints = []
    for check in RULES:
        hint = check(evidence)
        if hint is not None and all(h.key != hint.key for h in hints):
            hints.append(hint)
    return hints


@rule
def address_in_use(evidence: Evidence) -> Hint | None:
    text = evidence.all_text()
    if re.search(r"EADDRINUSE|[Aa]ddress already in use|address is already in use", text):
        port = re.search(r"port[:= ]+(\d{2,5})|:(\d{2,5})\b.*in use", text)
        which = next((g for g in port.groups() if g), None) if port else None
        where = f"port {which}" if which else "the rendezvous port"
        return Hint("address_in_use", f"{where} is already in use (often a leftover of an earlier run)",
                    "pick another master/rendezvous port, use the standalone rendezvous (a free port is picked), "
                    "or stop the process holding it (`ss -ltnp` shows it)")
    return None


@rule
def missing_module(evidence: Evidence) -> Hint | None:
    match = re.search(r"ModuleNotFoundError: No module named '([\w.]+)'", evidence.all_text())
    if match:
        module = match.group(1).split(".")[0]
        python = evidence.interpreter or "the chosen interpreter"
        return Hint("missing_module", f"module {module!r} is not installed in {python}",
                    f"install it there ({python} -m pip install {module}) or pick the interpreter of the "
                    "environment where it is installed")
    return None


@rule
def legacy_local_rank(evidence: Evidence) -> Hint | None:
    text = evidence.all_text()
    if not evidence.legacy_local_rank and re.search(
            r"the following arguments are required: --local[_-]rank|KeyError: 'LOCAL_RANK'|"
            r"unrecognized arguments: --local[-_]rank", text):
        return Hint("legacy_local_rank", "the script expects --local_rank (written for torch.distributed.launch)",
                    "turn on the legacy --local_rank option (profile: legacy_local_rank = true), or read "
                    "int(os.environ['LOCAL_RANK']) in the script")
    return None
