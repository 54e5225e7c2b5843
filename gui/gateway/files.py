"""Where Rankwatch keeps its files, and that what it writes is private (``runner.paths``,
``runner.privacy``).

The GUI keeps its settings, shows where profiles and the run store are, and finds its icon in
the same folders as the CLI (``RANKWATCH_HOME`` moves them all); ``RankwatchFiles`` names those
folders so no GUI module holds a path rule of its own. The profiles folder is
``profiles.ProfileLibrary.folder``.
"""

from __future__ import annotations

from pathlib import Path

from runner import paths
from runner.privacy import adopt_private_umask

__all__ = ["RankwatchFiles"]


class RankwatchFiles:
    """Rankwatch's folders and its private-file rule, as the CLI has them."""

    @staticmethod
    def config_dir() -> Path:
        """Where settings live (the GUI's ``gui.ini``, the profiles folder)."""
        return paths.config_dir()

    @staticmethod
    def data_dir() -> Path:
        """Where the run store and the runs' files live."""
        return paths.data_dir()

    @staticmethod
    def assets_dir() -> Path:
        """The files Rankwatch ships (its icon, the bundled example)."""
        return paths.assets_dir()

    @staticmethod
    def keep_private() -> None:
        """Make what this process writes private (umask 077), remembering the user's umask for
        the user's code; called first thing, as every Rankwatch entry point does."""
        adopt_private_umask()
