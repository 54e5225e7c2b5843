"""Notice profile files written outside the window (``rankwatch profile save``, an editor, a copy).

A ``QFileSystemWatcher`` on the profiles folder says *that* something changed there; which
profiles changed is found by comparing each ``*.toml`` file's modification time with the last
look. Profiles are written atomically (temp file + rename), which the folder's own watch sees;
the files are watched too, for writers that rewrite a file in place. Bursts (a temp file, then
its rename) are folded into one report after ``SETTLE_MS``.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QFileSystemWatcher, QObject, QTimer, Signal

SETTLE_MS = 150
"""Quiet time after the last file event before the folder is read again."""


class ProfilesFolderWatcher(QObject):
    """Signals:
        profiles_changed(list[str]): names of the profiles added, rewritten or removed since the last look.
    """

    profiles_changed = Signal(list)

    def __init__(self, folder: Path, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)  # watchable before the first profile is saved
        self._seen = self._scan()
        self._watcher = QFileSystemWatcher(self)
        self._settle = QTimer(self)
        self._settle.setSingleShot(True)
        self._settle.setInterval(SETTLE_MS)
        self._settle.timeout.connect(self._on_settled)
        self._watcher.directoryChanged.connect(lambda _path: self._settle.start())
        self._watcher.fileChanged.connect(lambda _path: self._settle.start())
        self._watch()

    def _scan(self) -> dict[str, int]:
        """Profile name -> modification time (ns) of its file, for every profile in the folder."""
        found = {}
        for path in self.folder.glob("*.toml"):
            try:
                found[path.stem] = path.stat().st_mtime_ns
            except OSError:
                continue  # removed between the listing and the look
        return found

    def _watch(self) -> None:
        wanted = [str(self.folder), *(str(self.folder / f"{name}.toml") for name in self._seen)]
        watched = set(self._watcher.files()) | set(self._watcher.directories())
        missing = [path for path in wanted if path not in watched]
        if missing:
            self._watcher.addPaths(missing)

    def _on_settled(self) -> None:
        now = self._scan()
        changed = sorted(name for name in set(now) | set(self._seen) if now.get(name) != self._seen.get(name))
        self._seen = now
        self._watch()  # a file replaced by a rename is a new file to the watcher
        if changed:
            self.profiles_changed.emit(changed)
