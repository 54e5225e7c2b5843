"""Private by default: Rankwatch's files are the user's alone, and are created that way.

The store holds every launch spec (environment variables such as ``HF_TOKEN``
included) and every log line, so nothing Rankwatch writes may be readable by
another local user, not even for the moment between a create and a chmod:

* Rankwatch's own processes run with umask 077 (``adopt_private_umask``, first
  thing in every entry point), so what they create is 0600 / 0700 from the start.
  The user's own umask is remembered in ``RANKWATCH_USER_UMASK`` (inherited by the
  runner a GUI starts) and given back to every process that runs the user's code:
  torchrun, hence the workers (``user_umask``), and interpreter probes. Checkpoints
  keep the permissions the user is used to.
* What must be private whatever the umask (a process that did not come through an
  entry point, a worker's stack dump) is made with explicit modes:
  ``make_private_dir`` and ``create_private_file``.
* Data folders of older versions (0755 folders, 0644 files) are tightened once
  (``tighten_old_data``): the first time a folder is found looser than 0700.
* A folder in a shared place (the socket folder in ``/tmp``) is checked the way
  ssh-agent and tmux check theirs (``private_dir_problem``): ``lstat``, never through
  a symbolic link, ours, and no access for anyone else.

Standard library only.
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

PRIVATE_DIR_MODE = 0o700
PRIVATE_FILE_MODE = 0o600
PRIVATE_UMASK = 0o077
USER_UMASK_VARIABLE = "RANKWATCH_USER_UMASK"
"""The umask the user started Rankwatch with (octal), for processes that run the user's code."""


def adopt_private_umask() -> None:
    """Make everything this process creates private (umask 077); remember the user's umask.

    Called first thing by every Rankwatch entry point. The first Rankwatch process
    (the CLI or the GUI) records the user's umask; the processes it starts (a detached
    runner, a node agent) inherit the record and keep it.
    """
    previous = os.umask(PRIVATE_UMASK)
    if _parse_umask(os.environ.get(USER_UMASK_VARIABLE)) is None:
        os.environ[USER_UMASK_VARIABLE] = format(previous, "03o")


def user_umask() -> int:
    """The umask to run the user's code with: the recorded one, else this process's own."""
    recorded = _parse_umask(os.environ.get(USER_UMASK_VARIABLE))
    return recorded if recorded is not None else current_umask()


def current_umask() -> int:
    """This process's umask, read without changing it (``os.umask`` can only read by
    setting, which would briefly expose files another thread creates)."""
    with contextlib.suppress(OSError, ValueError), open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    previous = os.umask(PRIVATE_UMASK)  # no /proc (not Linux): set the strict value while reading
    os.umask(previous)
    return previous


def _parse_umask(text: str | None) -> int | None:
    try:
        value = int(text or "", 8)
    except ValueError:
        return None
    return value if 0 <= value <= 0o777 else None


def make_private_dir(path: Path) -> Path:
    """Create ``path`` and any missing parents with mode 0700 (one ``mkdir`` each, the mode
    given at creation). Folders that exist already are left as they are.

    Raises:
        OSError: a folder could not be created (read-only file system, no permission,
            a file in the way).
    """
    path = Path(path)
    missing = []
    folder = path
    while not os.path.lexists(folder) and folder != folder.parent:
        missing.append(folder)
        folder = folder.parent
    for folder in reversed(missing):
        with contextlib.suppress(FileExistsError):  # made by someone else meanwhile: checked below
            os.mkdir(folder, PRIVATE_DIR_MODE)
    if not path.is_dir():
        raise NotADirectoryError(f"{path} is not a folder")
    return path


def create_private_file(path: Path | str, flags: int = os.O_WRONLY | os.O_APPEND) -> int:
    """Open ``path`` with ``flags``, creating it 0600 if it does not exist; returns the fd.

    Raises:
        OSError: it cannot be opened or created.
    """
    return os.open(path, flags | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), PRIVATE_FILE_MODE)


def is_loose(path: Path | str) -> bool:
    """Whether ``path`` (if it exists) grants anything to group or others."""
    try:
        return bool(os.stat(path).st_mode & 0o077)
    except OSError:
        return False


def tighten(path: Path | str) -> None:
    """Take group's and others' access away from ``path`` if it is ours; never through a link."""
    try:
        info = os.lstat(path)
    except OSError:
        return
    if stat.S_ISLNK(info.st_mode) or info.st_uid != os.getuid() or not info.st_mode & 0o077:
        return
    with contextlib.suppress(OSError):
        os.chmod(path, stat.S_IMODE(info.st_mode) & 0o700)


def tighten_old_data(folder: Path) -> bool:
    """Make a data folder of an older version private: the folder, then everything in it.

    Does nothing (and returns False) when the folder is private already, so the walk
    happens once. Returns True when it tightened.
    """
    if not is_loose(folder):
        return False
    for root, folders, files in os.walk(folder, topdown=False, followlinks=False):
        for name in files + folders:
            tighten(os.path.join(root, name))
    tighten(folder)
    return True


def private_dir_problem(path: Path | str) -> str | None:
    """Why ``path`` is not a private folder of ours, or ``None`` when it is one.

    Checked with ``lstat``: a symbolic link is refused, whatever it points to (someone
    else may have planted it in a shared folder such as ``/tmp``).
    """
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return f"{path} does not exist"
    except OSError as error:
        return f"{path} cannot be checked ({error.strerror or error})"
    if stat.S_ISLNK(info.st_mode):
        return f"{path} is a symbolic link"
    if not stat.S_ISDIR(info.st_mode):
        return f"{path} is not a folder"
    if info.st_uid != os.getuid():
        return f"{path} belongs to uid {info.st_uid}, not to you (uid {os.getuid()})"
    if info.st_mode & 0o077:
        return f"{path} has mode {stat.S_IMODE(info.st_mode):04o}: others may use it (it must be 0700)"
    return None


def foreign_owner_problem(path: Path | str) -> str | None:
    """Why ``path`` (if it exists) may not be used as Rankwatch's own: it, or what a symbolic
    link there leads to, belongs to another user (who could read what is written into it, or
    swap it). ``None`` when it is missing or ours.

    A folder or store someone else prepared (a planted ``data/`` 0777, an empty ``runs.db``
    0666) is refused, never written into: SQLite would create its ``-wal`` and ``-shm`` with
    that file's mode, readable by that user, and the store holds every launch's secrets.
    """
    try:
        link = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as error:
        return f"{path} cannot be checked ({error.strerror or error})"
    uid = os.getuid()
    if link.st_uid != uid:
        return f"{path} belongs to uid {link.st_uid}, not to you (uid {uid})"
    if stat.S_ISLNK(link.st_mode):
        try:
            target = os.stat(path)
        except OSError:
            return None  # a dangling link of ours: creating through it fails on its own
        if target.st_uid != uid:
            return f"{path} leads to {os.path.realpath(path)}, which belongs to uid {target.st_uid}, not to you"
    return None


def claim_private_dir(path: Path) -> str | None:
    """Create ``path`` 0700 if it is missing (atomically: ``mkdir`` fails if anything is
    there), then check it. Returns why it cannot be used, or ``None`` when it can."""
    try:
        os.mkdir(path, PRIVATE_DIR_MODE)
    except FileExistsError:
        pass  # whatever is there is checked now
    except FileNotFoundError:
        return f"{path.parent} does not exist"
    except OSError as error:
        return f"{path} cannot be created ({error.strerror or error})"
    return private_dir_problem(path)
