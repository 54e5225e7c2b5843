"""The profile list as plain Python: saved profiles, the bundled example, and what you can do to them.

Profiles are the same TOML files ``rankwatch run PROFILE`` reads
(``<config>/profiles/NAME.toml``, see ``runner.profile.files``). The bundled
example is listed until a profile named ``example`` is saved over it.

A profile's relative paths start from its file's folder. Moving a spec to another
folder (import, save of a form that was not a saved profile) would silently change
what those paths mean, so ``rebase_spec`` makes them absolute first.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

from gui.gateway.launch_spec import LaunchSpec
from gui.gateway.profiles import Profile, ProfileError, ProfileLibrary
from gui.models import Event


def rebase_spec(spec: LaunchSpec, old_base: Path, new_base: Path) -> LaunchSpec:
    """``spec`` with the same meaning when read from ``new_base`` instead of ``old_base``.

    The working directory becomes absolute (an empty one meant ``old_base`` itself);
    the script stays as it is, because a relative script starts from the workdir.
    """
    if Path(old_base).resolve() == Path(new_base).resolve():
        return spec
    workdir = Path(os.path.expanduser(spec.workdir)) if spec.workdir else Path(old_base)
    if not workdir.is_absolute():
        workdir = Path(old_base) / workdir
    nodes = tuple(
        replace(node, workdir=str(Path(old_base) / node.workdir))
        if node.workdir and not Path(os.path.expanduser(node.workdir)).is_absolute() and index == 0
        else node
        for index, node in enumerate(spec.nodes)
    )
    return spec.with_changes(workdir=os.path.normpath(str(workdir)), nodes=nodes)


class ProfileListModel:
    """Names to pick from, the current one, and the file operations on profiles.

    Every operation raises ``ProfileError`` with a message a person can act on
    (a bad name, a name already taken, a missing file); ``SpecErrors`` when a file
    being loaded or imported is not a valid spec.

    Events:
        names_changed(list[str]): a profile was added, removed or renamed.
        current_changed(str | None): another profile is now the current one.
    """

    def __init__(self) -> None:
        self.names_changed = Event()
        self.current_changed = Event()
        self._current: str | None = None
        self._names = self._scan()

    @property
    def names(self) -> list[str]:
        return list(self._names)

    @property
    def current(self) -> str | None:
        return self._current

    @staticmethod
    def is_saved(name: str) -> bool:
        """A file in the profiles folder (not the bundled example)."""
        return ProfileLibrary.is_allowed_name(name) and ProfileLibrary.path_of(name).exists()

    def is_bundled(self, name: str) -> bool:
        return name == ProfileLibrary.EXAMPLE and not self.is_saved(name)

    @staticmethod
    def name_problem(name: str) -> str | None:
        """Why ``name`` cannot name a profile (the message ``ProfileError`` would carry), or ``None``."""
        try:
            ProfileLibrary.path_of(name)
        except ProfileError as error:
            return str(error)
        return None

    def spec_for_save_as(self, spec: LaunchSpec, source: str | None) -> LaunchSpec:
        """What "Save as" writes: the form's spec, without the bundled example's description
        (a new profile is not "Bundled example: ..."; a copy of one's own profile keeps its own)."""
        if source is not None and self.is_bundled(source):
            return spec.with_changes(description=None)
        return spec

    def forget_current(self) -> None:
        """No profile is current (a new, unnamed form)."""
        self._set_current(None)

    def refresh(self) -> None:
        """Re-read the profiles folder (files may be added by ``rankwatch`` on the command line)."""
        names = self._scan()
        if names != self._names:
            self._names = names
            self.names_changed.emit(self.names)

    def load(self, name: str) -> Profile:
        """Make ``name`` the current profile and return it.

        Raises:
            ProfileError, SpecErrors: see the class docstring.
        """
        profile = ProfileLibrary.example() if self.is_bundled(name) else ProfileLibrary.load(name)
        self._set_current(name)
        return profile

    def base_dir(self, name: str | None) -> Path:
        """Where relative paths of profile ``name`` start from (cwd for no profile)."""
        if name is None:
            return Path.cwd()
        if self.is_bundled(name):
            return ProfileLibrary.example().base_dir
        return ProfileLibrary.folder()

    def save(self, spec: LaunchSpec, from_base: Path) -> Path:
        """Save ``spec`` over the current profile.

        Raises:
            ProfileError: no current profile (use ``save_as``).
        """
        if self._current is None:
            raise ProfileError("no profile is selected; use Save as to name it")
        return self.save_as(self._current, spec, from_base, overwrite=True)

    def save_as(self, name: str, spec: LaunchSpec, from_base: Path, *, overwrite: bool = False) -> Path:
        """Save ``spec`` (whose relative paths start from ``from_base``) as ``name`` and make it current.

        Raises:
            ProfileError: a bad name, or ``name`` exists and ``overwrite`` is false.
        """
        path = ProfileLibrary.path_of(name)
        if path.exists() and not overwrite:
            raise ProfileError(f"a profile named {name!r} already exists")
        saved = ProfileLibrary.save(name, rebase_spec(spec, from_base, path.parent))
        self._after_change(current=name)
        return saved

    def rename(self, old: str, new: str) -> Path:
        """Raises: ProfileError (the bundled example has no file to rename; save it first)."""
        if self.is_bundled(old):
            raise ProfileError("the bundled example cannot be renamed; use Duplicate or Save as to copy it")
        target = ProfileLibrary.rename(old, new)
        self._after_change(current=new if self._current == old else self._current)
        return target

    def duplicate(self, name: str, new: str) -> Path:
        """Copy profile ``name`` to ``new`` (which becomes current).

        Raises: ProfileError, SpecErrors.
        """
        source = ProfileLibrary.example() if self.is_bundled(name) else ProfileLibrary.load(name)
        return self.save_as(new, source.spec, source.base_dir)

    def delete(self, name: str) -> Path:
        """Raises: ProfileError (the bundled example cannot be deleted)."""
        if self.is_bundled(name):
            raise ProfileError("the bundled example cannot be deleted")
        removed = ProfileLibrary.delete(name)
        self._after_change(current=None if self._current == name else self._current)
        return removed

    def import_file(self, path: Path, name: str | None = None) -> str:
        """Copy a ``.toml`` spec into the profiles folder; returns its name (now current).

        The name defaults to the file's stem, made unique.

        Raises:
            ProfileError: unreadable file or bad name.
            SpecErrors: not a valid spec.
        """
        path = Path(path).expanduser().resolve()
        spec = ProfileLibrary.read_file(path)
        name = name or self.unique_name(path.stem)
        self.save_as(name, spec, path.parent)
        return name

    @staticmethod
    def export(spec: LaunchSpec, from_base: Path, path: Path) -> Path:
        """Write ``spec`` to any ``.toml`` file, paths adjusted to that file's folder.

        Raises:
            OSError: the file cannot be written.
        """
        path = Path(path).expanduser()
        if path.suffix != ".toml":
            path = path.with_name(path.name + ".toml")
        return ProfileLibrary.write_file(path, rebase_spec(spec, from_base, path.resolve().parent))

    def unique_name(self, wanted: str) -> str:
        """``wanted`` made into an allowed profile name that is not taken (``name-2``, ...)."""
        base = "".join(ch if ch.isalnum() or ch in "._-" else "-" for ch in wanted).strip("-.") or "profile"
        if not base[0].isalnum():
            base = "p" + base
        base = base[:56]
        candidate, counter = base, 2
        while candidate in self._names or ProfileLibrary.path_of(candidate).exists():
            candidate = f"{base}-{counter}"
            counter += 1
        return candidate

    def _scan(self) -> list[str]:
        names = ProfileLibrary.names()
        if ProfileLibrary.EXAMPLE not in names:
            names.append(ProfileLibrary.EXAMPLE)
        return sorted(names)

    def _set_current(self, name: str | None) -> None:
        if name != self._current:
            self._current = name
            self.current_changed.emit(name)

    def _after_change(self, current: str | None) -> None:
        self._names = self._scan()
        self.names_changed.emit(self.names)
        self._set_current(current)
