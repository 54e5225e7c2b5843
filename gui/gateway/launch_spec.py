"""The launch spec and how the runner would run it: what the launch form and the profiles use.

The GUI edits a ``LaunchSpec`` and shows what ``rankwatch run`` would do with it: the
same schema, parsing, checks, profile files, resolution, torchrun commands, rendezvous
plan and Slurm script as the runner (one truth: the form's preview is the runner's
command). Only this gateway package reaches into ``runner``; the GUI's models and
widgets take these names from here (an import-linter contract in ``pyproject.toml``).
"""

from __future__ import annotations

from runner.interpreters import discover_interpreters
from runner.launch.command import RendezvousPlan, build_commands
from runner.launch.ports import free_port
from runner.profile.check import check_launch, torch_missing
from runner.profile.files import fit_example
from runner.profile.oversubscription import cores_oversubscribed
from runner.profile.parse import SpecError, SpecErrors, spec_from_dict, spec_to_dict
from runner.profile.resolve import (
    MachineFacts,
    ResolvedLaunch,
    ResolvedNode,
    default_interpreter,
    resolve,
)
from runner.profile.schema import (
    CHECK,
    COMBO,
    INTEGER,
    LINE,
    NUMBER,
    PathSetting,
    SettingValue,
    all_settings,
    value_at,
)
from runner.profile.spec import (
    ALL,
    AUTO,
    BACKENDS,
    CPU,
    RENDEZVOUS_MODES,
    SCHEMA_VERSION,
    SELF_SPAWN,
    TORCHRUN,
    GpuSelection,
    LaunchSpec,
    NodeSpec,
    SlurmSpec,
    TelemetrySpec,
)
from runner.profile.toml_types import TomlTable, TomlValue, without_none
from runner.remote.rendezvous import plan_rendezvous
from runner.slurm.script import render_by_hand

__all__ = [
    "ALL",
    "AUTO",
    "BACKENDS",
    "CHECK",
    "COMBO",
    "CPU",
    "INTEGER",
    "LINE",
    "NUMBER",
    "RENDEZVOUS_MODES",
    "SCHEMA_VERSION",
    "SELF_SPAWN",
    "TORCHRUN",
    "GpuSelection",
    "LaunchSpec",
    "MachineFacts",
    "NodeSpec",
    "PathSetting",
    "RendezvousPlan",
    "ResolvedLaunch",
    "ResolvedNode",
    "SettingValue",
    "SlurmSpec",
    "SpecError",
    "SpecErrors",
    "TelemetrySpec",
    "TomlTable",
    "TomlValue",
    "all_settings",
    "build_commands",
    "check_launch",
    "cores_oversubscribed",
    "default_interpreter",
    "discover_interpreters",
    "fit_example",
    "free_port",
    "plan_rendezvous",
    "render_by_hand",
    "resolve",
    "spec_from_dict",
    "spec_to_dict",
    "torch_missing",
    "value_at",
    "without_none",
]
