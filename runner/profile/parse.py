"""Turn a profile's TOML table into a ``LaunchSpec``, and back.

Parsing is strict: an unknown key, a value of the wrong type or out of range is a
``SpecError`` naming the field (``rendezvous.master_port``, ``nodes[1].host``) and
what is allowed. Checks that need the machine (does GPU 7 exist? is the script
there?) live in ``runner.profile.check``; this module needs nothing but the data.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import fields, replace
from typing import TYPE_CHECKING, Any, TypeVar, overload

from rankwatch import _templates as templates
from runner.profile.schema import (
    BOOL,
    CHOICE,
    INTEGER,
    NUMBER,
    Setting,
    default_of,
    is_table,
    setting_of,
    table_class,
)
from runner.profile.spec import (
    ALL,
    AUTO,
    CPU,
    RENDEZVOUS_MODES,
    SCHEMA_VERSION,
    SELF_SPAWN,
    SLURM_TELEMETRY_ROUTES,
    LaunchSpec,
    NodeSpec,
    RendezvousSpec,
    SlurmSpec,
)
from runner.profile.toml_types import TomlTable, TomlValue, without_none

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
HOST_NAME = re.compile(r"[A-Za-z0-9_.:\-\[\]%]+")
"""A host name or address (IPv6 in brackets, with a zone); matched whole (``fullmatch``), so a
trailing newline cannot slip through."""
USER_NAME = re.compile(r"[^\s\x00-\x1f\x7f]+")
"""An ssh login name: anything but whitespace and control characters."""
MAX_PORT = 65535
FREE_PORT = 0
"""``master_port = 0`` (or ``--master-port 0``, or "auto" in the GUI): a free port, picked at launch."""


class SpecError(ValueError):
    """One invalid field: ``field`` names it, ``message`` says what is allowed."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


class SpecErrors(ValueError):
    """Several ``SpecError``s found in one pass; ``str()`` is one line per error."""

    def __init__(self, errors: list[SpecError]):
        super().__init__("\n".join(str(e) for e in errors))
        self.errors = errors


def _type_name(value: object) -> str:
    return {bool: "true/false", int: "an integer", float: "a number", str: "a string",
            list: "a list", dict: "a table"}.get(type(value), type(value).__name__)


class _Reader:
    """Reads one TOML table, recording errors instead of stopping at the first."""

    def __init__(self, table: Mapping[str, TomlValue], prefix: str, errors: list[SpecError]):
        self.table = table
        self.prefix = prefix
        self.errors = errors

    def name(self, key: str) -> str:
        return f"{self.prefix}{key}"

    def fail(self, key: str, message: str) -> None:
        self.errors.append(SpecError(self.name(key), message))

    def reject_unknown(self, allowed: list[str]) -> None:
        for key in self.table:
            if key not in allowed:
                self.fail(key, f"unknown key; allowed here: {', '.join(sorted(allowed))}")

    def optional_str(self, key: str, default: str | None = None) -> str | None:
        value = self.table.get(key, default)
        if value is None or isinstance(value, str):
            problem = text_problem(value or "")
            if problem is not None:
                self.fail(key, problem)
                return default
            return value or default
        self.fail(key, f"expected a string, got {_type_name(value)} {value!r}")
        return default

    def boolean(self, key: str, default: bool) -> bool:
        value = self.table.get(key, default)
        if isinstance(value, bool):
            return value
        self.fail(key, f"expected true or false, got {value!r}")
        return default

    def integer(self, key: str, default, *, low: int, high: int | None = None, allow_auto=False):
        value = self.table.get(key, default)
        if value is None:
            return default
        if allow_auto and value == AUTO:
            return AUTO
        if isinstance(value, bool) or not isinstance(value, int):
            allowed = (f"an integer between {low} and {high}" if high is not None else f"an integer >= {low}") \
                + (' or "auto"' if allow_auto else "")
            self.fail(key, f"expected {allowed}, got {value!r}")
            return default
        if value < low or (high is not None and value > high):
            bounds = f"between {low} and {high}" if high is not None else f">= {low}"
            self.fail(key, f"{value} is out of range; must be {bounds}")
            return default
        return value

    def number(self, key: str, default, *, low: float, high: float, unit: str = "seconds", allow_auto=False):
        value = self.table.get(key, default)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            expected = f"a number of {unit}" if unit else "a number"
            self.fail(key, f"expected {expected} between {low:g} and {high:g}"
                           + (' or "auto"' if allow_auto else "") + f", got {value!r}")
            return default
        if not low <= value <= high:
            self.fail(key, f"{value} is out of range; must be between {low} and {high}")
            return default
        return float(value)

    def choice(self, key: str, default: str, choices: tuple[str, ...]) -> str:
        value = self.table.get(key, default)
        if isinstance(value, str) and value in choices:
            return value
        self.fail(key, f"{value!r} is not one of {', '.join(choices)}")
        return default

    def sub_table(self, key: str) -> Mapping[str, TomlValue]:
        value = self.table.get(key, {})
        if isinstance(value, Mapping):
            return value
        self.fail(key, f"expected a table ([{self.name(key)}]), got {_type_name(value)}")
        return {}


def _read_setting(reader: _Reader, key: str, default: Any, described: Setting) -> Any:
    """One setting's value from the table, validated as its ``Setting`` says (errors recorded;
    an invalid value reads as the default)."""
    errors_before = len(reader.errors)
    value = _read_setting_value(reader, key, default, described)
    if described.check is not None and value is not None and len(reader.errors) == errors_before \
            and value != AUTO:
        problem = described.check(value)
        if problem is not None:
            reader.fail(key, problem)
            return default
    return value


def _read_setting_value(reader: _Reader, key: str, default: Any, described: Setting) -> Any:
    kind = described.kind
    if kind == BOOL:
        return reader.boolean(key, default)
    if kind == INTEGER:
        low = int(described.low) if described.low is not None else 0
        high = int(described.high) if described.high is not None else None
        return reader.integer(key, default, low=low, high=high, allow_auto=described.auto)
    if kind == NUMBER:
        if described.auto and reader.table.get(key) == AUTO:
            return None
        return reader.number(key, default, low=described.low if described.low is not None else float("-inf"),
                             high=described.high if described.high is not None else float("inf"),
                             unit=described.unit, allow_auto=described.auto)
    if kind == CHOICE:
        return reader.choice(key, default, described.choices)
    return reader.optional_str(key, default)


SettingsT = TypeVar("SettingsT", bound="DataclassInstance")


def with_settings_read(spec: SettingsT, reader: _Reader) -> SettingsT:
    """``spec`` with the values of its setting fields (and its nested settings tables) read from
    the reader's table; an invalid value is recorded as an error and its default is used.

    The values are ``object`` to the type checker: each was checked by its ``Setting``'s kind.
    """
    values: dict[str, object] = {}  # field name -> value, for dataclasses.replace
    for spec_field in fields(spec):
        described = setting_of(spec_field)
        if described is not None:
            values[spec_field.name] = _read_setting(reader, spec_field.name, default_of(spec_field), described)
        elif is_table(spec_field):
            values[spec_field.name] = read_settings_table(table_class(spec_field), reader, spec_field.name)
    return replace(spec, **values)


def read_settings_table(cls: type[SettingsT], reader: _Reader, key: str) -> SettingsT:
    """A nested table whose fields are all settings (``[telemetry]``); unknown keys are errors."""
    table = _Reader(reader.sub_table(key), f"{reader.name(key)}.", reader.errors)
    table.reject_unknown([f.name for f in fields(cls)])
    return with_settings_read(cls(), table)


def write_settings(spec: DataclassInstance) -> TomlTable:
    """The TOML entries of ``spec``'s settings (nested tables included): ``None`` is left out
    (an auto number is written ``"auto"``), and so is a default the setting omits."""
    table: TomlTable = {}
    for spec_field in fields(spec):
        value = getattr(spec, spec_field.name)
        described = setting_of(spec_field)
        if described is not None:
            if described.omit_default and value == default_of(spec_field):
                continue
            if value is None and described.kind == NUMBER and described.auto:
                value = AUTO
            if value is not None:
                table[spec_field.name] = value
        elif is_table(spec_field):
            table[spec_field.name] = write_settings(value)
    return table


def text_problem(text: str) -> str | None:
    """Why ``text`` cannot be handed to a process (as an argument, a path or an environment
    value), or ``None``: a NUL byte ends a C string, so no process could ever receive it."""
    if "\x00" in text:
        return "contains a NUL byte (\\x00), which no argument, path or environment value can hold; remove it"
    return None


def printable(text: str) -> str:
    """``text`` as it can be shown in one line of an error (quoted when it holds control characters)."""
    return text if text.isprintable() else repr(text)


def host_problem(host: str) -> str | None:
    """Why ``host`` is not a host name or address, or ``None`` when it is one."""
    if HOST_NAME.fullmatch(host) and not host.startswith("-"):
        return None
    return f"{host!r} is not a host name or address (letters, digits, '.', '-', ':', '[', ']' only)"


def parse_host_port(text: str) -> tuple[str, int] | None:
    """``"host:port"`` or ``"[v6]:port"`` -> (host, port); ``None`` when malformed."""
    match = re.fullmatch(r"\[?([^\[\]]+?)\]?:(\d+)", text.strip())
    if not match or host_problem(match.group(1)) is not None:
        return None
    return match.group(1), int(match.group(2))


ItemT = TypeVar("ItemT")


def _list_of(value: TomlValue, kind: type[ItemT]) -> list[ItemT] | None:
    """``value`` as a list whose items are all ``kind``, or ``None`` when it is not one (``true``
    is no integer here, though to Python a bool is an int)."""
    if not isinstance(value, list):
        return None
    items: list[ItemT] = []
    for item in value:
        if not isinstance(item, kind) or (isinstance(item, bool) and kind is not bool):
            return None
        items.append(item)
    return items


def _parse_gpus(reader: _Reader):
    value = reader.table.get("gpus", ALL)
    if value in (ALL, CPU):
        return value
    indices = _list_of(value, int)
    if indices is not None:
        if not indices:
            reader.fail("gpus", 'empty list; use "cpu" for CPU mode or "all"')
            return ALL
        if any(i < 0 for i in indices):
            reader.fail("gpus", f"GPU indices are >= 0, got {value}")
            return ALL
        if len(set(indices)) != len(indices):
            reader.fail("gpus", f"index listed twice in {value}; a GPU must not be shared by two ranks")
            return ALL
        return tuple(indices)
    reader.fail("gpus", f'expected "all", "cpu" or a list of GPU indices such as [0, 1], got {value!r}')
    return ALL


def _parse_env(reader: _Reader) -> tuple[tuple[str, str], ...]:
    table = reader.sub_table("env")
    pairs = []
    for key, value in table.items():
        field = f"env.{printable(key)}"
        if not ENV_NAME.fullmatch(key):
            reader.errors.append(SpecError(field, "not a valid environment variable name "
                                                  "(letters, digits and '_', not starting with a digit)"))
        elif isinstance(value, bool) or not isinstance(value, (str, int, float)):
            reader.errors.append(SpecError(field, f"expected a string, got {value!r}"))
        elif (problem := text_problem(str(value))) is not None:
            reader.errors.append(SpecError(field, problem))
        else:
            pairs.append((key, str(value)))
    return tuple(pairs)


def _parse_args(reader: _Reader) -> tuple[str, ...]:
    value = reader.table.get("args", [])
    if isinstance(value, str):
        reader.fail("args", 'expected a list of strings such as ["--epochs", "3"], got one string')
        return ()
    if not isinstance(value, list) or not all(isinstance(a, (str, int, float)) and not isinstance(a, bool) for a in value):
        reader.fail("args", f"expected a list of strings, got {value!r}")
        return ()
    args = tuple(str(a) for a in value)
    for index, arg in enumerate(args):
        problem = text_problem(arg)
        if problem is not None:
            reader.fail(f"args[{index}]", problem)
    _check_templates(reader, args)
    return args


def _check_templates(reader: _Reader, args: tuple[str, ...]) -> None:
    """Per-rank templates (``rankwatch._templates``): an unknown placeholder or a lone brace
    is an error naming the argument, never an argument passed on altered."""
    for error in templates.check(args):
        reader.fail(f"args[{error.index}]", error.message)


def _check_init_file(spec: LaunchSpec) -> list[SpecError]:
    """``{init_method:file}`` is a file in the run's folder on this machine: one machine only."""
    if not (spec.is_multi_node or spec.slurm is not None):
        return []
    try:
        found = [index for index, name, spelling in templates.placeholders(spec.args)
                 if templates.key(name, spelling) == "init_method:file"]
    except templates.TemplateError:
        return []  # said already (_check_templates)
    return [SpecError(f"args[{index}]", "{init_method:file} is a file on this machine, which the other nodes "
                                        "cannot open; use {init_method} (tcp://) with several nodes")
            for index in found[:1]]


def _check_launch_mode(spec: LaunchSpec) -> list[SpecError]:
    """A self-spawning script is started once, on this machine: no torchrun to give each
    process its rank, so no per-rank templates, and no other node."""
    if spec.launch_mode != SELF_SPAWN:
        return []
    errors = []
    if spec.slurm is not None or spec.is_multi_node:
        errors.append(SpecError("launch_mode", "self-spawn starts the script once on this machine; "
                                               "several nodes need launch_mode = \"torchrun\""))
    if templates.uses_templates(spec.args):
        errors.append(SpecError("launch_mode", "self-spawn starts the script once, so per-rank placeholders such "
                                               "as {rank} have no value; pass the values the script itself needs, "
                                               "or use launch_mode = \"torchrun\""))
    return errors


def _parse_nodes(reader: _Reader, errors: list[SpecError]) -> tuple[NodeSpec, ...]:
    value = reader.table.get("nodes")
    if value is None:
        return (NodeSpec(),)
    tables = [n for n in value if isinstance(n, dict)] if isinstance(value, list) else []
    if not isinstance(value, list) or not value or len(tables) != len(value):
        reader.fail("nodes", "expected one or more [[nodes]] tables")
        return (NodeSpec(),)
    nodes = []
    for index, table in enumerate(tables):
        node = _Reader(table, f"nodes[{index}].", errors)
        node.reject_unknown([f.name for f in fields(NodeSpec)])
        host = node.optional_str("host", "localhost")
        problem = host_problem(host) if host else None
        if problem is not None:
            node.fail("host", problem)
        user = node.optional_str("user")
        if user and not USER_NAME.fullmatch(user):
            node.fail("user", f"{user!r} is not a login name (no spaces or control characters)")
        nodes.append(NodeSpec(
            host=host or "localhost",
            processes=node.integer("processes", AUTO, low=1, high=1024, allow_auto=True),
            user=user,
            port=node.integer("port", None, low=1, high=MAX_PORT),
            python=node.optional_str("python"),
            workdir=node.optional_str("workdir"),
        ))
    return tuple(nodes)


def _parse_rendezvous(reader: _Reader, errors: list[SpecError], node_count: int) -> RendezvousSpec:
    rdzv = _Reader(reader.sub_table("rendezvous"), "rendezvous.", errors)
    rdzv.reject_unknown([f.name for f in fields(RendezvousSpec)])
    default_mode = "standalone" if node_count == 1 else "c10d"
    spec = RendezvousSpec(
        mode=rdzv.choice("mode", default_mode, RENDEZVOUS_MODES),
        endpoint=rdzv.optional_str("endpoint"),
        job_id=rdzv.optional_str("job_id"),
        master_addr=rdzv.optional_str("master_addr"),
        master_port=_master_port(rdzv),
        node_rank=rdzv.integer("node_rank", 0, low=0, high=node_count - 1),
    )
    problem = host_problem(spec.master_addr) if spec.master_addr is not None else None
    if problem is not None:
        rdzv.fail("master_addr", problem)
    if spec.endpoint is not None:
        parsed = parse_host_port(spec.endpoint)
        if parsed is None:
            rdzv.fail("endpoint", f'{spec.endpoint!r} is not "host:port"')
        elif not 1 <= parsed[1] <= MAX_PORT:
            rdzv.fail("endpoint", f"port {parsed[1]} is out of range; must be between 1 and {MAX_PORT}")
    if spec.job_id is not None and not re.fullmatch(r"[A-Za-z0-9_.\-]{1,128}", spec.job_id):
        rdzv.fail("job_id", "use letters, digits, '.', '_' and '-' only (at most 128)")
    if spec.mode == "standalone" and node_count > 1:
        rdzv.fail("mode", f'"standalone" runs on one node only, but {node_count} nodes are listed; use "c10d" or "static"')
    if spec.mode == "c10d" and node_count == 1 and spec.endpoint is None:
        rdzv.fail("endpoint", 'mode "c10d" needs an endpoint "host:port" (or use mode "standalone")')
    return spec


def _master_port(rdzv: _Reader) -> int | None:
    """The static master port; 0 means what leaving it out means: a free port, picked at launch."""
    value = rdzv.table.get("master_port")
    free = "or 0 (or leave it out) for a free port"
    if isinstance(value, bool) or not isinstance(value, (int, type(None))):
        rdzv.fail("master_port", f"expected a port number, got {value!r}; use 1 to {MAX_PORT}, {free}")
        return None
    if value is None or value == FREE_PORT:
        return None
    if not 1 <= value <= MAX_PORT:
        rdzv.fail("master_port", f"{value} is out of range; must be between 1 and {MAX_PORT}, {free}")
        return None
    return value


def _parse_module(reader: _Reader) -> str | None:
    """``python -m`` style: a dotted module name."""
    module = reader.optional_str("module")
    if module and not all(part.isidentifier() for part in module.split(".")):
        reader.fail("module", f"{module!r} is not a module name such as mypkg.train")
    return module


# ---- [slurm] ------------------------------------------------------------------------------

SLURM_TIME_LIMIT = re.compile(r"^(\d+-)?\d+(:\d{1,2}){0,2}$")
"""Slurm's formats: MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS (or UNLIMITED)."""
SLURM_UNLIMITED = ("UNLIMITED", "INFINITE")
SLURM_NAME = re.compile(r"^[A-Za-z0-9_.+\-]{1,128}$")
SLURM_PARTITIONS = re.compile(r"^[A-Za-z0-9_.+\-]{1,128}(,[A-Za-z0-9_.+\-]{1,128})*$")
SLURM_MANAGED_OPTIONS = {
    "--nodes": "slurm.nodes", "-N": "slurm.nodes", "--partition": "slurm.partition", "-p": "slurm.partition",
    "--time": "slurm.time_limit", "-t": "slurm.time_limit", "--account": "slurm.account", "-A": "slurm.account",
    "--qos": "slurm.qos", "-q": "slurm.qos", "--job-name": "slurm.job_name", "-J": "slurm.job_name",
    "--gpus-per-node": "slurm.gpus_per_node", "--cpus-per-task": "slurm.cpus_per_node", "-c": "slurm.cpus_per_node",
    "--ntasks-per-node": None, "--ntasks": None, "-n": None, "--output": None, "-o": None, "--error": None,
    "-e": None, "--chdir": None, "-D": None, "--export": None, "--array": None, "-a": None, "--wrap": None,
    "--parsable": None, "--requeue": None, "--no-requeue": None,
}
"""Options Rankwatch writes itself: a field to use instead, or ``None`` (not changeable)."""


def _parse_slurm_time_limit(slurm: _Reader) -> str | None:
    value = slurm.table.get("time_limit")
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)  # minutes, as sbatch --time=30
    if not isinstance(value, str) or not value.strip():
        slurm.fail("time_limit", f'expected a string such as "1:00:00" or "2-00:00:00", got {value!r}')
        return None
    text = value.strip()
    if text.upper() in SLURM_UNLIMITED:
        return text.upper()
    if not SLURM_TIME_LIMIT.match(text):
        slurm.fail("time_limit", f'{text!r} is not a Slurm time limit; use minutes ("30"), "HH:MM:SS" or "D-HH:MM:SS"')
        return None
    if not any(character not in "0:-" for character in text):
        slurm.fail("time_limit", 'a zero time limit means no limit to Slurm; write "UNLIMITED" if that is meant')
        return None
    return text


def _parse_slurm_name(slurm: _Reader, key: str, pattern: re.Pattern = SLURM_NAME) -> str | None:
    value = slurm.optional_str(key)
    if value is not None and not pattern.match(value):
        slurm.fail(key, f"{value!r} is not a Slurm name (letters, digits, '.', '_', '+', '-'"
                        + (", and ',' between partitions)" if pattern is SLURM_PARTITIONS else ")"))
        return None
    return value


def _parse_sbatch_options(slurm: _Reader) -> tuple[str, ...]:
    value = slurm.table.get("sbatch_options", [])
    given = _list_of(value, str)
    if given is None:
        slurm.fail("sbatch_options", f'expected a list of strings such as ["--mem=64G"], got {value!r}')
        return ()
    options = []
    for index, option in enumerate(given):
        text = option.strip()
        name = text.split("=", 1)[0].split(None, 1)[0] if text else ""
        where = f"sbatch_options[{index}]"
        if not text.startswith("-"):
            slurm.fail(where, f"{option!r} is not an sbatch option; each entry is one option such as \"--mem=64G\"")
        elif any(character in text for character in "\n\r\0"):
            slurm.fail(where, "an option must be one line")
        elif name in SLURM_MANAGED_OPTIONS:
            field = SLURM_MANAGED_OPTIONS[name]
            slurm.fail(where, f"{name} is set by Rankwatch" + (f"; use {field}" if field else
                                                               " (one agent task per node, its output file, "
                                                               "the working directory, the environment, "
                                                               "one attempt without requeue)"))
        else:
            options.append(text)
    return tuple(options)


def _parse_slurm(reader: _Reader, errors: list[SpecError]) -> SlurmSpec | None:
    """The ``[slurm]`` table; ``None`` when there is none (the job runs on this machine or over ssh)."""
    if "slurm" not in reader.table:
        return None
    slurm = _Reader(reader.sub_table("slurm"), "slurm.", errors)
    slurm.reject_unknown([f.name for f in fields(SlurmSpec)])
    login_host = slurm.optional_str("login_host")
    if login_host is not None and not HOST_NAME.match(login_host):
        slurm.fail("login_host", f"{login_host!r} is not a host name or address")
    return SlurmSpec(
        nodes=slurm.integer("nodes", 1, low=1, high=100_000),
        gpus_per_node=slurm.integer("gpus_per_node", 0, low=0, high=1024),
        cpus_per_node=slurm.integer("cpus_per_node", None, low=1, high=100_000),
        partition=_parse_slurm_name(slurm, "partition", SLURM_PARTITIONS),
        time_limit=_parse_slurm_time_limit(slurm),
        account=_parse_slurm_name(slurm, "account"),
        qos=_parse_slurm_name(slurm, "qos"),
        job_name=_parse_slurm_name(slurm, "job_name"),
        sbatch_options=_parse_sbatch_options(slurm),
        login_host=login_host,
        login_user=slurm.optional_str("login_user"),
        login_port=slurm.integer("login_port", None, low=1, high=MAX_PORT),
        telemetry_route=slurm.choice("telemetry_route", "auto", SLURM_TELEMETRY_ROUTES),
    )


def _check_slurm_fields(table: Mapping[str, TomlValue], spec: LaunchSpec, errors: list[SpecError]) -> None:
    """Fields Slurm decides when a ``[slurm]`` table is given: they must not be set too."""
    if "nodes" in table:
        errors.append(SpecError("nodes", "Slurm allocates the nodes of a [slurm] job; remove [[nodes]] "
                                         "(slurm.nodes says how many)"))
    if "rendezvous" in table and table["rendezvous"] not in ({}, {"mode": "standalone"}):
        errors.append(SpecError("rendezvous", "a [slurm] job uses c10d rendezvous on its first node, chosen when "
                                              "the job starts; remove [rendezvous]"))
    if isinstance(spec.gpus, tuple):
        errors.append(SpecError("gpus", "Slurm picks the GPUs of a [slurm] job; set slurm.gpus_per_node instead "
                                        "(0: CPU mode)"))
    elif spec.gpus == CPU and spec.slurm is not None and spec.slurm.gpus_per_node:
        errors.append(SpecError("gpus", f'"cpu" but slurm.gpus_per_node is {spec.slurm.gpus_per_node}; '
                                        "set one of them"))


def _slurm_table(slurm: SlurmSpec) -> TomlTable:
    return without_none({
        "nodes": slurm.nodes, "gpus_per_node": slurm.gpus_per_node, "cpus_per_node": slurm.cpus_per_node,
        "partition": slurm.partition, "time_limit": slurm.time_limit, "account": slurm.account, "qos": slurm.qos,
        "job_name": slurm.job_name, "sbatch_options": list(slurm.sbatch_options) or None,
        "login_host": slurm.login_host, "login_user": slurm.login_user, "login_port": slurm.login_port,
        "telemetry_route": slurm.telemetry_route,
    })


def _check_entry_point(reader: _Reader, script: str | None, module: str | None) -> None:
    """Exactly one of ``script`` and ``module``; quiet when one was refused already (a NUL
    byte, not a module name): "missing" would only mislead."""
    if any(error.field in ("script", "module") for error in reader.errors):
        return
    if script and module:
        reader.fail("script", 'give either "script" or "module", not both')
    elif not script and not module and "script" not in reader.table:
        reader.fail("script", "missing: the training script to run (or \"module\" for python -m style)")
    elif not script and not module:
        reader.fail("script", "is empty: give the path of the training script")


TOP_LEVEL_KEYS = [f.name for f in fields(LaunchSpec)]

LaunchSpecT = TypeVar("LaunchSpecT", bound=LaunchSpec)


@overload
def spec_from_dict(table: Mapping[str, TomlValue]) -> LaunchSpec: ...
@overload
def spec_from_dict(table: Mapping[str, TomlValue], schema: type[LaunchSpecT]) -> LaunchSpecT: ...


def spec_from_dict(table: Mapping[str, TomlValue], schema: type[LaunchSpec] = LaunchSpec) -> LaunchSpec:
    """Build a spec from a TOML table. ``schema``: the spec class (a subclass with more
    settings reads them too, ``runner.profile.schema``).

    Raises:
        SpecErrors: every invalid field, each naming the field and what is allowed.
    """
    errors: list[SpecError] = []
    reader = _Reader(table, "", errors)
    reader.reject_unknown([f.name for f in fields(schema)])
    version = reader.integer("version", SCHEMA_VERSION, low=1)
    if isinstance(version, int) and version > SCHEMA_VERSION:
        reader.fail("version", f"{version} is newer than this Rankwatch understands ({SCHEMA_VERSION}); upgrade rankwatch")
    script = reader.optional_str("script")
    module = _parse_module(reader)
    _check_entry_point(reader, script, module)
    nodes = _parse_nodes(reader, errors)
    spec = schema(
        script=script,
        module=module,
        args=_parse_args(reader),
        interpreter=reader.optional_str("interpreter"),
        workdir=reader.optional_str("workdir"),
        env=_parse_env(reader),
        gpus=_parse_gpus(reader),
        nodes=nodes,
        rendezvous=_parse_rendezvous(reader, errors, len(nodes)),
        slurm=_parse_slurm(reader, errors),
        description=reader.optional_str("description"),
        version=SCHEMA_VERSION,
    )
    spec = with_settings_read(spec, reader)  # nproc_per_node, backend, ..., [telemetry]
    if spec.slurm is not None:
        _check_slurm_fields(table, spec, errors)
    errors.extend(_check_launch_mode(spec))
    errors.extend(_check_init_file(spec))
    if errors:
        raise SpecErrors(errors)
    return spec


def spec_to_dict(spec: LaunchSpec) -> TomlTable:
    """The TOML table for ``spec``: ``spec_from_dict(spec_to_dict(s)) == s``."""
    table: TomlTable = {"version": spec.version}
    table.update(without_none({"description": spec.description}))
    values = {**without_none({
        "script": spec.script,
        "module": spec.module,
        "args": list(spec.args),
        "interpreter": spec.interpreter,
        "workdir": spec.workdir,
        "gpus": list(spec.gpus) if isinstance(spec.gpus, tuple) else spec.gpus,
    }), **write_settings(spec)}  # the settings: nproc_per_node, backend, ..., and [telemetry]
    for name in (f.name for f in fields(spec)):  # keys in the order the spec declares them
        if name in values and not isinstance(values[name], dict):
            table[name] = values[name]
    if spec.env:
        table["env"] = dict(spec.env)
    rdzv = spec.rendezvous
    table["rendezvous"] = without_none({
        "mode": rdzv.mode, "endpoint": rdzv.endpoint, "job_id": rdzv.job_id,
        "master_addr": rdzv.master_addr, "master_port": rdzv.master_port,
        "node_rank": rdzv.node_rank or None,
    })
    table.update({key: value for key, value in values.items() if isinstance(value, dict)})
    table["nodes"] = [
        without_none({"host": n.host, "processes": n.processes, "user": n.user, "port": n.port,
                    "python": n.python, "workdir": n.workdir})
        for n in spec.nodes
    ]
    if spec.slurm is not None:
        # Slurm decides nodes and rendezvous: written only when set, so parsing names the conflict.
        if spec.nodes == (NodeSpec(),):
            del table["nodes"]
        if spec.rendezvous == RendezvousSpec():
            del table["rendezvous"]
        table["slurm"] = _slurm_table(spec.slurm)
    return table
