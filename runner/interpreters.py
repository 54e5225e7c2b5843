"""Find the Python interpreters a person is likely to train with.

The launch form offers them in its interpreter picker: this Python, virtual
environments next to the script or working directory (``.venv``, ``venv``,
``env``, also in parent folders), ``~/.virtualenvs/*`` (virtualenvwrapper),
the active ``$VIRTUAL_ENV`` / ``$CONDA_PREFIX``, and conda environments (those
listed in ``~/.conda/environments.txt`` plus the ``envs`` folders of the usual
conda, miniconda, mambaforge and miniforge installs).

Discovery only looks at the file system (a few ``stat`` calls per candidate); it
never runs an interpreter. Whether one has torch is the probe's job
(``python -m runner probe --json --interpreter PATH``). Standard library only.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import NamedTuple

VENV_FOLDER_NAMES = (".venv", "venv", "env")
CONDA_INSTALL_NAMES = (
    "miniconda3", "anaconda3", "miniforge3", "mambaforge", "micromamba",
    "miniconda", "anaconda", "conda", ".conda",
)
CONDA_SYSTEM_ROOTS = ("/opt/conda", "/opt/miniconda3", "/opt/anaconda3", "/opt/miniforge3",
                      "/opt/mambaforge", "/usr/local/miniconda3", "/usr/local/anaconda3")
PARENT_LEVELS = 3
"""How many folders above the script / working directory to look for a venv."""


class Interpreter(NamedTuple):
    """One picker entry; unpacks as ``(label, path)``."""

    label: str
    """What the picker shows, e.g. ``conda: pytorch`` or ``.venv in ~/proj``."""
    path: str
    """The ``python`` executable (not resolved through symlinks: a venv's python links to
    its base interpreter, but running it through the venv path is what activates the venv)."""


def python_in(prefix: Path) -> Path | None:
    """The interpreter of an environment folder, or ``None`` when there is none."""
    candidates = (prefix / "Scripts" / "python.exe", prefix / "python.exe") if os.name == "nt" \
        else (prefix / "bin" / "python", prefix / "bin" / "python3")
    for candidate in candidates:
        if _is_executable_file(candidate):
            return candidate
    return None


def _is_executable_file(path: Path) -> bool:
    try:
        return path.is_file() and os.access(path, os.X_OK)
    except OSError:
        return False


def _short(path: Path, home: Path) -> str:
    """``~/proj`` instead of ``/home/ana/proj`` in labels."""
    try:
        return "~/" + str(path.relative_to(home)) if path != home else "~"
    except ValueError:
        return str(path)


def _parents(folder: Path, levels: int) -> list[Path]:
    found = [folder]
    for parent in folder.parents:
        if len(found) > levels:
            break
        found.append(parent)
    return found


def _venvs_near(folders: Iterable[Path], home: Path) -> list[Interpreter]:
    found = []
    for folder in folders:
        for place in _parents(folder, PARENT_LEVELS):
            for name in VENV_FOLDER_NAMES:
                python = python_in(place / name)
                if python is not None:
                    found.append(Interpreter(f"{name} in {_short(place, home)}", str(python)))
    return found


def _virtualenvwrapper(home: Path, environ: Mapping[str, str]) -> list[Interpreter]:
    root = Path(environ.get("WORKON_HOME") or home / ".virtualenvs")
    return [Interpreter(f"virtualenv: {prefix.name}", str(python))
            for prefix in _sorted_dirs(root) if (python := python_in(prefix)) is not None]


def _sorted_dirs(folder: Path) -> list[Path]:
    try:
        return sorted(p for p in folder.iterdir() if p.is_dir())
    except OSError:
        return []


def _conda_label(prefix: Path) -> str:
    if (prefix / "conda-meta").is_dir() and prefix.parent.name != "envs":
        return f"conda: base ({prefix.name})"
    return f"conda: {prefix.name}"


def _conda_prefixes(home: Path, environ: Mapping[str, str], system_roots: Iterable[str]) -> list[Path]:
    prefixes: list[Path] = []
    listing = home / ".conda" / "environments.txt"
    try:
        lines = listing.read_text(encoding="utf-8").splitlines()
    except OSError:
        lines = []
    prefixes += [Path(line.strip()) for line in lines if line.strip()]
    installs = [home / name for name in CONDA_INSTALL_NAMES] + [Path(p) for p in system_roots]
    for variable in ("CONDA_EXE", "MAMBA_ROOT_PREFIX"):
        value = environ.get(variable)
        if value:
            path = Path(value)
            installs.append(path.parent.parent if variable == "CONDA_EXE" else path)
    for install in installs:
        if (install / "conda-meta").is_dir():
            prefixes.append(install)
        prefixes += _sorted_dirs(install / "envs")
    prefixes += _sorted_dirs(home / ".conda" / "envs")
    return prefixes


def discover_interpreters(
    near: Iterable[str | Path] = (),
    *,
    home: Path | None = None,
    environ: Mapping[str, str] | None = None,
    this_python: str | None = None,
    system_roots: Iterable[str] = CONDA_SYSTEM_ROOTS,
) -> list[Interpreter]:
    """Interpreters worth offering, this Python first, each path once.

    Args:
        near: folders (or files: their folder is used) around which to look for a
            project venv, typically the working directory and the script.
        home, environ, this_python, system_roots: the user's home, environment, own
            interpreter and the system-wide conda installs to look in; defaults are the
            real ones (tests pass a fake tree).

    Never raises: unreadable folders are skipped.
    """
    home = Path(home) if home is not None else Path.home()
    environ = os.environ if environ is None else environ
    this_python = this_python or sys.executable
    version = ".".join(str(part) for part in sys.version_info[:3])
    found = [Interpreter(f"This Python ({version})", this_python)]

    folders = []
    for item in near:
        if not item:
            continue
        path = Path(os.path.expanduser(str(item)))
        if not path.is_absolute():
            continue
        folders.append(path if path.is_dir() else path.parent)
    found += _venvs_near(folders, home)

    active = environ.get("VIRTUAL_ENV")
    if active and (python := python_in(Path(active))) is not None:
        found.append(Interpreter(f"active venv: {Path(active).name}", str(python)))
    found += _virtualenvwrapper(home, environ)

    conda_active = environ.get("CONDA_PREFIX")
    conda = ([Path(conda_active)] if conda_active else []) + _conda_prefixes(home, environ, system_roots)
    for prefix in conda:
        python = python_in(prefix)
        if python is not None:
            found.append(Interpreter(_conda_label(prefix), str(python)))

    unique: dict[str, Interpreter] = {}
    for interpreter in found:
        key = os.path.normcase(os.path.abspath(interpreter.path))
        unique.setdefault(key, interpreter)
    return list(unique.values())
