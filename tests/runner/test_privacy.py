"""Private by default: Rankwatch's folders 0700, files 0600 from the start, the socket folder
checked the way ssh-agent checks its own, and the user's umask left to the user's code.

These run in the test process, whose umask is the ordinary 022: what comes out 0600/0700
here does so by explicit modes, not by a umask.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from runner import paths, privacy
from runner.launch.supervisor import compose_environment
from runner.store.store import RunStore
from tests.jobs import REPO

WORKER_PATH = REPO / "runner" / "worker_path"


@pytest.fixture(autouse=True)
def ordinary_umask():
    previous = os.umask(0o022)
    yield
    os.umask(previous)


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_the_store_and_its_wal_and_shm_are_created_0600_in_a_0700_folder():
    with RunStore() as store:
        store.create_run(run_key="k", profile=None, spec_toml="[env]\nHF_TOKEN = 'secret'\n", command=None,
                         host="h", workdir=None, runner_pid=1, socket=None, world_size=1, status="running")
        data = paths.data_dir()
        files = sorted(p.name for p in data.iterdir())
        assert {"runs.db", "runs.db-wal", "runs.db-shm"} <= set(files)
        assert {name: mode(data / name) for name in files} == dict.fromkeys(files, 0o600)
    assert mode(data) == 0o700


def test_run_folders_are_0700_all_the_way_down():
    folder = paths.make_run_dir(12)
    for path in (paths.data_dir(), paths.runs_dir(), folder, folder / "stacks", folder / "torchrun"):
        assert mode(path) == 0o700, path


def test_a_data_folder_left_readable_by_an_older_version_is_tightened_once(tmp_path, monkeypatch):
    monkeypatch.setenv("RANKWATCH_HOME", str(tmp_path / "old"))
    old = tmp_path / "old" / "data"
    (old / "runs" / "3" / "stacks").mkdir(parents=True, mode=0o755)
    for folder in (old, old / "runs", old / "runs" / "3", old / "runs" / "3" / "stacks"):
        folder.chmod(0o755)
    (old / "runs.db").write_text("")
    (old / "runs" / "3" / "stacks" / "rank-0.txt").write_text("stack")
    for file in (old / "runs.db", old / "runs" / "3" / "stacks" / "rank-0.txt"):
        file.chmod(0o644)

    assert paths.private_data_dir() == old

    assert [mode(p) for p in (old, old / "runs", old / "runs" / "3", old / "runs" / "3" / "stacks")] == [0o700] * 4
    assert mode(old / "runs.db") == 0o600 and mode(old / "runs" / "3" / "stacks" / "rank-0.txt") == 0o600


def test_a_worker_opens_its_stack_dump_0600_whatever_its_umask(tmp_path):
    stacks = tmp_path / "stacks"
    script = ("import sys; sys.path.insert(0, sys.argv[1]); from rankwatch import _stacks; "
              "print(_stacks.install_stack_dumps(sys.argv[2], 3))")
    completed = subprocess.run([sys.executable, "-c", script, str(WORKER_PATH), str(stacks)],
                               capture_output=True, text=True, check=True)
    assert completed.stdout.strip() == str(stacks / "rank-3.txt")
    assert mode(stacks) == 0o700 and mode(stacks / "rank-3.txt") == 0o600


# ---- the umask: Rankwatch's processes private, the user's code as the user set it ----------------


def test_rankwatch_processes_create_private_files_and_remember_the_users_umask(tmp_path):
    script = ("import os, sys; from runner.privacy import adopt_private_umask, user_umask; adopt_private_umask(); "
              "open(sys.argv[1], 'w').close(); print(oct(user_umask()), os.environ['RANKWATCH_USER_UMASK'])")
    env = {k: v for k, v in os.environ.items() if k != privacy.USER_UMASK_VARIABLE}
    completed = subprocess.run([sys.executable, "-c", script, str(tmp_path / "made")], capture_output=True,
                               text=True, check=True, env=env, cwd=REPO)
    assert completed.stdout.split() == ["0o22", "022"]
    assert mode(tmp_path / "made") == 0o600


def test_a_runner_started_by_the_gui_keeps_the_users_umask_not_the_guis(tmp_path):
    """The GUI runs with 077 and starts the runner: the runner must not take 077 for the user's."""
    script = "from runner.privacy import adopt_private_umask, user_umask; adopt_private_umask(); print(oct(user_umask()))"
    env = {**os.environ, privacy.USER_UMASK_VARIABLE: "002"}
    completed = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True,
                               env=env, cwd=REPO, umask=0o077)
    assert completed.stdout.strip() == "0o2"


def test_the_recorded_umask_does_not_leak_into_the_training_environment(monkeypatch):
    from runner.launch.command import NodeCommand

    monkeypatch.setenv(privacy.USER_UMASK_VARIABLE, "022")
    env = compose_environment(NodeCommand(node=None, argv=("python",), env={"A": "1"}))
    assert privacy.USER_UMASK_VARIABLE not in env and env["A"] == "1"


def test_current_umask_is_read_without_changing_it():
    os.umask(0o027)
    assert privacy.current_umask() == 0o027
    assert os.umask(0o022) == 0o027


# ---- the socket folder -------------------------------------------------------------------------


@pytest.fixture
def shared_tmp(tmp_path, monkeypatch):
    """A stand-in for /tmp: the usual socket folder is looked for here."""
    shared = tmp_path / "tmp"
    shared.mkdir()
    shared.chmod(0o1777)
    monkeypatch.delenv("RANKWATCH_SOCKET_DIR")
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    monkeypatch.setenv("TMPDIR", str(shared))
    monkeypatch.setattr("tempfile.tempdir", None)
    monkeypatch.setattr(paths, "_fallback_socket_dir", None)
    return shared


def test_the_socket_folder_is_made_0700_in_one_mkdir(shared_tmp):
    folder = paths.socket_dir()
    assert folder == shared_tmp / f"rankwatch-{os.getuid()}"
    assert mode(folder) == 0o700 and not folder.is_symlink()
    assert paths.socket_dir() == folder  # and used again when it is right


def test_a_planted_symlink_is_neither_followed_nor_chmod_ed(shared_tmp, tmp_path, capsys):
    target = tmp_path / "victim"
    target.mkdir(mode=0o755)
    target.chmod(0o755)
    (shared_tmp / f"rankwatch-{os.getuid()}").symlink_to(target)

    folder = paths.socket_dir()

    assert mode(target) == 0o755  # the link's target is left alone
    assert folder.parent == shared_tmp and folder.name.startswith(f"rankwatch-{os.getuid()}-")
    assert mode(folder) == 0o700 and not folder.is_symlink()
    assert "is a symbolic link" in capsys.readouterr().err


def test_a_folder_of_another_user_is_not_used(shared_tmp, capsys):
    planted = shared_tmp / f"rankwatch-{os.getuid()}"
    planted.mkdir(mode=0o700)
    os.chown(planted, 65534, 65534)  # nobody's (the tests run as root, here and in CI)

    folder = paths.socket_dir()

    assert folder != planted and mode(folder) == 0o700 and folder.stat().st_uid == os.getuid()
    assert "belongs to uid 65534" in capsys.readouterr().err


def test_a_folder_others_can_use_is_not_used(shared_tmp):
    loose = shared_tmp / f"rankwatch-{os.getuid()}"
    loose.mkdir()
    loose.chmod(0o777)

    folder = paths.socket_dir()

    assert folder != loose and mode(loose) == 0o777


def test_runtime_dir_is_used_only_when_it_is_the_users_own_private_folder(shared_tmp, tmp_path, monkeypatch):
    runtime = tmp_path / "run-user"
    runtime.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    assert paths.socket_dir() == runtime / "rankwatch"

    runtime.chmod(0o755)  # not what the XDG spec promises: ignored
    assert paths.socket_dir() == shared_tmp / f"rankwatch-{os.getuid()}"
    monkeypatch.setenv("XDG_RUNTIME_DIR", "relative/run")
    assert paths.socket_dir() == shared_tmp / f"rankwatch-{os.getuid()}"


def test_an_explicit_socket_folder_that_is_not_private_is_refused_with_what_to_do(tmp_path, monkeypatch):
    loose = tmp_path / "sockets"
    loose.mkdir()
    loose.chmod(0o755)
    monkeypatch.setenv("RANKWATCH_SOCKET_DIR", str(loose))
    with pytest.raises(paths.SocketDirError, match=r"RANKWATCH_SOCKET_DIR: .* has mode 0755.*mkdir -m 700"):
        paths.socket_dir()
    assert mode(loose) == 0o755

    link = tmp_path / "link"
    link.symlink_to(tmp_path / "elsewhere")
    monkeypatch.setenv("RANKWATCH_SOCKET_DIR", str(link))
    with pytest.raises(paths.SocketDirError, match="is a symbolic link"):
        paths.socket_dir()

    fresh = tmp_path / "new" / "sockets"
    monkeypatch.setenv("RANKWATCH_SOCKET_DIR", str(fresh))
    assert paths.socket_dir() == fresh and mode(fresh) == 0o700
