"""Profiles: launch specs saved as TOML files.

Named profiles live in ``<config dir>/profiles/NAME.toml``; any other ``.toml`` file
can be used by path. Relative paths inside a profile are relative to the folder of
the file, like in ``pyproject.toml``, so a profile can sit next to the code it runs
and be shared with it.
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import tomli_w

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10
    import tomli as tomllib

from runner import paths
from runner.profile.parse import SpecError, SpecErrors, spec_from_dict, spec_to_dict
from runner.profile.spec import ALL, CPU, LaunchSpec
from runner.sampling.gpu_report import GpuReport

PROFILE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
EXAMPLE_PROFILE = "example"


class ProfileError(ValueError):
    """A profile that cannot be found, read or written; the message says what to do."""


@dataclass(frozen=True)
class Profile:
    name: str
    path: Path | None
    """The TOML file; ``None`` for a spec built from command-line flags."""
    spec: LaunchSpec

    @property
    def base_dir(self) -> Path:
        """Where relative paths in the spec start from."""
        return self.path.parent if self.path is not None else Path.cwd()


def looks_like_path(text: str) -> bool:
    return text.endswith(".toml") or os.sep in text or text.startswith(".")


def profile_path(name: str) -> Path:
    if not PROFILE_NAME.match(name):
        raise ProfileError(f"profile name {name!r} is not allowed: use letters, digits, '.', '_' and '-' (at most 64)")
    return paths.profiles_dir() / f"{name}.toml"


def read_spec_file(path: Path, schema: type[LaunchSpec] = LaunchSpec) -> LaunchSpec:
    """Parse one TOML file into a spec (of ``schema``, ``runner.profile.parse.spec_from_dict``).

    Raises:
        ProfileError: the file is missing or unreadable.
        SpecErrors: malformed TOML (field ``toml``) or invalid fields.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ProfileError(f"{path}: no such file") from None
    except UnicodeDecodeError as exc:
        raise ProfileError(f"{path}: not UTF-8 text (byte 0x{exc.object[exc.start]:02x} at offset {exc.start}); "
                           "a profile is a TOML file saved as UTF-8") from None
    except OSError as exc:
        raise ProfileError(f"{path}: cannot read ({exc.strerror or exc})") from None
    try:
        table = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SpecErrors([SpecError("toml", f"not valid TOML: {exc}")]) from None
    return spec_from_dict(table, schema)


def load_profile(name_or_path: str, schema: type[LaunchSpec] = LaunchSpec) -> Profile:
    """A saved profile by name, or any TOML file by path (read as a ``schema``).

    Raises:
        ProfileError: no such profile or file.
        SpecErrors: the file is not a valid spec.
    """
    if looks_like_path(name_or_path):
        try:
            path = Path(name_or_path).expanduser().resolve()
        except (RuntimeError, OSError):  # RuntimeError: a symbolic link loop (before Python 3.13)
            raise ProfileError(f"{name_or_path}: cannot read (a symbolic link that leads back to itself)") from None
        return Profile(name=path.stem, path=path, spec=read_spec_file(path, schema))
    if name_or_path == EXAMPLE_PROFILE and not profile_path(EXAMPLE_PROFILE).exists():
        return example_profile()
    path = profile_path(name_or_path)
    if not path.exists():
        known = ", ".join(list_profiles()) or "none yet"
        raise ProfileError(f"no profile named {name_or_path!r} (saved profiles: {known}); "
                           "see `rankwatch profiles list`, or give a path to a .toml file")
    return Profile(name=name_or_path, path=path, spec=read_spec_file(path, schema))


def list_profiles() -> list[str]:
    folder = paths.profiles_dir()
    if not folder.is_dir():
        return []
    return sorted(p.stem for p in folder.glob("*.toml") if PROFILE_NAME.match(p.stem))


def dumps_spec(spec: LaunchSpec) -> str:
    return tomli_w.dumps(spec_to_dict(spec))


def write_spec_file(path: Path, spec: LaunchSpec) -> Path:
    """Write atomically (temp file + rename) so a crash never leaves half a profile."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(dumps_spec(spec))
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
    return path


def save_profile(name: str, spec: LaunchSpec) -> Path:
    return write_spec_file(profile_path(name), spec)


def delete_profile(name: str) -> Path:
    path = profile_path(name)
    if not path.exists():
        raise ProfileError(f"no profile named {name!r}; see `rankwatch profiles list`")
    path.unlink()
    return path


def rename_profile(old: str, new: str) -> Path:
    source, target = profile_path(old), profile_path(new)
    if not source.exists():
        raise ProfileError(f"no profile named {old!r}")
    if target.exists():
        raise ProfileError(f"a profile named {new!r} already exists")
    source.rename(target)
    return target


def example_script() -> Path:
    return paths.assets_dir() / "examples" / "ddp_train.py"


def example_profile(gpus: GpuReport | None = None) -> Profile:
    """The bundled example: a small DDP ConvNet, fitted to a machine with ``gpus``
    (``fit_example``); without ``gpus``, as ``example.toml`` says (two ranks).

    It runs in a folder of Rankwatch's data directory (created here), so its
    checkpoint never lands in the user's current directory or the install.
    """
    path = paths.assets_dir() / "examples" / "example.toml"
    spec = read_spec_file(path)
    workdir = paths.example_workdir()
    workdir.mkdir(parents=True, exist_ok=True)
    spec = spec.with_changes(script=str(example_script()), workdir=str(workdir))
    if gpus is not None:
        spec = fit_example(spec, gpus)
    return Profile(name=EXAMPLE_PROFILE, path=path, spec=spec)


def is_bundled_example(profile: Profile) -> bool:
    """``profile`` is the bundled example (``--example``, or the name ``example`` while no
    profile of that name is saved), not a file a person wrote."""
    return profile.name == EXAMPLE_PROFILE and profile.path == paths.assets_dir() / "examples" / "example.toml"


def fit_example(spec: LaunchSpec, gpus: GpuReport) -> LaunchSpec:
    """The example's ranks on a machine with ``gpus``: one per picked GPU, at most the
    ``nproc_per_node`` it asks for (2).

    NCCL needs a GPU per rank, so two ranks on a one-GPU workstation (the most common
    machine) would be refused; there the example runs one rank with nccl. With more GPUs
    than ranks, ``"all"`` becomes the first of them, so the GPUs shown are the ones used.
    In CPU mode (``"cpu"``, or no GPU here) it is unchanged: two ranks with gloo.
    Anything but the bundled script, an ``"auto"`` count, several nodes or Slurm is
    returned as it is.
    """
    if (spec.script != str(example_script()) or not isinstance(spec.nproc_per_node, int)
            or spec.is_multi_node or spec.slurm is not None):
        return spec
    if spec.gpus == CPU or not gpus.available or not gpus.gpus:
        return spec
    picked = gpus.indices if spec.gpus == ALL else spec.gpus if isinstance(spec.gpus, tuple) else ()
    if not picked:
        return spec
    ranks = min(spec.nproc_per_node, len(picked))
    if spec.gpus == ALL and len(picked) > ranks:
        return spec.with_changes(nproc_per_node=ranks, gpus=picked[:ranks])
    return spec.with_changes(nproc_per_node=ranks)
