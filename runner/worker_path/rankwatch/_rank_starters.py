"""Which processes a script starts are its ranks: read from its text, and from a target's code.

Two ways scripts start their own ranks (instead of being started once per rank by torchrun):

* ``torch.multiprocessing.spawn(fn, nprocs=N)`` / ``start_processes``: every process it
  starts is a rank (the official DDP tutorial, the DDP tutorial series' ``multigpu.py``).
* ``multiprocessing.Process(target=init_process, args=(rank, size, ...))`` in a loop, as
  PyTorch's "Writing Distributed Applications" tutorial does. Python's ``Process`` also
  starts helpers (a data server, a logger), so a process is a rank only when its target
  reaches ``init_process_group``: the target's own code calls it, or a function of the
  same module that the target calls does (``RANK_SEARCH_DEPTH`` levels).

The text test (``find_process_rank_start``) serves the runner's ``auto`` launch mode
and the bootstrap's choice of a launcher; the code test (``starts_a_rank``) decides, at
``Process.start``, whether that process is a rank. Both say the same for the tutorial
shapes; neither imports torch. Standard library only.
"""

from __future__ import annotations

import ast
import types
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

INIT_PROCESS_GROUP = "init_process_group"
PROCESS_CLASS = "Process"
RANK_SEARCH_DEPTH = 3
"""How many calls deep (within the target's module) ``init_process_group`` is looked for: the
tutorial's ``init_process`` calls it itself; ``main -> ddp_setup -> init_process_group`` is 2."""


@dataclass(frozen=True)
class ProcessRankStart:
    """A ``Process(target=F)`` call in a script whose ``F`` reaches ``init_process_group``."""

    call: str
    """As a person reads it: ``mp.Process(target=init_process)``."""
    line: int

    def describe(self) -> str:
        return f"{self.call} on line {self.line}"


def find_process_rank_start(text: str) -> ProcessRankStart | None:
    """The script's first ``Process(target=F, ...)`` whose ``F`` (a function defined in the
    script) reaches ``init_process_group``; None when there is none or the text does not parse."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return None
    functions = {node.name: node for node in ast.walk(tree)
                 if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}
    calls = sorted((node for node in ast.walk(tree) if isinstance(node, ast.Call) and _is_process(node.func)),
                   key=lambda node: (node.lineno, node.col_offset))
    for call in calls:
        target = _target_name(call)
        if target is not None and _function_reaches(functions, target, RANK_SEARCH_DEPTH):
            return ProcessRankStart(f"{ast.unparse(call.func)}(target={target})", call.lineno)
    return None


def starts_a_rank(target: Any) -> bool:
    """Whether a process running ``target`` is a rank: its code (or that of a function of its
    module it calls) calls ``init_process_group``. Never raises."""
    try:
        return _code_reaches(target, RANK_SEARCH_DEPTH, set())
    except Exception:
        return False


def _is_process(func: ast.expr) -> bool:
    """``Process`` or ``something.Process``."""
    return ((isinstance(func, ast.Name) and func.id == PROCESS_CLASS)
            or (isinstance(func, ast.Attribute) and func.attr == PROCESS_CLASS))


def _target_name(call: ast.Call) -> str | None:
    """The name given as ``target=`` (or ``Process``'s second positional argument)."""
    for keyword in call.keywords:
        if keyword.arg == "target":
            return _plain_name(keyword.value)
    if len(call.args) > 1:
        return _plain_name(call.args[1])
    return None


def _plain_name(node: ast.expr) -> str | None:
    return node.id if isinstance(node, ast.Name) else None


def _called_names(function: ast.AST) -> set[str]:
    """Names called in ``function``'s body: ``f(...)`` gives ``f``, ``dist.f(...)`` gives ``f``."""
    names = set()
    for node in ast.walk(function):
        if isinstance(node, ast.Call):
            if isinstance(node.func, ast.Name):
                names.add(node.func.id)
            elif isinstance(node.func, ast.Attribute):
                names.add(node.func.attr)
    return names


def _function_reaches(functions: Mapping[str, ast.AST], name: str, depth: int) -> bool:
    function = functions.get(name)
    if function is None or depth <= 0:
        return False
    called = _called_names(function)
    if INIT_PROCESS_GROUP in called:
        return True
    return any(_function_reaches(functions, other, depth - 1) for other in called if other != name)


def _code_reaches(target: Any, depth: int, seen: set[int]) -> bool:
    function = getattr(target, "__func__", target)  # a bound method's function
    code = getattr(function, "__code__", None)
    if not isinstance(code, types.CodeType) or depth <= 0 or id(code) in seen:
        return False
    seen.add(id(code))
    names = _code_names(code)
    if INIT_PROCESS_GROUP in names:
        return True
    module_globals = getattr(function, "__globals__", None) or {}
    for name in names:
        other = module_globals.get(name)
        if isinstance(other, types.FunctionType) and _code_reaches(other, depth - 1, seen):
            return True
    return False


def _code_names(code: types.CodeType) -> set[str]:
    """The global and attribute names ``code`` (and the functions nested in it) refers to."""
    names = set(code.co_names)
    for constant in code.co_consts:
        if isinstance(constant, types.CodeType):
            names |= _code_names(constant)
    return names
