"""Secrets in a launch's environment are masked in everything shown or exported,
and the job still gets their values."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import pytest

from tests.jobs import rankwatch

pytestmark = pytest.mark.torchrun

SECRET = "secret123"
SCRIPT = f"""
import os, sys
sys.exit(0 if os.environ.get("HF_TOKEN") == "{SECRET}" and os.environ.get("DB_PASSWORD") == "pw456" else 3)
"""


@pytest.fixture(scope="module")
def recorded_run():
    home = Path(tempfile.mkdtemp(prefix="rw-masked-"))
    script = home / "needs_the_token.py"
    script.write_text(SCRIPT)
    env = {**os.environ, "RANKWATCH_HOME": str(home / "rw")}
    result = rankwatch("run", "--plain", "--nproc-per-node", "1", "--gpus", "cpu", "--env", f"HF_TOKEN={SECRET}",
                       "--env", "DB_PASSWORD=pw456", "--env", "PLAIN_SETTING=visible", str(script), env=env,
                       timeout=180)
    return result, env, home


def test_the_job_gets_the_secret_values(recorded_run):
    result, _env, _home = recorded_run
    assert result.returncode == 0, result.stderr  # the script exits 3 without them
    assert SECRET not in result.stdout + result.stderr


def test_runs_show_list_and_the_csv_export_mask_them(recorded_run):
    _result, env, home = recorded_run
    show = rankwatch("runs", "show", "last", env=env, timeout=60)
    assert show.returncode == 0, show.stderr
    assert "HF_TOKEN='***'" in show.stdout and "DB_PASSWORD='***'" in show.stdout
    assert "PLAIN_SETTING=visible" in show.stdout  # what is no secret stays readable
    outputs = {"show": show.stdout}
    for name, args in (("show --json", ("runs", "show", "last", "--json")), ("list --json", ("runs", "list", "--json"))):
        answer = rankwatch(*args, env=env, timeout=60)
        assert answer.returncode == 0, answer.stderr
        json.loads(answer.stdout)
        outputs[name] = answer.stdout
    export = rankwatch("runs", "export", "last", "--csv", str(home / "csv"), env=env, timeout=60)
    assert export.returncode == 0, export.stderr
    for csv in (home / "csv").glob("*.csv"):
        outputs[csv.name] = csv.read_text()
    for name, text in outputs.items():
        assert SECRET not in text and "pw456" not in text, f"a secret in {name}"
    assert "***" in outputs["list --json"] and "***" in outputs["runs.csv"]
