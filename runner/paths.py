"""Where Rankwatch keeps its files: profiles, the run store, per-run folders, sockets.

Everything hangs off platformdirs, except when ``RANKWATCH_HOME`` is set: then config,
data and state all live below that one folder. Tests and portable installs use it so
that nothing touches the user's real directories.

Sockets are the exception: a Unix socket path must stay under ~100 bytes, so they
live in a short private folder (``$XDG_RUNTIME_DIR/rankwatch`` or
``/tmp/rankwatch-<uid>``), created 0700 and checked to belong to us.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

import platformdirs

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
    """Create ``path`` with mode 0700 (or tighten it) and refuse one owned by someone else.

    Raises:
        PermissionError: the folder exists and belongs to another user.
    """
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    info = path.stat()
    if info.st_uid != os.getuid():
        raise PermissionError(f"{path} belongs to uid {info.st_uid}, not to you; remove it or set RANKWATCH_SOCKET_DIR")
    if stat.S_IMODE(info.st_mode) != 0o700:
        path.chmod(0o700)
    return path


def socket_dir() -> Path:
    """The private folder for this user's runner sockets (0700)."""
    override = os.environ.get("RANKWATCH_SOCKET_DIR")
    if override:
        return private_dir(Path(override))
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and Path(runtime).is_dir():
        return private_dir(Path(runtime) / APP_NAME)
    return private_dir(Path(tempfile.gettempdir()) / f"{APP_NAME}-{os.getuid()}")
