"""A RANKWATCH_HOME another user prepared is refused, never written into.

Another user plants ``data/`` (0777) and an empty ``runs.db`` (0666) where this user's
Rankwatch will look. Used as is, the store (every launch's secrets) would land in a file
of theirs, its ``-wal`` and ``-shm`` created with their mode. The tests plant as root with
``chown`` (they run as root here and in CI); elsewhere they are skipped.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from runner.store.store import RunStore
from tests.jobs import SCRIPTS, rankwatch

OTHER_UID = 65534  # nobody


def plant(home: Path, with_store: bool = True) -> Path:
    if os.geteuid() != 0:
        pytest.skip("planting files of another user needs root (the tests run as root here and in CI)")
    data = home / "data"
    data.mkdir(parents=True)
    data.chmod(0o777)
    os.chown(data, OTHER_UID, OTHER_UID)
    store = data / "runs.db"
    if with_store:
        store.touch()
        store.chmod(0o666)
        os.chown(store, OTHER_UID, OTHER_UID)
    return store


@pytest.mark.parametrize("with_store", [True, False])
def test_a_planted_data_folder_is_refused_with_one_line_and_exit_2(with_store):
    home = Path(tempfile.mkdtemp(prefix="rw-foreign-"))
    store = plant(home, with_store)
    env = {**os.environ, "RANKWATCH_HOME": str(home)}
    result = rankwatch("run", "--plain", "--nproc-per-node", "1", str(SCRIPTS / "print_then_wait.py"), env=env,
                       timeout=60)
    assert result.returncode == 2, result.stderr
    [line] = result.stderr.strip().splitlines()
    assert f"{home / 'data'} belongs to uid {OTHER_UID}, not to you" in line
    assert "Traceback" not in result.stderr
    assert not Path(f"{store}-wal").exists() and not Path(f"{store}-shm").exists()
    if with_store:
        assert store.stat().st_size == 0  # not written into


def test_a_planted_store_file_is_never_opened_for_writing(tmp_path):
    """Even past the checks (a store path given directly), the store refuses a file of another user."""
    if os.geteuid() != 0:
        pytest.skip("planting files of another user needs root")
    folder = tmp_path / "data"
    folder.mkdir(mode=0o700)
    store = folder / "runs.db"
    store.touch()
    store.chmod(0o666)
    os.chown(store, OTHER_UID, OTHER_UID)
    with pytest.raises(PermissionError, match=f"belongs to uid {OTHER_UID}"):
        RunStore(store)
    assert store.stat().st_size == 0 and not Path(f"{store}-wal").exists()


def test_a_planted_home_of_another_user_is_refused(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("planting files of another user needs root")
    home = tmp_path / "home"
    home.mkdir(mode=0o777)
    os.chown(home, OTHER_UID, OTHER_UID)
    env = {**os.environ, "RANKWATCH_HOME": str(home)}
    result = rankwatch("run", "--plain", "--nproc-per-node", "1", str(SCRIPTS / "print_then_wait.py"), env=env,
                       timeout=60)
    assert result.returncode == 2, result.stderr
    assert f"{home} belongs to uid {OTHER_UID}" in result.stderr and "RANKWATCH_HOME" in result.stderr
    assert not (home / "data").exists()
