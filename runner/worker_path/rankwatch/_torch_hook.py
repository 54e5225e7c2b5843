"""Run a callback right after the user's script imports torch.

The bootstrap must not import torch itself (about 2.5 s, and a script may never
use it), yet the instrumentation has to be in place before the first training
step. A one-shot ``sys.meta_path`` finder sees the import of ``torch``, lets the
normal finders locate it, and wraps the loader so the callback runs once
``torch/__init__.py`` has finished executing. The module keeps its real loader in
``__loader__`` and ``__spec__.loader``; nothing else about the import changes.
A script that never imports torch pays one string comparison per import.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any

TORCH = "torch"


def call_when_imported(callback: Callable[[ModuleType], None], name: str = TORCH) -> None:
    """Call ``callback(module)`` once ``name`` is imported (now, if it already is)."""
    module = sys.modules.get(name)
    if module is not None:
        callback(module)
        return
    sys.meta_path.insert(0, _PostImportFinder(name, callback))


class _PostImportFinder(importlib.abc.MetaPathFinder):
    """Finds nothing itself; wraps the loader of one module found by the other finders."""

    def __init__(self, name: str, callback: Callable[[ModuleType], None]):
        self._name = name
        self._callback = callback

    def find_spec(self, fullname: str, path: Any = None, target: Any = None):
        if fullname != self._name:
            return None
        try:
            sys.meta_path.remove(self)  # one shot, and no recursion below
        except ValueError:
            pass
        try:
            spec = importlib.util.find_spec(fullname)
        except (ImportError, ValueError):
            return None  # let the regular machinery report it as it would
        if spec is None or spec.loader is None:
            return spec
        spec.loader = _NotifyingLoader(spec.loader, self._callback)
        return spec


class _NotifyingLoader(importlib.abc.Loader):
    """Delegates to the real loader and calls back after a successful ``exec_module``."""

    def __init__(self, loader: Any, callback: Callable[[ModuleType], None]):
        self._loader = loader
        self._callback = callback

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        module.__loader__ = self._loader
        if module.__spec__ is not None:
            module.__spec__.loader = self._loader
        self._loader.exec_module(module)
        self._callback(module)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)
