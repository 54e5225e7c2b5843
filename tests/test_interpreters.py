"""Interpreter discovery on a fake home folder: venvs near the project, virtualenvwrapper, conda."""

from __future__ import annotations

import sys
from pathlib import Path

from runner.interpreters import discover_interpreters, python_in


def make_env(prefix: Path, executable: str = "python") -> Path:
    """An environment folder with an executable ``bin/python`` (a stub script)."""
    python = prefix / "bin" / executable
    python.parent.mkdir(parents=True, exist_ok=True)
    python.write_text("#!/bin/sh\n")
    python.chmod(0o755)
    return python


def test_finds_project_venvs_wrapper_envs_and_conda_envs(tmp_path):
    home = tmp_path / "home"
    project = home / "code" / "proj"
    script_dir = project / "src"
    script_dir.mkdir(parents=True)
    (script_dir / "train.py").write_text("")
    project_venv = make_env(project / ".venv")
    parent_venv = make_env(home / "code" / "venv")
    wrapper = make_env(home / ".virtualenvs" / "research")
    conda_base = home / "miniconda3"
    (conda_base / "conda-meta").mkdir(parents=True)
    base_python = make_env(conda_base)
    conda_env = make_env(conda_base / "envs" / "pytorch")
    listed = make_env(tmp_path / "elsewhere" / "listed-env", executable="python3")
    (home / ".conda").mkdir()
    (home / ".conda" / "environments.txt").write_text(f"{listed.parent.parent}\n\n{conda_env.parent.parent}\n")
    not_executable = home / ".virtualenvs" / "broken" / "bin" / "python"
    not_executable.parent.mkdir(parents=True)
    not_executable.write_text("")

    found = discover_interpreters([script_dir / "train.py", project], home=home, environ={},
                                  this_python="/usr/bin/python3", system_roots=())

    labels = {path: label for label, path in found}
    assert found[0].path == "/usr/bin/python3" and found[0].label.startswith("This Python (")
    assert labels[str(project_venv)] == ".venv in ~/code/proj"
    assert labels[str(parent_venv)] == "venv in ~/code"
    assert labels[str(wrapper)] == "virtualenv: research"
    assert labels[str(conda_env)] == "conda: pytorch"
    assert labels[str(base_python)] == "conda: base (miniconda3)"
    assert labels[str(listed)] == "conda: listed-env"
    assert str(not_executable) not in labels
    assert len(labels) == len(found)  # each interpreter once, though some were found twice


def test_active_environments_and_this_python_come_first_and_once(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    active = make_env(tmp_path / "active-venv")
    conda = make_env(tmp_path / "conda-active")
    this = str(active)

    found = discover_interpreters([], home=home, environ={"VIRTUAL_ENV": str(active.parent.parent),
                                                          "CONDA_PREFIX": str(conda.parent.parent)},
                                  this_python=this, system_roots=())

    assert [item.path for item in found] == [this, str(conda)]
    assert found[1].label == "conda: conda-active"


def test_missing_folders_and_relative_hints_are_ignored(tmp_path):
    found = discover_interpreters(["relative/dir", "", tmp_path / "does-not-exist"], home=tmp_path / "nobody",
                                  environ={}, this_python=sys.executable, system_roots=())
    assert [item.path for item in found] == [sys.executable]
    assert python_in(tmp_path) is None
