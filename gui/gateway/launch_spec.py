"""The launch spec's typed values, as the launch form and the profiles hold them.

``LaunchSpec`` (what the user asked for; ``SlurmSpec`` its Slurm section, ``GpuSelection`` its
``gpus``), the TOML table a profile file holds (``TomlTable`` of ``TomlValue`` s), the generic settings a spec
class declares (``PathSetting``, ``SettingValue``) and the errors its parsing raises
(``SpecError`` for one field, ``SpecErrors`` for several), all the runner's own types. What the
runner does with a spec is ``launch_rules.LaunchRules``; the profile files are
``profiles.ProfileLibrary``.
"""

from __future__ import annotations

from runner.profile.parse import SpecError, SpecErrors
from runner.profile.schema import PathSetting, SettingValue
from runner.profile.spec import GpuSelection, LaunchSpec, SlurmSpec
from runner.profile.toml_types import TomlTable, TomlValue

__all__ = [
    "GpuSelection",
    "LaunchSpec",
    "PathSetting",
    "SettingValue",
    "SlurmSpec",
    "SpecError",
    "SpecErrors",
    "TomlTable",
    "TomlValue",
]
