"""Where Rankwatch keeps its files: profiles, the run store, per-run folders, sockets.

Everything hangs off platformdirs, except when ``RANKWATCH_HOME`` is set: then config,
data and state all live below that one folder. Tests and portable installs use it so
that nothing touches the user's real directories.

Sockets are the exception: a Unix socket path must stay under ~100 bytes, so they
live in a short private folder (``$XDG_RUNTIME_DIR/rankwatch`` or
``/tmp/rankwatch-<uid>``), created 0700 and checked as ssh-agent checks its own.

Every folder Rankwatch makes is 0700 and every file 0600, from the start
(``runner.privacy``).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import socket
import stat
import sys
import tempfile
import time
from pathlib import Path

import platformdirs

from runner import privacy

APP_NAME = "rankwatch"
REPO_ROOT = Path(__file__).resolve().parent.parent
WORKER_PATH = Path(__file__).resolve().parent / "worker_path"
"""The folder put on the workers' PYTHONPATH: it holds only the ``rankwatch`` package."""


def _home_override() -> Path | None:
    home = os.environ.get("RANKWATCH_HOME")
    return Path(home).expanduser() if home else None


def config_dir() -> Path:
    home = _home_override()
    return home / "config" if home else Path(platformdirs.user_config_dir(APP_NAME))


def profiles_dir() -> Path:
    return config_dir() / "profiles"


def data_dir() -> Path:
    home = _home_override()
    return home / "data" if home else Path(platformdirs.user_data_dir(APP_NAME))


def store_path() -> Path:
    """The SQLite run store. ``RANKWATCH_STORE`` overrides it (benchmarks use it)."""
    override = os.environ.get("RANKWATCH_STORE")
    return Path(override) if override else data_dir() / "runs.db"


def runs_dir() -> Path:
    """Per-run folders: torchrun's per-rank log files, stack dumps, the runner's own log."""
    return data_dir() / "runs"


def run_dir(run_id: int) -> Path:
    return runs_dir() / str(run_id)


def example_workdir() -> Path:
    """Where the bundled example runs (its checkpoint lands here)."""
    return data_dir() / "example"


def assets_dir() -> Path:
    return REPO_ROOT / "assets"


def private_dir(path: Path) -> Path:
    """Create ``path`` (and missing parents) 0700, or check that an existing one is ours;
    an existing one of ours that others can read (an older version's) is tightened.

    Raises:
        PermissionError: the folder exists and belongs to another user.
        OSError: it cannot be created (read-only file system, a file in the way...).
    """
    if data_dir() in Path(path).parents:
        private_data_dir()  # the folders above it are Rankwatch's too (an agent's workspace)
    privacy.make_private_dir(path)
    info = path.stat()
    if info.st_uid != os.getuid():
        raise PermissionError(f"{path} belongs to uid {info.st_uid}, not to you; remove it or choose another folder")
    privacy.tighten(path)
    return path


def private_data_dir() -> Path:
    """The data folder, created 0700; one an older version left readable is tightened, all
    of it, once (it holds the store and the run folders).

    Raises:
        DataDirError: it, ``RANKWATCH_HOME`` or the store in it belongs to another user.
        OSError: it cannot be created (read-only file system, no permission...).
    """
    folder = data_dir()
    if folder in _checked_data_dirs:
        return folder
    problem = data_dir_problem()
    if problem is not None:
        raise DataDirError(problem)
    privacy.make_private_dir(folder)
    problem = data_dir_problem()  # made by someone else meanwhile?
    if problem is not None:
        raise DataDirError(problem)
    privacy.tighten_old_data(folder)
    _checked_data_dirs.add(folder)
    return folder


class DataDirError(PermissionError):
    """The data folder (or ``RANKWATCH_HOME``, or the store in it) belongs to another user."""


def data_dir_problem() -> str | None:
    """Why the data folder may not be used (``privacy.foreign_owner_problem`` of
    ``RANKWATCH_HOME``, the data folder and the store's files), with what to do; None when
    they are missing or the user's own."""
    home = _home_override()
    folder = data_dir()
    candidates = [home] if home else []
    candidates.append(folder)
    store = folder / "runs.db"
    candidates += [store, Path(f"{store}-wal"), Path(f"{store}-shm"), Path(f"{store}-journal")]
    for path in candidates:
        problem = privacy.foreign_owner_problem(path)
        if problem is not None:
            where = "RANKWATCH_HOME" if path == home else "Rankwatch's data"
            return (f"{problem}: another user prepared {where} there and could read the runs' secrets; "
                    f"remove it, or set RANKWATCH_HOME to a folder of yours")
    return None


_checked_data_dirs: set[Path] = set()


def make_run_dir(run_id: int) -> Path:
    """The run's folder with its ``stacks`` and ``torchrun`` folders, all 0700.

    Raises:
        OSError: they cannot be created.
    """
    private_data_dir()
    folder = run_dir(run_id)
    for sub in ("stacks", "torchrun"):
        privacy.make_private_dir(folder / sub)
    return folder


class SocketDirError(PermissionError):
    """``RANKWATCH_SOCKET_DIR`` names a folder that is not private; the message says how to fix it."""


_fallback_socket_dir: Path | None = None


def socket_dir() -> Path:
    """The private folder for this user's runner sockets, made and checked as ssh-agent and
    tmux do theirs: created 0700 in one ``mkdir``, then ``lstat``-checked to be a real
    folder (not a symbolic link), ours, and closed to everyone else.

    ``RANKWATCH_SOCKET_DIR`` if set (refused with a message if it is not private), else
    ``$XDG_RUNTIME_DIR/rankwatch`` when that runtime folder is the user's own 0700 folder
    (as the XDG spec requires), else ``/tmp/rankwatch-<uid>``. When the usual folder cannot
    be trusted (someone planted a link or a folder of theirs there) this process uses a
    fresh ``mkdtemp`` folder instead and says so once on stderr: runs record their
    socket's path in the store, so clients find it wherever it is.

    Raises:
        SocketDirError: ``RANKWATCH_SOCKET_DIR`` is not a private folder of the user.
    """
    override = os.environ.get("RANKWATCH_SOCKET_DIR")
    if override:
        path = Path(override).expanduser()
        with contextlib.suppress(OSError):
            privacy.make_private_dir(path.parent)
        problem = privacy.claim_private_dir(path)
        if problem:
            raise SocketDirError(f"RANKWATCH_SOCKET_DIR: {problem}; point it at a folder of yours that only "
                                 f"you can use (mkdir -m 700 DIR), or unset it")
        return path
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isabs(runtime) and privacy.private_dir_problem(runtime) is None:
        usual = Path(runtime) / APP_NAME
    else:
        usual = Path(tempfile.gettempdir()) / f"{APP_NAME}-{os.getuid()}"
    problem = privacy.claim_private_dir(usual)
    if problem is None:
        return usual
    return _fallback_socket_folder(problem)


def _fallback_socket_folder(problem: str) -> Path:
    global _fallback_socket_dir
    if _fallback_socket_dir is None or privacy.private_dir_problem(_fallback_socket_dir) is not None:
        _fallback_socket_dir = Path(tempfile.mkdtemp(prefix=f"{APP_NAME}-{os.getuid()}-"))
        atexit.register(_remove_if_empty, _fallback_socket_dir)
        print(f"rankwatch: not using the usual socket folder: {problem}; using {_fallback_socket_dir} instead",
              file=sys.stderr)
    return _fallback_socket_dir


STALE_SOCKET_MIN_AGE_SECONDS = 60.0
"""A socket file younger than this is never taken for stale: a runner starting beside this one
may be between its ``bind`` and its ``listen``, when connecting is refused too."""


def remove_stale_sockets(folder: Path, min_age: float = STALE_SOCKET_MIN_AGE_SECONDS) -> list[Path]:
    """Remove the sockets in ``folder`` that nobody listens on any more: those a SIGKILLed runner
    (its hub's, its workers' output) or agent left behind. A socket is stale when connecting to
    it is refused; one that accepts, or answers anything else (busy, slow), belongs to a live
    process and stays. Returns what was removed. Never raises: a leftover costs a file, not a run.
    """
    removed: list[Path] = []
    now = time.time()
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return removed
    for entry in entries:
        try:
            info = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if (not entry.name.endswith(".sock") or not stat.S_ISSOCK(info.st_mode) or info.st_uid != os.getuid()
                or now - info.st_mtime < min_age):
            continue
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.setblocking(False)
            probe.connect(entry.path)
        except ConnectionRefusedError:
            with contextlib.suppress(OSError):
                os.unlink(entry.path)
                removed.append(Path(entry.path))
        except OSError:
            pass  # someone listens (busy), or the file went: not ours to remove
        finally:
            probe.close()
    return removed


def _remove_if_empty(folder: Path) -> None:
    with contextlib.suppress(OSError):
        folder.rmdir()
