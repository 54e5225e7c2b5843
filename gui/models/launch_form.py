"""The launch form as plain Python: fields in, spec, errors and torchrun commands out.

``LaunchFormModel`` holds what the form shows (``FormState``: text as typed, choices
as picked) and, after every edit, evaluates it the way ``rankwatch run`` would:

1. the form becomes the same TOML-shaped table a profile file holds, and
   ``LaunchRules.parse`` (the runner's ``spec_from_dict``) turns it into a ``LaunchSpec`` --
   so every field error is the CLI's own message, naming the same field;
2. ``LaunchRules.check`` (the runner's resolution and ``check_launch``) checks it against
   this machine (GPUs as the runner's probe reported them);
3. ``LaunchRules.commands`` (the runner's ``build_commands``) builds each node's torchrun
   command: the preview is the function the runner uses, not a copy of it.

It also tracks whether the form differs from the loaded profile (dirty). No Qt;
widgets subscribe to ``state_replaced`` (repopulate every field) and
``evaluated`` (refresh errors, preview, dirty marker).
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Hashable
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from gui.gateway.launch_rules import (
    CommandPreview,
    LaunchRules,
    RendezvousPlan,
    ResolvedLaunch,
    SettingWidget,
)
from gui.gateway.launch_spec import (
    GpuSelection,
    LaunchSpec,
    PathSetting,
    SettingValue,
    SpecError,
    SpecErrors,
    TomlTable,
    TomlValue,
)
from gui.gateway.probe_output import InterpreterInfo
from gui.gateway.profiles import ProfileLibrary
from gui.gateway.runner_rules import GpuReport
from gui.models import Event
from gui.models.slurm_form import SlurmForm

AUTO = LaunchRules.AUTO
ENTRY_SCRIPT = "script"
ENTRY_MODULE = "module"
CHECKING_GPUS = "Checking GPUs…"
PLANNING_RENDEZVOUS = "Checking the rendezvous…"
EDITED_SUFFIX = " (edited)"


@dataclass(frozen=True)
class NodeRow:
    """One row of the nodes table, as typed: ``processes`` is ``auto`` or a number, ``port`` the
    SSH port; empty ``user``, ``port``, ``python`` and ``workdir`` mean the default (the ssh
    config's user and port, the spec's interpreter and working directory)."""

    host: str = "localhost"
    processes: str = AUTO
    user: str | None = None
    port: int | str | None = None
    python: str | None = None
    workdir: str | None = None

    @classmethod
    def rows_of(cls, spec: LaunchSpec) -> tuple[NodeRow, ...]:
        """The nodes table's rows for ``spec``'s nodes, as loaded."""
        return tuple(cls(host=node.host, processes=str(node.processes), user=node.user, port=node.port,
                         python=node.python, workdir=node.workdir) for node in spec.nodes)

    def to_table(self) -> TomlTable:
        """The ``[[nodes]]`` table. Text that is not a number stays text, so the spec parser
        reports it with the CLI's own message (``nodes[1].port: expected an integer ...``)."""
        return LaunchRules.table({
            "host": self.host.strip(), "processes": _number_or_text(self.processes) if self.processes.strip() else AUTO,
            "user": _text_or_none(self.user),
            "port": _number_or_text(self.port) if isinstance(self.port, str) else self.port,
            "python": _text_or_none(self.python), "workdir": _text_or_none(self.workdir)})


def _number_or_text(typed: str) -> int | str | None:
    """A whole number typed in a cell as an ``int``, other text as typed (stripped), so the parser
    names what is wrong with it; ``None`` for an empty cell."""
    text = typed.strip()
    if not text:
        return None
    return int(text) if text.isdigit() else text


def _text_or_none(value: str | None) -> str | None:
    if value is None:
        return None
    return value.strip() or None


@dataclass(frozen=True)
class FormState:
    """Every value the launch form shows, as the widgets hold it."""

    entry_kind: str = ENTRY_SCRIPT
    """``script`` (a file) or ``module`` (``python -m`` style)."""
    entry: str = ""
    args_text: str = ""
    """Script arguments as one shell-quoted line; split with ``shlex``."""
    workdir: str = ""
    """Empty: the profile's folder (or where Rankwatch started, for an unsaved form)."""
    interpreter: str = ""
    """Empty: Rankwatch's own Python."""
    gpus: GpuSelection = "all"
    nproc_per_node: int | str = AUTO
    nodes: tuple[NodeRow, ...] = (NodeRow(),)
    backend: str = AUTO
    rendezvous_mode: str = "standalone"
    endpoint: str = ""
    job_id: str = ""
    master_addr: str = ""
    master_port: int | None = None
    node_rank: int = 0
    max_restarts: int = 0
    omp_num_threads: int | str = AUTO
    env: tuple[tuple[str, str], ...] = ()
    legacy_local_rank: bool = False
    launch_mode: str = AUTO
    """``auto``, ``torchrun`` or ``self-spawn`` (``runner.profile.launch_mode``)."""
    slurm: SlurmForm = SlurmForm()  # noqa: RUF009 (frozen: one shared default is safe)
    """The Slurm section (``gui.widgets.slurm_section``); off by default."""
    settings: tuple[tuple[str, SettingValue], ...] = ()
    """The spec's settings (``runner.profile.schema``) this class has no field of its own for,
    by dotted path (``telemetry.stall_timeout``): as the generic form's widget holds it (a check
    box's bool, a choice, a line's text) for a setting with a label, else as loaded. A missing
    one is its default."""
    schema: type[LaunchSpec] = LaunchSpec
    """The spec class the form edits (its settings decide the generic rows)."""
    # Not on the form: carried from the loaded profile.
    description: str | None = None

    @classmethod
    def from_spec(cls, spec: LaunchSpec) -> FormState:
        rdzv = spec.rendezvous
        return cls(
            entry_kind=ENTRY_MODULE if spec.module else ENTRY_SCRIPT,
            entry=spec.module or spec.script or "",
            args_text=shlex.join(spec.args),
            workdir=spec.workdir or "",
            interpreter=spec.interpreter or "",
            gpus=spec.gpus,
            nproc_per_node=spec.nproc_per_node,
            nodes=NodeRow.rows_of(spec),
            backend=spec.backend,
            rendezvous_mode=rdzv.mode,
            endpoint=rdzv.endpoint or "",
            job_id=rdzv.job_id or "",
            master_addr=rdzv.master_addr or "",
            master_port=rdzv.master_port,
            node_rank=rdzv.node_rank,
            max_restarts=spec.max_restarts,
            omp_num_threads=spec.omp_num_threads,
            env=spec.env,
            legacy_local_rank=spec.legacy_local_rank,
            launch_mode=spec.launch_mode,
            slurm=SlurmForm.from_spec(spec.slurm),
            settings=tuple((item.path, form_value(item, LaunchRules.value_at(spec, item.path)))
                           for item in generic_settings(type(spec))),
            schema=type(spec),
            description=spec.description,
        )

    def setting(self, path: str) -> SettingValue:
        """The form value of the setting at ``path`` (see ``settings``); ``None``: its default."""
        return dict(self.settings).get(path)

    def with_setting(self, path: str, value: SettingValue) -> FormState:
        return replace(self, settings=(*((key, old) for key, old in self.settings if key != path), (path, value)))

    def split_args(self) -> list[str]:
        """Raises: SpecError (field ``args``) when the quoting is unbalanced."""
        try:
            return shlex.split(self.args_text)
        except ValueError as exc:
            raise SpecError("args", f"cannot split into arguments ({exc}); check the quotes") from None

    def to_table(self) -> TomlTable:
        """The profile table this form stands for (the shape ``spec_from_dict`` reads).

        Rendezvous fields that the picked mode does not use are left out, so a value
        typed for another mode does not linger in the saved profile.

        Raises:
            SpecError: the arguments cannot be split.
        """
        table: TomlTable = {"version": LaunchRules.SCHEMA_VERSION}
        if self.description:
            table["description"] = self.description
        table[ENTRY_MODULE if self.entry_kind == ENTRY_MODULE else ENTRY_SCRIPT] = self.entry.strip()
        table["args"] = list(self.split_args())
        if self.interpreter.strip():
            table["interpreter"] = self.interpreter.strip()
        if self.workdir.strip():
            table["workdir"] = self.workdir.strip()
        table["nproc_per_node"] = self.nproc_per_node
        table["gpus"] = list(self.gpus) if isinstance(self.gpus, tuple) else self.gpus
        table["backend"] = self.backend
        table["max_restarts"] = self.max_restarts
        table["omp_num_threads"] = self.omp_num_threads
        table["legacy_local_rank"] = self.legacy_local_rank
        if self.launch_mode != AUTO:
            table["launch_mode"] = self.launch_mode
        env = [(name.strip(), value) for name, value in self.env if name.strip() or value]
        if env:
            table["env"] = dict(env)
        rendezvous: dict[str, TomlValue | None] = {"mode": self.rendezvous_mode}
        if self.rendezvous_mode == "c10d":
            rendezvous.update(endpoint=self.endpoint.strip() or None, job_id=self.job_id.strip() or None)
        elif self.rendezvous_mode == "static":
            rendezvous.update(master_addr=self.master_addr.strip() or None, master_port=self.master_port,
                              node_rank=self.node_rank or None)
        table["rendezvous"] = LaunchRules.table(rendezvous)
        values = dict(self.settings)
        for item in generic_settings(self.schema):
            value = table_value(item, values[item.path]) if item.path in values else None
            if value is not None:
                _table_at(table, item.table)[item.name] = value
        table["nodes"] = [node.to_table() for node in self.nodes]
        slurm = self.slurm.to_table()
        if slurm is not None:  # Slurm allocates the nodes and places the rendezvous
            table["slurm"] = slurm
            del table["nodes"], table["rendezvous"]
        return table


def _table_at(table: TomlTable, path: str) -> TomlTable:
    """The table at the dotted ``path`` in ``table`` (``telemetry``), made when missing; ``table``
    itself for an empty path.

    Raises:
        ValueError: a key on the path holds a value, not a table (no spec declares such a path).
    """
    for part in filter(None, path.split(".")):
        inner = table.setdefault(part, {})
        if not isinstance(inner, dict):
            raise ValueError(f"{part} holds {inner!r}, not a table of settings")
        table = inner
    return table


FORM_FIELDS = frozenset(f.name for f in fields(FormState))


def generic_settings(schema: type[LaunchSpec]) -> list[PathSetting]:
    """The spec's settings that ``FormState`` keeps in ``settings`` (no field of its own)."""
    return [item for item in LaunchRules.settings(schema) if item.path not in FORM_FIELDS]


def form_value(item: PathSetting, value: SettingValue) -> SettingValue:
    """A spec value as the setting's widget holds it (a line holds text; empty: the default or auto)."""
    if not item.setting.label:
        return value
    widget = SettingWidget.of(item)
    if widget is SettingWidget.CHECK:
        return bool(value)
    if widget is SettingWidget.COMBO:
        return str(value)
    if value is None or (item.setting.auto and value == AUTO):
        return ""
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() else repr(value)
    return str(value)


def table_value(item: PathSetting, value: SettingValue) -> TomlValue | None:
    """What the profile table holds for a widget's value; ``None`` leaves the key out (the default).

    A number that does not read as one stays text, so the spec parser reports it with the
    CLI's own message (``telemetry.stall_timeout: expected a number of seconds ...``).
    """
    widget = SettingWidget.of(item)
    if not item.setting.label or widget not in (SettingWidget.LINE, SettingWidget.NUMBER_LINE):
        return value
    text = str(value).strip()
    if not text:
        return None
    if widget is SettingWidget.NUMBER_LINE:
        for number in (int, float):
            try:
                return number(text)
            except ValueError:
                pass
        return text
    return value


@dataclass(frozen=True)
class Evaluation:
    """What the form means right now."""

    spec: LaunchSpec | None
    """``None`` when a field does not parse."""
    errors: tuple[tuple[str, str], ...]
    """``(field, message)``: parse errors, else the machine checks, as the CLI reports them."""
    commands: tuple[CommandPreview, ...]
    """One per node; empty when the spec does not parse."""
    dirty: bool
    """The form differs from the loaded profile."""
    notice: str | None = None
    """Why launching must wait although nothing is wrong (e.g. the GPU probe is running)."""
    launch: ResolvedLaunch | None = None
    picked_at_launch: tuple[str, ...] = ()
    """Rendezvous values the runner picks anew at launch (the preview shows one such pick)."""
    warnings: tuple[tuple[str, str], ...] = ()
    """``(field, message)``: allowed, but probably not what was meant (more processes than cores)."""
    planning: bool = False
    """The rendezvous is being planned in the background: the preview shows the spec's own values."""

    @property
    def can_launch(self) -> bool:
        return self.spec is not None and not self.errors and self.notice is None

    @property
    def launch_blocker(self) -> str | None:
        """The reason shown next to a disabled Launch button, ``None`` when it can launch."""
        if self.errors:
            field, message = self.errors[0]
            more = len(self.errors) - 1
            return f"{field}: {message}" + (f"  (+{more} more)" if more else "")
        return self.notice

    def warnings_for(self, field: str) -> list[str]:
        return [message for name, message in self.warnings if name == field]

    def errors_for(self, *prefixes: str) -> list[str]:
        """Messages of the fields named by ``prefixes`` (``nodes`` matches ``nodes[1].host``)."""
        found = []
        for field, message in self.errors:
            for prefix in prefixes:
                if field == prefix or field.startswith((prefix + ".", prefix + "[")):
                    found.append(message if field == prefix else f"{field}: {message}")
                    break
        return found


def picked_at_launch(spec: LaunchSpec) -> tuple[str, ...]:
    """Rendezvous values the spec leaves to the runner, which picks them anew at each launch."""
    rdzv = spec.rendezvous
    if rdzv.mode == "c10d":
        return (("endpoint port",) if rdzv.endpoint is None else ()) + (("job id",) if rdzv.job_id is None else ())
    if rdzv.mode == "static" and rdzv.master_port is None:
        return ("master port",)
    return ()


def pick_free_port() -> int:
    """A TCP port free right now on this machine (the free-port button)."""
    return LaunchRules.free_port()


def cores_warning(launch: ResolvedLaunch, cpu_count: int) -> tuple[str, str] | None:
    """In CPU mode, more processes on the head node than it has cores (which `rankwatch run`
    prints too). Allowed, but said."""
    message = LaunchRules.oversubscribed(launch, cpu_count)
    return None if message is None else ("nproc_per_node", message)


def interpreter_errors(info: InterpreterInfo, launch: ResolvedLaunch) -> list[tuple[str, str]]:
    """What the probe found wrong with the head node's interpreter.

    ``check_launch`` can find torch itself, but only by running the interpreter, which
    would block the GUI; the probe already ran it, so its answer is used instead,
    worded as ``runner.profile.check`` words it.
    """
    python = info.python
    if not info.ran:
        detail = f" ({info.error})" if info.error else ""
        return [("interpreter", f"{python} could not be run as Python{detail}")]
    if info.torch is None:
        if info.torch_missing:
            error = LaunchRules.torch_missing(python)
            return [(error.field, error.message)]
        return [("interpreter", f"torch cannot be imported in {python}: {info.error}")]
    backend = info.backend(launch.backend)
    if backend is not None and not backend.available:
        return [("backend", f"{launch.backend} is not available in {python}"
                            + (f": {backend.reason}" if backend.reason else ""))]
    return []


class LaunchFormModel:
    """The launch form's state and what it evaluates to.

    Events:
        state_replaced(FormState): a profile was loaded; widgets repopulate every field.
        evaluated(Evaluation): after every edit, load, probe result or save.
        machine_changed(GpuReport | None): the GPU report changed.
        interpreter_probed(InterpreterInfo): a probe result for some interpreter arrived.
    """

    def __init__(self, base_dir: Path | None = None, schema: type[LaunchSpec] = LaunchSpec) -> None:
        self.state_replaced = Event()
        self.evaluated = Event()
        self.machine_changed = Event()
        self.interpreter_probed = Event()
        self._state = FormState(settings=FormState.from_spec(schema()).settings, schema=schema)
        self._baseline: TomlTable | None = None
        self._profile_name: str | None = None
        self._base_dir = Path(base_dir) if base_dir is not None else Path.cwd()
        self._gpu_report: GpuReport | None = None
        self._interpreters: dict[str, InterpreterInfo] = {}
        self._plan_cache: tuple[Hashable, RendezvousPlan, list[tuple[str, str]]] | None = None
        self._submit_plan: Callable[[Hashable, Callable[[], PlanResult]], None] | None = None
        self._plan_wanted: Hashable | None = None
        self._evaluation = self._evaluate()

    # What the widgets read.

    @property
    def state(self) -> FormState:
        return self._state

    @property
    def evaluation(self) -> Evaluation:
        return self._evaluation

    @property
    def schema(self) -> type[LaunchSpec]:
        """The spec class the form edits; its settings with a label are the generic rows."""
        return self._state.schema

    @property
    def profile_name(self) -> str | None:
        return self._profile_name

    @property
    def base_dir(self) -> Path:
        """Where relative paths in the form start from (the profile's folder)."""
        return self._base_dir

    @property
    def dirty(self) -> bool:
        return self._evaluation.dirty

    @property
    def run_profile_label(self) -> str | None:
        """The name a launch of this form is recorded under in the history: the profile's name
        when the form is what it saved, ``NAME (edited)`` when it differs, ``None`` without one."""
        if self._profile_name is None:
            return None
        return f"{self._profile_name}{EDITED_SUFFIX}" if self.dirty else self._profile_name

    @property
    def gpu_report(self) -> GpuReport | None:
        """``None`` until the first GPU probe answered."""
        return self._gpu_report

    def interpreter_info(self, python: str) -> InterpreterInfo | None:
        return self._interpreters.get(python)

    def head_python(self) -> str:
        """The interpreter torchrun would run in on the head node."""
        launch = self._evaluation.launch
        if launch is not None:
            return launch.head.python
        return self._state.interpreter.strip() or LaunchRules.default_interpreter()

    def resolved_workdir(self) -> Path:
        workdir = Path(self._state.workdir).expanduser() if self._state.workdir.strip() else self._base_dir
        return workdir if workdir.is_absolute() else self._base_dir / workdir

    # What the widgets and the window do.

    def load(self, spec: LaunchSpec, *, profile_name: str | None, base_dir: Path) -> None:
        """Show ``spec`` (a loaded profile) and take it as the saved baseline."""
        self._profile_name = profile_name
        self._base_dir = Path(base_dir)
        self._state = self._fit_machine(FormState.from_spec(spec), as_loaded=True)
        self._baseline = self._table_or_none(self._state)
        self._evaluation = self._evaluate()
        self.state_replaced.emit(self._state)
        self.evaluated.emit(self._evaluation)

    def update(self, **changes: Any) -> None:
        """Change some fields (names of ``FormState``) and re-evaluate.

        Raises:
            TypeError: a name that is not a ``FormState`` field.
        """
        known = {f.name for f in fields(FormState)}
        unknown = set(changes) - known
        if unknown:
            raise TypeError(f"unknown form fields: {', '.join(sorted(unknown))}")
        new_state = replace(self._state, **changes)
        if new_state == self._state:
            return
        self._state = new_state
        self._reevaluate()

    def plan_in_background(self, submit: Callable[[Hashable, Callable[[], PlanResult]], None] | None) -> None:
        """Plan rendezvous (DNS, ``ssh -G``) off this thread: ``submit(key, work)`` runs ``work``
        elsewhere and hands its result back, on this thread, to ``plan_ready``
        (``gui.models.rendezvous_planner``). ``None``: plan inline, as the runner does."""
        self._submit_plan = submit

    def plan_ready(self, key: Hashable, result: PlanResult) -> None:
        """A background plan for ``key`` is done; used when the form still asks for it."""
        if key != self._plan_wanted:
            return
        plan, errors = result
        self._plan_cache = (key, plan, list(errors))
        self._plan_wanted = None
        self._reevaluate()

    def update_setting(self, path: str, value: SettingValue) -> None:
        """Change one of the spec's settings (a dotted path, ``telemetry.stall_timeout``) to what
        its widget holds, and re-evaluate.

        Raises:
            KeyError: a path that is not a setting the form keeps.
        """
        if all(item.path != path for item in generic_settings(self._state.schema)):
            raise KeyError(f"not a setting of the form: {path}")
        self.update(settings=self._state.with_setting(path, value).settings)

    def mark_saved(self, *, profile_name: str, base_dir: Path) -> None:
        """The form was just saved as ``profile_name``: it is the new baseline."""
        self._profile_name = profile_name
        self._base_dir = Path(base_dir)
        self._baseline = self._table_or_none(self._state)
        self._reevaluate()

    def rename(self, profile_name: str) -> None:
        """The loaded profile's file was renamed; unsaved edits stay unsaved."""
        self._profile_name = profile_name
        self._reevaluate()

    def set_gpu_report(self, report: GpuReport) -> None:
        self._gpu_report = report
        before = self._table_or_none(self._state)
        fitted = self._fit_machine(self._state, as_loaded=self._baseline is not None and before == self._baseline)
        if fitted != self._state:
            after = self._table_or_none(fitted)
            self._state = fitted
            if self._baseline is not None and before is not None and after is not None:
                # The machine's reading, not an edit: a value still as loaded takes what the machine made of it.
                self._baseline = {**self._baseline, **{
                    key: value for key, value in after.items()
                    if value != before.get(key) and self._baseline.get(key) == before.get(key)}}
            self.state_replaced.emit(self._state)
        self.machine_changed.emit(report)
        self._reevaluate()

    @property
    def has_gpus(self) -> bool | None:
        """Whether this machine has a usable GPU; ``None`` until the probe answered."""
        report = self._gpu_report
        return None if report is None else bool(report.available and report.gpus)

    def _fit_machine(self, state: FormState, *, as_loaded: bool) -> FormState:
        """Without a GPU, "all GPUs" is CPU mode: the form says so (and saves ``gpus = "cpu"``).
        The bundled example, while nothing of it is edited (``as_loaded``), runs one rank per
        GPU here, at most its two, as `rankwatch run --example` does (the runner's ``fit_example``).

        Not for a Slurm run: its GPUs are the allocated nodes', not this machine's.
        """
        if as_loaded:
            state = self._fit_example(state)
        if state.gpus == LaunchRules.ALL_GPUS and self.has_gpus is False and not state.slurm.enabled:
            return replace(state, gpus=LaunchRules.CPU_ONLY)
        return state

    def _fit_example(self, state: FormState) -> FormState:
        report = self._gpu_report
        if report is None or self._profile_name != ProfileLibrary.EXAMPLE:
            return state
        try:
            spec = LaunchRules.parse(state.to_table(), state.schema)
        except (SpecError, SpecErrors):
            return state
        fitted = LaunchRules.fit_example(spec, report)
        if fitted == spec:
            return state
        return replace(state, nproc_per_node=fitted.nproc_per_node, gpus=fitted.gpus)

    def set_interpreter_info(self, info: InterpreterInfo) -> None:
        self._interpreters[info.python] = info
        self.interpreter_probed.emit(info)
        self._reevaluate()

    def forget_interpreter_info(self, python: str) -> None:
        """Drop a cached probe result (before probing that interpreter again)."""
        if self._interpreters.pop(python, None) is not None:
            self._reevaluate()

    def spec_for_launch(self) -> LaunchSpec:
        """The spec to hand to the runner.

        Raises:
            SpecErrors: the form cannot launch; the errors say why.
        """
        evaluation = self._evaluation
        if not evaluation.can_launch or evaluation.spec is None:
            reasons = [SpecError(field, message) for field, message in evaluation.errors]
            if not reasons:
                reasons = [SpecError("form", evaluation.notice or "not ready")]
            raise SpecErrors(reasons)
        return evaluation.spec

    # Evaluation.

    def _reevaluate(self) -> None:
        self._evaluation = self._evaluate()
        self.evaluated.emit(self._evaluation)

    @staticmethod
    def _table_or_none(state: FormState) -> TomlTable | None:
        try:
            return state.to_table()
        except SpecError:
            return None

    def _evaluate(self) -> Evaluation:
        table = self._table_or_none(self._state)
        dirty = table is None or table != self._baseline
        try:
            if table is None:
                self._state.split_args()  # raises the args error
            spec = LaunchRules.parse(table or {}, self._state.schema)
        except SpecError as error:
            return Evaluation(spec=None, errors=((error.field, error.message),), commands=(), dirty=dirty)
        except SpecErrors as all_errors:
            found = tuple((e.field, e.message) for e in all_errors.errors)
            return Evaluation(spec=None, errors=found, commands=(), dirty=dirty)

        report = self._gpu_report or GpuReport(available=False, reason="not probed yet")
        check = LaunchRules.check(spec, report, self._base_dir)
        launch = check.launch
        errors = [(e.field, e.message) for e in check.errors]
        info = self._interpreters.get(launch.head.python)
        if info is not None and not any(field == "interpreter" for field, _ in errors):
            errors += interpreter_errors(info, launch)
        plan, plan_errors, planning = self._plan(launch)
        errors += plan_errors
        commands = LaunchRules.commands(launch, plan)
        notice = CHECKING_GPUS if self._gpu_report is None else PLANNING_RENDEZVOUS if planning else None
        warning = cores_warning(launch, check.cpu_count)
        return Evaluation(spec=spec, errors=tuple(errors), commands=commands, dirty=dirty,
                          notice=notice, launch=launch, picked_at_launch=picked_at_launch(spec),
                          warnings=(warning,) if warning else (), planning=planning)

    def _plan(self, launch: ResolvedLaunch) -> tuple[RendezvousPlan, list[tuple[str, str]], bool]:
        """The runner's own rendezvous plan (checks a requested port is free, names its holder),
        and whether it is still being made in the background.

        Ports and job ids the runner picks are random, so the plan is kept while the
        rendezvous inputs stay the same: the preview does not change on every keystroke.
        Only those inputs make a new plan; with a background planner, a plan that may wait
        on the network (``may_wait_on_network``) is made there, and until it is back the
        preview shows the spec's own values and Launch waits.
        """
        key = (launch.spec.rendezvous, launch.head.host, launch.head.is_local, len(launch.nodes))
        if self._plan_cache is not None and self._plan_cache[0] == key:
            self._plan_wanted = None  # back to planned inputs: a plan still under way is not wanted
            return self._plan_cache[1], list(self._plan_cache[2]), False
        if self._submit_plan is None or not may_wait_on_network(launch):
            self._plan_wanted = None
            plan, errors = make_plan(launch)
            self._plan_cache = (key, plan, errors)
            return plan, list(errors), False
        if self._plan_wanted != key:
            self._plan_wanted = key
            self._submit_plan(key, lambda: make_plan(launch))
        return LaunchRules.spec_plan(launch.spec), [], True


PlanResult = tuple[RendezvousPlan, list[tuple[str, str]]]


def may_wait_on_network(launch: ResolvedLaunch) -> bool:
    """Whether planning this rendezvous can wait on DNS or ``ssh -G`` (``runner.remote.rendezvous``):
    c10d looks up the endpoint's host (or names the head for the other nodes); static does only
    when it names the head for other nodes itself. Standalone, and static on one node, only
    bind local ports."""
    rendezvous = launch.spec.rendezvous
    if rendezvous.mode == "c10d":
        return True
    return rendezvous.mode == "static" and rendezvous.master_addr is None and launch.spec.is_multi_node


def make_plan(launch: ResolvedLaunch) -> PlanResult:
    """``plan_rendezvous``, its refusal as field errors. May wait on DNS or ``ssh -G``.

    Any other failure (ssh missing, a lookup gone wrong) is said on the rendezvous field
    rather than lost on a background thread.
    """
    try:
        return LaunchRules.plan_rendezvous(launch), []
    except SpecErrors as failure:
        return LaunchRules.spec_plan(launch.spec), [(error.field, error.message) for error in failure.errors]
    except Exception as exc:
        return LaunchRules.spec_plan(launch.spec), [("rendezvous", f"could not be planned: {exc}")]
