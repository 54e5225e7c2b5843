"""What the window remembers between sessions: geometry, splitters, the monitor's panel share,
last profile, recent scripts.

Stored with ``QSettings`` in an INI file in Rankwatch's config folder (next to the
profiles), so ``RANKWATCH_HOME`` isolates it like everything else and tests never
touch the user's real settings.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QByteArray, QSettings

from gui.gateway.files import RankwatchFiles

MAX_RECENT_SCRIPTS = 10


def settings_path() -> Path:
    return RankwatchFiles.config_dir() / "gui.ini"


class AppSettings:
    """Typed access to the window's ``QSettings``; reads never raise (a bad value reads as unset)."""

    def __init__(self, path: Path | None = None) -> None:
        self._settings = QSettings(str(path or settings_path()), QSettings.Format.IniFormat)

    def _bytes(self, key: str) -> QByteArray | None:
        value = self._settings.value(key)
        return value if isinstance(value, QByteArray) and not value.isEmpty() else None

    def window_geometry(self) -> QByteArray | None:
        return self._bytes("window/geometry")

    def window_state(self) -> QByteArray | None:
        return self._bytes("window/state")

    def set_window(self, geometry: QByteArray, state: QByteArray) -> None:
        self._settings.setValue("window/geometry", geometry)
        self._settings.setValue("window/state", state)

    def splitter_state(self, name: str) -> QByteArray | None:
        return self._bytes(f"splitters/{name}")

    def set_splitter_state(self, name: str, state: QByteArray) -> None:
        self._settings.setValue(f"splitters/{name}", state)

    def monitor_panel_share(self) -> float | None:
        """The monitor's bottom-panel share of the height (clamped by the monitor when applied)."""
        value = self._settings.value("monitor/panel_share")
        try:
            return None if value is None else float(value)
        except (TypeError, ValueError):
            return None

    def set_monitor_panel_share(self, share: float) -> None:
        self._settings.setValue("monitor/panel_share", float(share))

    def last_profile(self) -> str | None:
        value = self._settings.value("profiles/last")
        return value if isinstance(value, str) and value else None

    def set_last_profile(self, name: str | None) -> None:
        if name:
            self._settings.setValue("profiles/last", name)
        else:
            self._settings.remove("profiles/last")

    def recent_scripts(self) -> list[str]:
        value = self._settings.value("scripts/recent", [])
        if isinstance(value, str):  # an INI list of one comes back as a plain string
            value = [value]
        if not isinstance(value, list):
            return []
        return [item for item in value if isinstance(item, str) and item][:MAX_RECENT_SCRIPTS]

    def add_recent_script(self, script: str) -> list[str]:
        """Put ``script`` first in the recent list (most recent first, no duplicates)."""
        recent = [script] + [item for item in self.recent_scripts() if item != script]
        recent = recent[:MAX_RECENT_SCRIPTS]
        self._settings.setValue("scripts/recent", recent)
        return recent

    def sync(self) -> None:
        self._settings.sync()
