"""Profiles on disk: save, list, show, load give back the same spec; relative paths; bad files."""

from __future__ import annotations

import subprocess
import sys

import pytest

from runner.profile.files import (
    ProfileError,
    delete_profile,
    example_profile,
    list_profiles,
    load_profile,
    rename_profile,
    save_profile,
)
from runner.profile.parse import SpecErrors
from runner.profile.spec import LaunchSpec


def rankwatch(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "runner", *args], capture_output=True, text=True, timeout=60)


def test_save_list_load_round_trip():
    spec = LaunchSpec(script="/w/train.py", args=("--lr", "0.1"), nproc_per_node=2, gpus="cpu", workdir="/w")
    save_profile("mine", spec)
    assert list_profiles() == ["mine"]
    assert load_profile("mine").spec == spec


def test_rename_and_delete():
    save_profile("a", LaunchSpec(script="x.py"))
    rename_profile("a", "b")
    assert list_profiles() == ["b"]
    delete_profile("b")
    assert list_profiles() == []
    with pytest.raises(ProfileError, match="no profile named 'b'"):
        delete_profile("b")


def test_bad_names_are_refused():
    with pytest.raises(ProfileError, match="not allowed"):
        save_profile("../escape", LaunchSpec(script="x.py"))


def test_relative_paths_are_relative_to_the_profile_file(tmp_path):
    (tmp_path / "job.toml").write_text('script = "train.py"\nworkdir = "sub"\n')
    profile = load_profile(str(tmp_path / "job.toml"))
    assert profile.base_dir == tmp_path
    assert profile.spec.workdir == "sub"


def test_malformed_toml_names_the_file_and_line(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('script = "a.py"\nargs = [1 2]\nbackend = "gloo"\n')
    with pytest.raises(SpecErrors) as caught:
        load_profile(str(bad))
    assert caught.value.errors[0].field == "toml"
    assert "not valid TOML" in caught.value.errors[0].message and "line 2" in caught.value.errors[0].message


def test_example_profile_is_valid_and_points_at_the_bundled_script():
    profile = example_profile()
    assert profile.spec.script.endswith("assets/examples/ddp_train.py")
    assert profile.spec.nproc_per_node == 2


def test_cli_profiles_save_list_show_load_give_the_same_spec(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("print('hi')\n")
    saved = rankwatch("profiles", "save", "cli", "--nproc-per-node", "2", "--gpus", "cpu", "--env", "A=1",
                      str(script), "--epochs", "3")
    assert saved.returncode == 0, saved.stderr
    assert rankwatch("profiles", "list").stdout.split() == ["cli"]
    shown = rankwatch("profiles", "show", "cli").stdout
    copy = tmp_path / "copy.toml"
    copy.write_text(shown)
    assert load_profile(str(copy)).spec == load_profile("cli").spec
    spec = load_profile("cli").spec
    assert spec.script == str(script) and spec.args == ("--epochs", "3")
    assert spec.nproc_per_node == 2 and spec.gpus == "cpu" and spec.env == (("A", "1"),)
    assert rankwatch("profiles", "delete", "cli").returncode == 0
    assert rankwatch("profiles", "show", "cli").returncode == 1
