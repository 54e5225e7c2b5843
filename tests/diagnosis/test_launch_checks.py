"""The bootstrap passes the legacy local-rank argument in the spelling the script's parser declares.

Real interpreters running the real bootstrap (no runner: the respelling does not
need telemetry); the scripts use argparse exactly as torch.distributed.launch-era
and torch >= 2.0 scripts do.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from rankwatch._environment import LEGACY_LOCAL_RANK
from runner.paths import WORKER_PATH

DECLARATIONS = {
    "underscore": 'parser.add_argument("--local_rank", type=int, required=True)',
    "dash": 'parser.add_argument("--local-rank", type=int, required=True)',
    "both": 'parser.add_argument("--local-rank", "--local_rank", type=int, required=True)',
}


def run_script(tmp_path: Path, declaration: str, legacy: bool, *args: str) -> subprocess.CompletedProcess:
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(f"""
        import argparse, sys
        parser = argparse.ArgumentParser()
        {declaration}
        parser.add_argument("--epochs", type=int, default=1)
        args = parser.parse_args()
        print(args.local_rank, args.epochs, sys.argv[1:])
    """))
    env = {key: value for key, value in os.environ.items() if not key.startswith("RANKWATCH_")}
    env.update(PYTHONPATH=str(WORKER_PATH), LOCAL_RANK="3", **({LEGACY_LOCAL_RANK: "1"} if legacy else {}))
    return subprocess.run([sys.executable, "-m", "rankwatch._bootstrap", str(script), *args], capture_output=True,
                          text=True, env=env, timeout=60)


@pytest.mark.parametrize(("declared", "spelling"), [("underscore", "--local_rank"), ("dash", "--local-rank"),
                                                    ("both", "--local_rank")])
def test_the_legacy_argument_reaches_the_script_in_the_spelling_it_declares(tmp_path, declared, spelling):
    result = run_script(tmp_path, DECLARATIONS[declared], True, "--epochs", "2")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"3 2 ['{spelling}=3', '--epochs', '2']"


def test_without_the_legacy_option_nothing_is_passed_or_rewritten(tmp_path):
    result = run_script(tmp_path, DECLARATIONS["dash"], False, "--local-rank", "5")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "5 1 ['--local-rank', '5']"
    missing = run_script(tmp_path, DECLARATIONS["dash"], False)
    assert missing.returncode == 2 and "the following arguments are required: --local-rank" in missing.stderr
