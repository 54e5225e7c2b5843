"""Run the user's program exactly as ``python SCRIPT ARGS`` or ``python -m MODULE ARGS`` would.

What the user's code can observe is made identical to a plain run:

* ``sys.argv`` is ``[SCRIPT, *ARGS]`` with SCRIPT as given (``-m``: the module's
  file, as ``python -m`` sets it);
* ``sys.path[0]`` is the script's directory, symlinks resolved (``-m``: the
  current directory);
* the code runs in a module named ``__main__`` that stays ``sys.modules["__main__"]``
  (pickling classes defined in the script, multiprocessing's ``spawn``, which
  re-imports the main module from its ``__file__``, and ``atexit`` handlers that
  use the script's globals all work);
* for a source file, ``__file__`` is absolute, ``__loader__`` is a
  ``SourceFileLoader``, ``__spec__`` is None and code objects carry the absolute
  file name, so tracebacks read the same.

``runpy.run_path`` is not used for source files because it gives ``__file__``
and ``sys.argv[0]`` the same value (Python gives an absolute ``__file__`` but
``argv[0]`` as typed) and restores ``__main__`` when the script returns. It
still runs directories and zip files (``__main__.py`` inside), and ``-m`` uses
runpy's own ``python -m`` entry point.
"""

from __future__ import annotations

import builtins
import importlib.machinery
import os
import runpy
import sys
import types

_ZIP_MAGIC = b"PK\x03\x04"


class ScriptNotFound(OSError):
    """The script cannot be opened; ``python`` would say "can't open file" and exit with 2."""


def run_file(path: str, args: list[str]) -> None:
    """Run the file, directory or zip ``path`` as ``__main__`` with ``sys.argv[1:] = args``.

    Raises:
        ScriptNotFound: ``path`` does not exist or cannot be read.
        BaseException: whatever the script raises (``SystemExit`` included).
    """
    absolute = os.path.abspath(path)
    sys.argv[:] = [path, *args]
    if os.path.isdir(absolute):
        _run_archive(path)
        return
    try:
        with open(absolute, "rb") as source_file:
            source = source_file.read()
    except OSError as exc:
        raise _not_found(absolute, exc) from None
    if source.startswith(_ZIP_MAGIC):
        _run_archive(path)
        return
    if absolute.endswith(".pyc"):
        _set_path0(os.path.dirname(absolute))
        runpy.run_path(path, run_name="__main__")
        return
    _set_path0(os.path.dirname(os.path.realpath(absolute)))
    code = compile(source, absolute, "exec", dont_inherit=True)
    main = types.ModuleType("__main__")
    main.__file__ = absolute
    main.__cached__ = None
    main.__loader__ = importlib.machinery.SourceFileLoader("__main__", absolute)
    main.__builtins__ = builtins
    sys.modules["__main__"] = main
    exec(code, main.__dict__)


def run_module(name: str, args: list[str]) -> None:
    """Run module ``name`` as ``python -m name`` does.

    Raises:
        SystemExit: the module cannot be found (same message as ``python -m``).
        BaseException: whatever the module raises.
    """
    sys.argv[:] = ["-m", *args]
    _set_path0(os.getcwd())
    main = types.ModuleType("__main__")
    main.__builtins__ = builtins
    sys.modules["__main__"] = main
    run_as_main = getattr(runpy, "_run_module_as_main", None)
    if run_as_main is not None:
        run_as_main(name, alter_argv=True)
    else:  # pragma: no cover - every CPython 3 has it; keep a public fallback
        runpy.run_module(name, run_name="__main__", alter_sys=True)


def _run_archive(path: str) -> None:
    """A directory or zip file with ``__main__.py``: runpy puts ``path`` first on ``sys.path``."""
    if sys.path:
        del sys.path[0]  # our own entry (the bootstrap's working directory)
    runpy.run_path(path, run_name="__main__")


def cannot_open_message(error: ScriptNotFound) -> str:
    """The line ``python`` prints for a script it cannot open."""
    return f"{sys.executable}: can't open file {error.filename!r}: [Errno {error.errno}] {error.strerror}"


def _not_found(absolute: str, cause: OSError) -> ScriptNotFound:
    return ScriptNotFound(cause.errno or 2, cause.strerror or "No such file or directory", absolute)


def _set_path0(directory: str) -> None:
    if sys.path:
        sys.path[0] = directory
    else:
        sys.path.insert(0, directory)
