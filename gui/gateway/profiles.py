"""The profiles folder as the GUI uses it: one facade over ``runner.profile.files``.

Profiles are the TOML files ``rankwatch run PROFILE`` reads (``<config>/profiles/NAME.toml``);
the GUI lists, loads, saves, renames and deletes the same files with the runner's own code, so
a name the CLI refuses is refused here with the same message. ``ProfileLibrary`` is that code
under the names the profile list asks for; ``Profile`` (a loaded spec and its file) and
``ProfileError`` (what to do when a file cannot be found, read or written) are the runner's own.
"""

from __future__ import annotations

from pathlib import Path

from runner import paths
from runner.profile.files import (
    EXAMPLE_PROFILE,
    PROFILE_NAME,
    Profile,
    ProfileError,
    delete_profile,
    example_profile,
    list_profiles,
    load_profile,
    profile_path,
    read_spec_file,
    rename_profile,
    save_profile,
    write_spec_file,
)
from runner.profile.spec import LaunchSpec

__all__ = ["Profile", "ProfileError", "ProfileLibrary"]


class ProfileLibrary:
    """The saved profiles and the bundled example, by name (``rankwatch profiles``'s rules).

    Every method that takes a name raises ``ProfileError`` for a name the runner would
    not accept as a file name (the message says which characters are allowed).
    """

    EXAMPLE = EXAMPLE_PROFILE
    """The bundled example's name: listed until a profile saved under it takes its place."""

    @staticmethod
    def folder() -> Path:
        """Where saved profiles live (``RANKWATCH_HOME`` moves it); it may not exist yet."""
        return paths.profiles_dir()

    @staticmethod
    def names() -> list[str]:
        """The saved profiles' names, sorted (the bundled example only once saved)."""
        return list_profiles()

    @staticmethod
    def is_allowed_name(name: str) -> bool:
        """Whether ``name`` can name a profile file (without raising, for a quick test)."""
        return bool(PROFILE_NAME.match(name))

    @staticmethod
    def path_of(name: str) -> Path:
        """The file profile ``name`` is (or would be) saved in.

        Raises:
            ProfileError: ``name`` is not allowed; the message says why.
        """
        return profile_path(name)

    @staticmethod
    def load(name: str) -> Profile:
        """Saved profile ``name`` (the bundled example when none is saved under its name).

        Raises:
            ProfileError: no such profile; SpecErrors: its file is not a valid spec.
        """
        return load_profile(name)

    @staticmethod
    def example() -> Profile:
        """The bundled example as shipped (its script and working folder made absolute)."""
        return example_profile()

    @staticmethod
    def save(name: str, spec: LaunchSpec) -> Path:
        """Write ``spec`` as profile ``name`` (atomically: a crash leaves no half file).

        Raises:
            ProfileError: a bad name; OSError: the file cannot be written.
        """
        return save_profile(name, spec)

    @staticmethod
    def rename(old: str, new: str) -> Path:
        """Raises: ProfileError (no profile ``old``, or ``new`` is taken or not allowed)."""
        return rename_profile(old, new)

    @staticmethod
    def delete(name: str) -> Path:
        """Raises: ProfileError (no profile ``name``)."""
        return delete_profile(name)

    @staticmethod
    def read_file(path: Path) -> LaunchSpec:
        """Any ``.toml`` spec file (to import it).

        Raises:
            ProfileError: missing or unreadable; SpecErrors: not a valid spec.
        """
        return read_spec_file(path)

    @staticmethod
    def write_file(path: Path, spec: LaunchSpec) -> Path:
        """Write ``spec`` to any file (to export it), atomically.

        Raises:
            OSError: the file cannot be written.
        """
        return write_spec_file(path, spec)
