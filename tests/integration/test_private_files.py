"""Private by default (issue 10): another local user can read nothing of a finished run.

A run is started the way the GUI starts one (``rankwatch run --detach``, so the launch
spec file and the runner's log exist too) with a secret in ``--env``, from a home folder
that everyone may traverse, so nothing but Rankwatch's own modes protects its files.
Then a second user (``nobody``) tries to list every folder and read every file; and the
checkpoint the job wrote keeps the user's own umask.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path

import pytest

from runner.store.store import RunStore
from tests.jobs import SCRIPTS, rankwatch, wait_for

pytestmark = pytest.mark.torchrun

SECRET = "hf_secret_5f2c81"
SECOND_USER = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]


def second_user_available() -> str | None:
    """Why no second user can be used here, or ``None``."""
    if os.geteuid() != 0:
        return "becoming another user needs root (the tests run as root here and in CI)"
    if shutil.which("setpriv") is None:
        return "setpriv (util-linux) is not installed"
    probe = subprocess.run([*SECOND_USER, "true"], capture_output=True, text=True)
    return None if probe.returncode == 0 else f"cannot become nobody: {probe.stderr.strip()}"


@pytest.fixture(scope="module")
def finished_run():
    reason = second_user_available()
    if reason:
        pytest.skip(f"no second user: {reason}")
    shared = Path(tempfile.mkdtemp(prefix="rw-private-", dir="/tmp"))
    shared.chmod(0o755)  # anyone may come this far: only Rankwatch's own modes may stop them
    home, workdir = shared / "home", shared / "work"
    workdir.mkdir(mode=0o755)
    workdir.chmod(0o777)
    env = {**os.environ, "RANKWATCH_HOME": str(home)}
    previous = os.umask(0o022)  # the user's usual umask, inherited by the CLI
    try:
        started = rankwatch("run", "--detach", "--json", "--nproc-per-node", "1", "--gpus", "cpu",
                            "--env", f"HF_TOKEN={SECRET}", str(SCRIPTS / "write_checkpoint.py"), str(workdir),
                            env=env, timeout=120)
    finally:
        os.umask(previous)
    assert started.returncode == 0, started.stderr
    store_file = home / "data" / "runs.db"

    def ended():
        with RunStore(store_file, readonly=True) as store:
            return store.runs(limit=1)[0].ended is not None

    wait_for(ended, 120, what="the detached run to end")
    yield home, workdir
    shutil.rmtree(shared, ignore_errors=True)


def test_rankwatch_files_are_0600_in_0700_folders(finished_run):
    home, _ = finished_run
    data = home / "data"
    run = data / "runs" / "1"
    for folder in (home, data, data / "runs", run, run / "stacks", run / "torchrun"):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700, folder
    files = [data / "runs.db", run / "runner.log", run / "stacks" / "rank-0.txt"]
    files += [path for path in (data / "runs.db-wal", data / "runs.db-shm") if path.exists()]
    for file in files:
        assert stat.S_IMODE(file.stat().st_mode) == 0o600, file
    with RunStore(data / "runs.db", readonly=True) as store:
        # the secret is there (the job printed it; the launch record masks it): that is why it must be private
        assert store.log_lines(1, contains=SECRET) and SECRET not in store.stored_run(1).spec_toml


TRIES = ('for path in "$@"; do '
         'if [ -d "$path" ]; then ls "$path" >/dev/null 2>&1 && echo "listed $path"; '
         'else cat "$path" >/dev/null 2>&1 && echo "read $path"; fi; done; '
         f'grep -rl {SECRET} "$0" 2>/dev/null; true')
"""Run as the second user: names every folder it can list and file it can read under ``$0``."""


def as_second_user(root: Path, paths: list[str]) -> str:
    return subprocess.run([*SECOND_USER, "sh", "-c", TRIES, str(root), *paths],
                          capture_output=True, text=True, timeout=60).stdout


def test_a_second_user_can_read_nothing_of_a_finished_run(finished_run):
    home, workdir = finished_run
    everything = [str(home)] + [str(path) for path in home.rglob("*")]
    assert len(everything) > 8  # the store, its run folder, stacks, torchrun's folders, the runner's log
    assert as_second_user(home, everything) == "", "another user got at Rankwatch's files"
    # the same tries do reach what is not private: the job's own checkpoint, in a shared folder
    checkpoint = str(workdir / "checkpoint-rank0.bin")
    assert as_second_user(workdir, [checkpoint]) == f"read {checkpoint}\n"


def test_the_training_keeps_the_users_umask(finished_run):
    _, workdir = finished_run
    checkpoint = workdir / "checkpoint-rank0.bin"
    assert stat.S_IMODE(checkpoint.stat().st_mode) == 0o644  # 0666 & ~022, as without Rankwatch
