"""The GUI's gateway to the runner stays an explicit, small API (``gui/gateway/``).

The GUI once took 134 names from the gateway, most of them the runner's functions and constants
passed through one by one. The gateway now offers facades it defines (``LaunchRules``,
``ProfileLibrary``, ``RunWording``, ``RunReading``, ``FindingEvents``, ``StoreReads``...) and the
typed values their signatures and the hub's messages carry. These tests read the source (no Qt,
no runner imported) and fail when that surface grows back or is reached around.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
GATEWAY = REPO / "gui" / "gateway"

MOST_NAMES_THE_GUI_TAKES = 69
"""Distinct (gateway module, name) pairs imported by ``gui`` outside the gateway (134 before; +2 for
the history read from the store: ``StoredHistory``, ``HistoryEnd`` in the model)."""
MOST_NAMES_THE_GATEWAY_EXPORTS = 76
"""All ``__all__`` lists of the gateway's modules together (148 before)."""


def gateway_modules() -> dict[str, ast.Module]:
    """Each gateway module's syntax tree, by dotted name (the package's ``__init__`` imports nothing)."""
    return {f"gui.gateway.{path.stem}": ast.parse(path.read_text(encoding="utf-8"))
            for path in sorted(GATEWAY.glob("*.py")) if path.stem != "__init__"}


def exported(tree: ast.Module) -> list[str] | None:
    """The module's ``__all__`` when it is a literal list of names, else ``None``."""
    for node in tree.body:
        if (isinstance(node, ast.Assign) and isinstance(node.value, (ast.List, ast.Tuple))
                and any(getattr(target, "id", None) == "__all__" for target in node.targets)):
            return [element.value for element in node.value.elts if isinstance(element, ast.Constant)]
    return None


def names_the_gui_takes() -> dict[tuple[str, str], list[str]]:
    """(gateway module, name) -> the GUI files outside the gateway that import it."""
    taken: dict[tuple[str, str], list[str]] = {}
    for path in sorted((REPO / "gui").rglob("*.py")):
        if GATEWAY in path.parents:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("gui.gateway"):
                for alias in node.names:
                    taken.setdefault((node.module, alias.name), []).append(str(path.relative_to(REPO)))
    return taken


def test_every_gateway_module_lists_what_it_exports():
    modules = gateway_modules()
    assert len(modules) >= 10  # the scan found the gateway
    unlisted = [name for name, tree in modules.items() if exported(tree) is None]
    assert unlisted == [], f"define __all__ (a literal list) in {unlisted}"


def test_the_gateway_exports_a_small_surface():
    total = sum(len(exported(tree) or []) for tree in gateway_modules().values())
    assert total <= MOST_NAMES_THE_GATEWAY_EXPORTS, (
        f"the gateway exports {total} names; add a method to a facade (LaunchRules, RunWording, ...) "
        "rather than passing the runner's names through")


def test_the_gui_takes_few_names_from_the_gateway_and_only_listed_ones():
    taken = names_the_gui_takes()
    assert len(taken) >= 20  # the scan found the imports
    modules = gateway_modules()
    whole_modules = sorted(f"{module}.{name}" for module, name in taken if module == "gui.gateway")
    assert whole_modules == [], f"import names, not gateway modules read by attribute: {whole_modules}"
    unlisted = sorted(f"{module}.{name} ({', '.join(where)})" for (module, name), where in taken.items()
                      if name not in (exported(modules[module]) or []))
    assert unlisted == [], f"the GUI imports names its gateway module does not export: {unlisted}"
    assert len(taken) <= MOST_NAMES_THE_GUI_TAKES, (
        f"the GUI takes {len(taken)} names from the gateway (at most {MOST_NAMES_THE_GUI_TAKES}); "
        "use a facade's method instead of a new re-export")
