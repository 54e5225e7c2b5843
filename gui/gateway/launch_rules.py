"""How ``rankwatch run`` reads, checks and would run a launch spec: the launch form's one facade.

The launch form edits a profile table and shows, after every edit, what the runner would do
with it. ``LaunchRules`` is that, asked the way the form asks it, with the runner's own code
behind each answer (one truth: the form's preview *is* the runner's command, its errors the
CLI's messages). It returns the runner's typed values: the ``ResolvedLaunch`` the checks and
commands are made from, the ``RendezvousPlan`` (ports and ids picked), and this module's
``LaunchCheck`` (the machine checks) and ``CommandPreview`` (one node's command text).
``SettingWidget`` says which widget edits one of the spec's generic settings.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from runner.interpreters import Interpreter, discover_interpreters
from runner.launch.command import RendezvousPlan, build_commands
from runner.launch.ports import free_port
from runner.profile.check import check_launch, torch_missing
from runner.profile.files import fit_example
from runner.profile.oversubscription import cores_oversubscribed
from runner.profile.parse import SpecError, spec_from_dict
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
    LaunchSpec,
)
from runner.profile.toml_types import TomlTable, TomlValue, without_none
from runner.remote.rendezvous import plan_rendezvous
from runner.sampling.gpu_report import GpuReport
from runner.slurm.script import render_by_hand

__all__ = ["CommandPreview", "LaunchCheck", "LaunchRules", "RendezvousPlan", "ResolvedLaunch", "SettingWidget"]


class SettingWidget(str, Enum):
    """The widget that edits one of the spec's generic settings (``runner.profile.schema``)."""

    CHECK = CHECK
    """A check box: the value is a bool."""
    COMBO = COMBO
    """A choice among the setting's ``choices``."""
    LINE = LINE
    """A line of text, kept as typed."""
    NUMBER_LINE = "number line"
    """A line of text that the profile holds as a number (an integer or not) when it reads as one."""

    @classmethod
    def of(cls, item: PathSetting) -> SettingWidget:
        widget = SettingWidget(item.setting.form_widget)
        if widget is SettingWidget.LINE and item.setting.kind in (INTEGER, NUMBER):
            return SettingWidget.NUMBER_LINE
        return widget


@dataclass(frozen=True)
class LaunchCheck:
    """What the runner makes of a spec on this machine, before the rendezvous is planned."""

    launch: ResolvedLaunch
    """The spec resolved here: interpreter, working folder, nodes, ranks, backend."""
    errors: tuple[SpecError, ...]
    """Every reason it cannot start here (``check_launch``), as the CLI words them."""
    cpu_count: int
    """This machine's usable CPUs."""


@dataclass(frozen=True)
class CommandPreview:
    """The torchrun command for one node, exactly as ``NodeCommand.shell_text()`` prints it."""

    node_rank: int
    host: str
    text: str
    ssh: str | None = None
    """How the runner reaches the node when the row sets a user or port (``me@node2 -p 2222``)."""

    @property
    def label(self) -> str:
        return f"node {self.node_rank} · {self.host}" + (f" (ssh {self.ssh})" if self.ssh else "")


class LaunchRules:
    """The runner's rules for a launch spec, as the launch form and its widgets ask them.

    The constants are the spec's own words for its choices, so a form value is what a profile
    file holds.
    """

    SCHEMA_VERSION = SCHEMA_VERSION
    """The ``version`` a profile table written now carries."""
    AUTO = AUTO
    """A value the runner picks at launch (ranks, backend, threads, launch mode)."""
    ALL_GPUS = ALL
    """``gpus = "all"``: every GPU of the machine."""
    CPU_ONLY = CPU
    """``gpus = "cpu"``: no GPU."""
    BACKENDS = BACKENDS
    RENDEZVOUS_MODES = RENDEZVOUS_MODES
    TORCHRUN = TORCHRUN
    """Launch mode: torchrun starts one process per rank."""
    SELF_SPAWN = SELF_SPAWN
    """Launch mode: the script is started once and starts its own ranks."""

    @staticmethod
    def table(entries: Mapping[str, TomlValue | None]) -> TomlTable:
        """A profile table of ``entries`` less those that are ``None``: TOML has no null, so a
        value that is not set is a key left out (and reads back as the field's default)."""
        return without_none(entries)

    @staticmethod
    def parse(table: TomlTable, schema: type[LaunchSpec]) -> LaunchSpec:
        """The spec a profile file holding ``table`` is (``spec_from_dict``).

        Raises:
            SpecError, SpecErrors: a field does not parse; the message names it as the CLI does.
        """
        return spec_from_dict(table, schema)

    @staticmethod
    def settings(schema: type[LaunchSpec]) -> list[PathSetting]:
        """Every setting of ``schema``, nested tables included, by dotted path."""
        return list(all_settings(schema))

    @staticmethod
    def value_at(spec: LaunchSpec, path: str) -> SettingValue:
        """The value of the setting at the dotted ``path`` in ``spec``."""
        value: SettingValue = value_at(spec, path)
        return value

    @staticmethod
    def fit_example(spec: LaunchSpec, gpus: GpuReport) -> LaunchSpec:
        """The bundled example's ranks fitted to ``gpus``, as `rankwatch run --example` fits them."""
        return fit_example(spec, gpus)

    @staticmethod
    def default_interpreter() -> str:
        """The interpreter a spec without one runs in (Rankwatch's own)."""
        return default_interpreter()

    @staticmethod
    def interpreters_near(near: Iterable[str | Path]) -> list[Interpreter]:
        """Rankwatch's own Python first, then virtual environments near ``near`` and conda
        environments, each with a ``label`` and a ``path``."""
        return discover_interpreters(near)

    @staticmethod
    def free_port() -> int:
        """A TCP port free right now on this machine."""
        return free_port()

    @staticmethod
    def torch_missing(python: str) -> SpecError:
        """The error for an interpreter without torch, worded as ``check_launch`` words it (the
        form has the probe's answer, so it does not run the interpreter again)."""
        return torch_missing(python)

    @staticmethod
    def check(spec: LaunchSpec, gpus: GpuReport, base_dir: Path) -> LaunchCheck:
        """``spec`` resolved from ``base_dir`` on this machine (GPUs as ``gpus`` reports them) and
        checked as `rankwatch run` checks it, without running the interpreter (that would block
        the GUI; the probe answers instead)."""
        machine = MachineFacts.detect(gpus=gpus)
        launch = resolve(spec, machine, base_dir)
        return LaunchCheck(launch=launch, errors=tuple(check_launch(launch, machine, probe_interpreter=False)),
                           cpu_count=machine.cpu_count)

    @staticmethod
    def oversubscribed(launch: ResolvedLaunch, cpu_count: int) -> str | None:
        """In CPU mode, more processes on the head node than ``cpu_count`` cores: what
        `rankwatch run` says then (allowed, but probably not meant); ``None`` when they fit."""
        return cores_oversubscribed(launch, cpu_count)

    @staticmethod
    def plan_rendezvous(launch: ResolvedLaunch) -> RendezvousPlan:
        """The runner's rendezvous plan: ports chosen or checked free, job ids picked. May wait
        on DNS or ``ssh -G``.

        Raises:
            SpecErrors: the rendezvous cannot be planned (a port is taken...); the messages say why.
        """
        return plan_rendezvous(launch)

    @staticmethod
    def spec_plan(spec: LaunchSpec) -> RendezvousPlan:
        """The rendezvous plan with only what the spec says (before or without the runner's plan)."""
        rendezvous = spec.rendezvous
        return RendezvousPlan(mode=rendezvous.mode, endpoint=rendezvous.endpoint, job_id=rendezvous.job_id,
                              master_addr=rendezvous.master_addr, master_port=rendezvous.master_port)

    @staticmethod
    def commands(launch: ResolvedLaunch, plan: RendezvousPlan) -> tuple[CommandPreview, ...]:
        """What the runner would run: each node's torchrun command (with the rank lines as
        comments), or for a Slurm spec the sbatch script to submit the same job by hand."""
        if launch.spec.slurm is not None:
            return (CommandPreview(node_rank=0, host="sbatch script", text=render_by_hand(launch)),)
        return tuple(
            CommandPreview(node_rank=command.node.node_rank, host=command.node.host,
                           text="\n".join([command.shell_text(), *(f"# {line}" for line in command.rank_lines)]),
                           ssh=_ssh_target(command.node))
            for command in build_commands(launch, plan)
        )


def _ssh_target(node: ResolvedNode) -> str | None:
    """``me@node2 -p 2222`` for a node reached over SSH with its own user or port, else ``None``."""
    if node.is_local or not (node.user or node.ssh_port):
        return None
    target = f"{node.user}@{node.host}" if node.user else node.host
    return target + (f" -p {node.ssh_port}" if node.ssh_port else "")
