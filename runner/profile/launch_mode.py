"""How a script is started: under torchrun (one process per rank), or directly, to start its own ranks.

Scripts written for ``torch.multiprocessing.spawn`` (the official DDP tutorial's
``mp.spawn(demo_basic, nprocs=N)``) start their ranks themselves; under torchrun they
would be started N times over and their children hang on torchrun's agent store. In the
``self-spawn`` mode the runner starts the script once with the interpreter (no torchrun)
and recognises the processes it spawns as ranks (``rankwatch._spawn``). A single-process
script (``DataParallel`` over several GPUs) is the one-process case of that mode.

``auto`` reads the script's text: a call of ``mp.spawn`` / ``torch.multiprocessing.spawn`` /
``start_processes``, or a ``Process(target=F)`` whose ``F`` reaches ``init_process_group``
(PyTorch's "Writing Distributed Applications" harness, ``rankwatch._rank_starters``), means
``self-spawn``, anything else ``torchrun``. A module (``-m``) or
an unreadable script is not guessed at: ``torchrun``. The choice and its reason are said
in the run's first event (``EventKind.LAUNCH_MODE``) and in the command preview.

Scripts that support both ways (PyTorch's ImageNet example and the many trainers copied
from it: ``if args.multiprocessing_distributed: mp.spawn(...) else: main_worker(...)``)
spawn only under a condition. When the condition is a flag of the script's own
(``args.NAME``, where the script declares an ``--NAME`` / ``--NA-ME`` option), the script's
arguments say whether the spawn runs: without the flag the script is torchrun's. Any other
condition is read as the user's launch settings say: an explicit ``nproc_per_node`` asks
for torchrun.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

from rankwatch import _rank_starters as rank_starters
from rankwatch import _templates as templates
from runner.profile.spec import AUTO, SELF_SPAWN, TORCHRUN, LaunchSpec

MAX_SCRIPT_BYTES = 2 * 1024 * 1024
"""Longer scripts are not read for ``auto`` (they are torchrun's)."""
SPAWN_CALL = re.compile(
    r"^[^#\n]*?\b(?P<call>(?:(?:mp|multiprocessing|torch\.multiprocessing)\.(?:spawn|start_processes)"
    r"|start_processes))\s*\(",
    re.MULTILINE)
"""A call of torch's spawn outside a comment: ``mp.spawn(``, ``torch.multiprocessing.spawn(``,
``start_processes(``. Python's own ``multiprocessing.Process`` starts ranks only when its
target reaches ``init_process_group`` (``rank_starters``); otherwise it starts helpers."""
TORCH_MULTIPROCESSING = re.compile(r"^\s*(?:import torch\.multiprocessing|from torch(?:\.multiprocessing)? import)",
                                   re.MULTILINE)


@dataclass(frozen=True)
class LaunchModeChoice:
    mode: str
    """``torchrun`` or ``self-spawn``."""
    reason: str
    """Why, in a few words a person reads in the preview and the run's events."""
    chosen_by: str
    """``profile`` (the user chose it) or ``auto``."""
    spawn_call: str | None = None
    """The script's spawn call (``mp.spawn(...) on line 104``) when ``auto`` read one."""

    def describe(self) -> str:
        return f"launch mode: {self.mode} ({self.reason})"


def choose_launch_mode(spec: LaunchSpec, script: str | None) -> LaunchModeChoice:
    """The mode ``spec`` runs in; ``script`` is the script's absolute path on this machine."""
    if spec.launch_mode != AUTO:
        return LaunchModeChoice(spec.launch_mode, "chosen in the profile", "profile")
    if spec.module or script is None:
        return LaunchModeChoice(TORCHRUN, "a module is not read to guess", "auto")
    if spec.slurm is not None or spec.is_multi_node:
        return LaunchModeChoice(TORCHRUN, "several nodes need torchrun", "auto")
    if templates.uses_templates(spec.args):
        return LaunchModeChoice(TORCHRUN, "the arguments hold per-rank placeholders", "auto")
    found = spawn_call(script)
    if found is None:
        return LaunchModeChoice(TORCHRUN, "the script does not start its own ranks (no torch.multiprocessing."
                                          "spawn, no Process that calls init_process_group)", "auto")
    call, condition = found
    if condition is not None:
        flag = condition.flag
        if flag is not None:
            if not _gives_flag(spec.args, flag):
                return LaunchModeChoice(TORCHRUN, f"the script's {call} runs only with {flag[0]}, which its "
                                                  "arguments do not give", "auto", call)
            return LaunchModeChoice(SELF_SPAWN, f"the script starts its own ranks: {call}, with {flag[0]}", "auto",
                                    call)
        if spec.nproc_per_node != AUTO:
            return LaunchModeChoice(TORCHRUN, f"nproc_per_node is given, and the script's {call} runs only if "
                                              f"{condition.test}", "auto", call)
    return LaunchModeChoice(SELF_SPAWN, f"the script starts its own ranks: {call}", "auto", call)


@dataclass(frozen=True)
class SpawnCondition:
    """The ``if`` a spawn call sits under (other than ``if __name__ == "__main__"``)."""

    test: str
    """The condition as written: ``args.multiprocessing_distributed``."""
    flag: tuple[str, ...] | None
    """The options that set it when it is a flag of the script's (``args.NAME``, the call in its
    ``if`` branch): ``("--multiprocessing-distributed", "--multiprocessing_distributed")``."""


def spawn_call(script: str) -> tuple[str, SpawnCondition | None] | None:
    """``("mp.spawn(...) on line N", its condition)`` for the script's first call of torch's
    spawn (or else its first ``Process`` that starts a rank), or ``None`` when it has none."""
    try:
        path = Path(script)
        if path.stat().st_size > MAX_SCRIPT_BYTES:
            return None
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    found = SPAWN_CALL.search(text)
    if found is not None and found.group("call") == "start_processes" and TORCH_MULTIPROCESSING.search(text) is None:
        found = None  # someone else's start_processes
    if found is None:
        process = rank_starters.find_process_rank_start(text)
        if process is None:
            return None
        return process.describe(), spawn_condition(text, process.line)
    line = text.count("\n", 0, found.start("call")) + 1
    return f"{found.group('call')}(...) on line {line}", spawn_condition(text, line)


def spawn_condition(text: str, line: int) -> SpawnCondition | None:
    """The innermost ``if`` the call on ``line`` runs under; None when it runs unconditionally
    (or the script does not parse: then nothing is guessed)."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return None
    found: list[SpawnCondition | None] = []

    def visit(node: ast.AST, condition: SpawnCondition | None) -> None:
        if found:
            return
        if isinstance(node, ast.Call) and node.lineno == line:
            found.append(condition)
            return
        if isinstance(node, ast.If) and not _is_main_guard(node.test):
            visit(node.test, condition)
            for statement in node.body:
                visit(statement, _condition(node.test, in_body=True))
            for statement in node.orelse:
                visit(statement, _condition(node.test, in_body=False))
            return
        for child in ast.iter_child_nodes(node):
            visit(child, condition)

    visit(tree, None)
    condition = found[0] if found else None
    if condition is not None and condition.flag is not None and not any(
            f'"{option}"' in text or f"'{option}'" in text for option in condition.flag):
        condition = SpawnCondition(condition.test, None)  # not an option the script declares: not read as one
    return condition


def _condition(test: ast.expr, in_body: bool) -> SpawnCondition:
    flag = None
    if in_body and isinstance(test, ast.Attribute) and isinstance(test.value, ast.Name):
        name = test.attr
        flag = tuple(dict.fromkeys((f"--{name.replace('_', '-')}", f"--{name}")))
    return SpawnCondition(ast.unparse(test), flag)


def _is_main_guard(test: ast.expr) -> bool:
    """``__name__ == "__main__"`` (either way round)."""
    return (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq)
            and {_plain(test.left), _plain(test.comparators[0])} == {"__name__", "'__main__'"})


def _plain(node: ast.expr) -> str:
    return node.id if isinstance(node, ast.Name) else ast.unparse(node)


def _gives_flag(args: tuple[str, ...] | list[str], flag: tuple[str, ...]) -> bool:
    """Whether the script's arguments give one of ``flag``'s options (``--x`` or ``--x=...``)."""
    return any(arg == option or arg.startswith(option + "=") for arg in args for option in flag)
