"""Bad input to the CLI: one line naming the field, exit code 2, and nothing launched."""

from __future__ import annotations

import pytest

from runner.store.store import RunNotFound, RunStore
from tests.jobs import rankwatch

GOOD = 'script = "{script}"\n'


@pytest.fixture
def script(tmp_path):
    path = tmp_path / "train.py"
    path.write_text("print('never runs in these tests')\n")
    return path


CASES = {
    "missing script": ('args = ["--x"]\n', "script: missing"),
    "script file absent": ('script = "{missing}"\n', "script: {missing} does not exist"),
    "bad GPU index": (GOOD + "gpus = [7]\n", "gpus: GPU 7 does not exist; this machine has no NVIDIA GPU"),
    "port out of range": (GOOD + '[rendezvous]\nmode = "static"\nmaster_port = 99999\n',
                          "rendezvous.master_port: 99999 is out of range; must be between 1 and 65535"),
    "unknown key": (GOOD + "nproc = 4\n", "nproc: unknown key; allowed here:"),
    "malformed TOML": (GOOD + "args = [\n", "toml: "),
    "nccl without GPUs": (GOOD + 'backend = "nccl"\n', "backend: nccl needs NVIDIA GPUs"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_invalid_profile_gives_one_line_naming_the_field_and_exit_2(case, script, tmp_path):
    body, expected = CASES[case]
    missing = tmp_path / "nope.py"
    profile = tmp_path / "job.toml"
    profile.write_text(body.format(script=script, missing=missing))
    result = rankwatch("run", str(profile), timeout=60)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"rankwatch: {profile}: ")
    assert expected.format(missing=missing) in lines[0]
    with pytest.raises(RunNotFound), RunStore(readonly=True) as store:  # nothing launched, nothing recorded
        store.resolve_run_id("last")


def test_unknown_profile_name_lists_the_saved_ones():
    result = rankwatch("run", "no-such-profile")
    assert result.returncode == 2
    assert "no profile named 'no-such-profile'" in result.stderr


def test_flag_errors_name_the_flag(script):
    result = rankwatch("run", "--gpus", "one,two", str(script))
    assert result.returncode == 2 and "gpus: expected indices" in result.stderr


def test_run_without_target_says_what_to_give():
    result = rankwatch("run")
    assert result.returncode == 2 and "give a profile name, a .toml file, a script, or --example" in result.stderr


def test_runs_show_unknown_run():
    assert rankwatch("runs", "show", "last").returncode == 1
