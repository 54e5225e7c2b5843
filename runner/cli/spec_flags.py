"""Command-line flags that describe a launch, shared by `run`, `command` and `profiles save`.

torchrun style: the flags before the target are Rankwatch's; the target is a saved
profile name, a ``.toml`` path, or a training script (``.py`` or any other file), and
everything after a script goes to the script unchanged. Flags given with a profile
override its fields.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from dataclasses import fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from runner.cli.arguments import Parser
from runner.profile.files import Profile, example_profile, load_profile, looks_like_path
from runner.profile.parse import (
    SpecError,
    SpecErrors,
    parse_host_port,
    spec_from_dict,
    spec_to_dict,
)
from runner.profile.schema import (
    BOOL,
    INTEGER,
    NUMBER,
    PathSetting,
    Setting,
    all_settings,
    is_table,
    setting_of,
)
from runner.profile.spec import AUTO, GpuSelection, LaunchSpec, NodeSpec, RendezvousSpec, SlurmSpec

if TYPE_CHECKING:
    from _typeshed import DataclassInstance


def add_spec_flags(parser: argparse.ArgumentParser, schema: type[LaunchSpec] = LaunchSpec) -> None:
    """The launch flags: those of the spec's settings (``runner.profile.schema``), then the
    ones with rules of their own (GPUs, nodes, rendezvous, Slurm ...)."""
    group = parser.add_argument_group("launch (as torchrun; given with a profile they override it)")
    top_level = [item for item in all_settings(schema) if not item.table]
    add_setting_flags(group, top_level)
    group.add_argument("--gpus", metavar="LIST|all|cpu", type=_gpus_flag, help='GPU indices such as 0,1 (CUDA_VISIBLE_DEVICES), "all" or "cpu"')
    group.add_argument("--interpreter", "--python", metavar="PATH", help="Python with torch (default: this one)")
    group.add_argument("--workdir", metavar="DIR", help="working directory (default: here)")
    group.add_argument("--env", metavar="KEY=VALUE", action="append", default=[], help="extra environment (repeatable)")
    group.add_argument("--nnodes-hosts", "--hosts", dest="hosts", metavar="HOST[:N],...",
                       help="nodes, first one is the head (e.g. localhost,node2:4)")
    group.add_argument("--rdzv-endpoint", metavar="HOST:PORT", help="c10d rendezvous endpoint")
    group.add_argument("--rdzv-id", metavar="ID", help="c10d rendezvous job id")
    group.add_argument("--master-addr", metavar="HOST", help="static rendezvous master address")
    group.add_argument("--master-port", type=int, metavar="PORT", help="static rendezvous master port (0: a free one)")
    add_setting_flags(group, [item for item in all_settings(schema) if item.table])
    group.add_argument("--module", "-m", dest="module", metavar="MODULE", help="run a module (python -m style) instead of a script")
    parser.set_defaults(spec_schema=schema)
    add_slurm_flags(parser)
    parser.add_argument("--example", action="store_true",
                        help="the bundled example (a profile): one rank per GPU (at most 2), or 2 CPU ranks without a GPU")
    parser.add_argument("target", nargs="?", metavar="PROFILE|FILE.toml|SCRIPT",
                        help="what to run; flags after a profile override it for this run only")
    parser.add_argument("script_args", nargs=argparse.REMAINDER, metavar="...",
                        help="after a script: its arguments; after a profile: -- then arguments that replace "
                             "the profile's")
    if isinstance(parser, Parser):  # split the words as torchrun and docker do (runner.cli.launch_arguments)
        parser.launch_target_is_profile = lambda target: not is_script_target(target)


def flag_dest(item: PathSetting) -> str:
    """Where argparse keeps a setting's flag: its name (``no_<name>`` for a flag that turns it off)."""
    return f"no_{item.name}" if item.setting.negative else item.name


def add_setting_flags(group: argparse._ArgumentGroup, items: list[PathSetting]) -> None:
    """One flag per setting that names one; every flag's default is ``None`` (not given)."""
    for item in items:
        described = item.setting
        if described.flag is None:
            continue
        names = (described.flag, *described.aliases)
        if described.kind == BOOL:
            group.add_argument(*names, dest=flag_dest(item), default=None, help=described.help, action="store_true")
        else:
            group.add_argument(*names, dest=flag_dest(item), default=None, help=described.help,
                               metavar=described.metavar or None, choices=described.choices or None,
                               type=_flag_type(described))


def _flag_type(described: Setting) -> Callable[[str], object]:
    """What argparse makes of a setting's text: a number, or ``"auto"`` kept as text
    (``_flag_value`` converts it); a choice or a text setting stays text."""
    if described.kind == INTEGER:
        return _auto_or(int, "an integer") if described.auto else int
    if described.kind == NUMBER:
        return _auto_or(float, "a number") if described.auto else float
    return str


def _auto_or(kind: type, described: str) -> Callable[[str], str]:
    """An argparse type that accepts ``"auto"`` or a ``kind``, and keeps the text (``_flag_value``
    converts it): a bad value is a flag error at once (``--nproc-per-node: expected ...``)."""
    def check(text: str) -> str:
        if text != AUTO:
            try:
                kind(text)
            except ValueError:
                raise argparse.ArgumentTypeError(f'expected {described} or "auto", got {text!r}') from None
        return text
    return check


def _flag_value(item: PathSetting, given: object) -> object:
    """A flag's value as the spec holds it: ``"auto"`` or a number where auto is allowed.

    Raises:
        SpecErrors: neither a number nor "auto".
    """
    described = item.setting
    if described.kind == BOOL:
        return not described.negative
    if described.kind in (INTEGER, NUMBER) and described.auto and isinstance(given, str):
        if given == AUTO:
            return AUTO if described.kind == INTEGER else None
        try:
            return int(given) if described.kind == INTEGER else float(given)
        except ValueError:
            kind = "an integer" if described.kind == INTEGER else "a number"
            raise SpecErrors([SpecError(item.path, f'expected {kind} or "auto", got {given!r}')]) from None
    return given


SpecT = TypeVar("SpecT", bound="DataclassInstance")


def apply_setting_flags(spec: SpecT, args: argparse.Namespace, prefix: str = "") -> SpecT:
    """``spec`` with the settings whose flags were given (nested tables included).

    Raises:
        SpecErrors: a flag's value is neither a number nor "auto" where auto is allowed.
    """
    changes: dict[str, object] = {}  # field name -> new value, for dataclasses.replace
    for spec_field in fields(spec):
        described = setting_of(spec_field)
        if described is not None and described.flag is not None:
            item = PathSetting(prefix + spec_field.name, spec_field.name, None, described)
            given = getattr(args, flag_dest(item), None)
            if given is not None and given is not False:
                changes[spec_field.name] = _flag_value(item, given)
        elif described is None and is_table(spec_field):
            table = getattr(spec, spec_field.name)
            changed = apply_setting_flags(table, args, f"{prefix}{spec_field.name}.")
            if changed is not table:
                changes[spec_field.name] = changed
    return replace(spec, **changes) if changes else spec


def _auto_or_int(field: str, text: str) -> int | str:
    if text == AUTO:
        return AUTO
    try:
        value = int(text)
    except ValueError:
        raise SpecErrors([SpecError(field, f'expected an integer or "auto", got {text!r}')]) from None
    return value


def _gpus_flag(text: str) -> str:
    """``--gpus``, checked as it is parsed (``_gpus`` converts it)."""
    try:
        _gpus(text)
    except SpecErrors as errors:
        raise argparse.ArgumentTypeError(errors.errors[0].message) from None
    return text


def _gpus(text: str) -> GpuSelection:
    if text in ("all", "cpu"):
        return text
    try:
        return tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise SpecErrors([SpecError("gpus", f'expected indices such as 0,1 or "all" or "cpu", got {text!r}')]) from None


def _env(pairs: list[str]) -> tuple[tuple[str, str], ...]:
    result = []
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise SpecErrors([SpecError(f"env.{pair}", "expected KEY=VALUE")])
        result.append((key, value))
    return tuple(result)


def _nodes(text: str) -> tuple[NodeSpec, ...]:
    nodes = []
    for item in text.split(","):
        if not item.strip():  # ",," is no list of three machines
            raise SpecErrors([SpecError("nodes", f"--hosts {text!r}: an empty entry; give HOST[:N],... "
                                                 "(localhost for this machine)")])
        host, _, count = item.strip().partition(":")
        nodes.append(NodeSpec(host=host or "localhost", processes=_auto_or_int("nodes", count) if count else AUTO))
    return tuple(nodes)


def is_script_target(target: str) -> bool:
    """A target is a script unless it is a ``.toml`` file or names a saved profile."""
    if target.endswith(".toml"):
        return False
    if target.endswith(".py") or os.path.isfile(target):
        return True
    return looks_like_path(target)


def apply_overrides(spec: LaunchSpec, args: argparse.Namespace) -> LaunchSpec:
    """Overlay the flags that were given; then re-validate the whole spec.

    Raises:
        SpecErrors: a flag's value is invalid.
    """
    spec = apply_setting_flags(spec, args)  # nproc_per_node, backend, ..., the [telemetry] flags
    nodes = _nodes(args.hosts) if args.hosts else spec.nodes
    rendezvous = spec.rendezvous
    if args.rdzv_endpoint or args.rdzv_id:
        if args.rdzv_endpoint and parse_host_port(args.rdzv_endpoint) is None:
            raise SpecErrors([SpecError("rendezvous.endpoint", f'{args.rdzv_endpoint!r} is not "host:port"')])
        rendezvous = replace(rendezvous, mode="c10d", endpoint=args.rdzv_endpoint or rendezvous.endpoint,
                             job_id=args.rdzv_id or rendezvous.job_id)
    if args.master_addr or args.master_port is not None:  # --master-port 0: a free port (as in a profile)
        rendezvous = replace(rendezvous, mode="static", master_addr=args.master_addr or rendezvous.master_addr,
                             master_port=rendezvous.master_port if args.master_port is None else args.master_port)
    if args.hosts and len(nodes) > 1 and rendezvous.mode == "standalone":
        rendezvous = replace(rendezvous, mode="c10d")
    spec = replace(
        spec,
        gpus=spec.gpus if args.gpus is None else _gpus(args.gpus),
        interpreter=spec.interpreter if args.interpreter is None else args.interpreter,
        workdir=spec.workdir if args.workdir is None else str(Path(args.workdir).expanduser().resolve()),
        env=tuple({**dict(spec.env), **dict(_env(args.env))}.items()) if args.env else spec.env,
        nodes=nodes,
        rendezvous=rendezvous,
    )
    spec = apply_slurm_flags(spec, args)
    return spec_from_dict(spec_to_dict(spec), type(spec))  # the same validation as a profile file


# ---- Slurm (runner.slurm): the [slurm] table from flags -------------------------------------

SLURM_FLAGS = {
    "nodes": "--nodes", "partition": "--partition", "time_limit": "--time", "account": "--account", "qos": "--qos",
    "gpus_per_node": "--gpus-per-node", "cpus_per_node": "--cpus-per-node", "job_name": "--job-name",
    "login_host": "--login-host", "telemetry_route": "--telemetry-route",
}
"""``SlurmSpec`` field -> its flag (``sbatch_options`` is the repeatable ``--sbatch-option``)."""


def add_slurm_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group(
        "Slurm (submit with sbatch and watch it; `rankwatch command --slurm ...` prints the sbatch script)")
    group.add_argument("--slurm", action="store_true", default=None,
                       help="run on a Slurm cluster: sbatch allocates the nodes (the [slurm] table of a profile)")
    group.add_argument("--nodes", type=int, metavar="N", help="nodes to allocate (default 1)")
    group.add_argument("--partition", metavar="NAME", help="Slurm partition (default: the cluster's)")
    group.add_argument("--time", dest="time_limit", metavar="LIMIT",
                       help="time limit in Slurm's format: minutes, HH:MM:SS or D-HH:MM:SS")
    group.add_argument("--account", metavar="NAME", help="Slurm account to charge")
    group.add_argument("--qos", metavar="NAME", help="Slurm quality of service")
    group.add_argument("--gpus-per-node", type=int, metavar="N", help="GPUs per node (default 0: CPU mode)")
    group.add_argument("--cpus-per-node", type=int, metavar="N", help="CPUs per node (default: one per process)")
    group.add_argument("--job-name", metavar="NAME", help="Slurm job name (default: rankwatch-<script>)")
    group.add_argument("--sbatch-option", dest="sbatch_options", action="append", default=[], metavar="OPTION",
                       help="one more #SBATCH option, e.g. --sbatch-option=--mem=64G (repeatable)")
    group.add_argument("--login-host", metavar="[USER@]HOST",
                       help="submit over ssh on this login host (default: this machine is a login node)")
    group.add_argument("--telemetry-route", choices=("auto", "direct", "login"),
                       help="how compute nodes reach this runner: TCP directly, or through the login host's ssh")


def apply_slurm_flags(spec: LaunchSpec, args: argparse.Namespace) -> LaunchSpec:
    """``spec`` with the Slurm flags that were given (``--slurm`` adds a default ``[slurm]``).

    Raises:
        SpecErrors: a Slurm flag without ``--slurm`` (or a profile with ``[slurm]``), or
            ``--hosts`` for a Slurm job.
    """
    given = {field: getattr(args, field) for field in SLURM_FLAGS if getattr(args, field, None) is not None}
    if args.sbatch_options:
        given["sbatch_options"] = tuple(args.sbatch_options)
    if spec.slurm is None and not args.slurm:
        if given:
            flag = SLURM_FLAGS.get(next(iter(given)), "--sbatch-option")
            raise SpecErrors([SpecError("slurm", f"{flag} is a Slurm setting; add --slurm (or use a profile "
                                                 "with a [slurm] table)")])
        return spec
    if args.hosts:
        raise SpecErrors([SpecError("nodes", "--hosts lists nodes, but Slurm allocates a Slurm job's nodes; "
                                             "use --nodes N")])
    login = given.get("login_host")
    if login and "@" in login:
        given["login_user"], _, given["login_host"] = login.rpartition("@")
    if "sbatch_options" in given and spec.slurm is not None:
        given["sbatch_options"] = spec.slurm.sbatch_options + given["sbatch_options"]
    return replace(spec, slurm=replace(spec.slurm or SlurmSpec(), **given))


def profile_from_args(args: argparse.Namespace) -> Profile:
    """The profile a `run`/`command`/`profiles save` invocation describes.

    Raises:
        ProfileError: a named profile does not exist.
        SpecErrors: invalid values.
        ValueError: nothing to run was given (message says what to give).
    """
    schema: type[LaunchSpec] = getattr(args, "spec_schema", LaunchSpec)
    if args.example:
        profile = example_profile()
    elif args.module:
        cwd = str(Path.cwd())
        module_args = ([args.target] if args.target else []) + list(args.script_args)
        spec = schema(module=args.module, args=tuple(module_args), workdir=cwd,
                          gpus="all", rendezvous=RendezvousSpec())
        profile = Profile(name=args.module, path=None, spec=spec)
    elif args.target is None:
        raise ValueError("nothing to run: give a profile name, a .toml file, a script, or --example")
    elif is_script_target(args.target):
        script = Path(args.target).expanduser().resolve()
        spec = schema(script=str(script), args=tuple(args.script_args), workdir=str(Path.cwd()))
        profile = Profile(name=script.stem, path=None, spec=spec)
    else:
        profile = load_profile(args.target, schema)
    if (args.example or profile.path is not None) and getattr(args, "script_args_given", False):
        # `run PROFILE -- ARGS` (or `--example -- ARGS`): these arguments for this run, not the profile's
        profile = replace(profile, spec=replace(profile.spec, args=tuple(args.script_args)))
    spec = apply_overrides(profile.spec, args)
    return replace(profile, spec=spec)


# ---- errors in values given as flags are worded as the flag ------------------------------------

OWN_RULE_FLAGS = {
    "gpus": ("gpus", "--gpus"), "interpreter": ("interpreter", "--interpreter"), "workdir": ("workdir", "--workdir"),
    "nodes": ("hosts", "--hosts"), "module": ("module", "--module"),
    "rendezvous.endpoint": ("rdzv_endpoint", "--rdzv-endpoint"), "rendezvous.job_id": ("rdzv_id", "--rdzv-id"),
    "rendezvous.master_addr": ("master_addr", "--master-addr"),
    "rendezvous.master_port": ("master_port", "--master-port"),
}
"""Spec field -> (argparse dest, flag) of the flags with rules of their own."""


def flag_of_field(field: str, args: argparse.Namespace, schema: type[LaunchSpec] = LaunchSpec) -> str | None:
    """The flag that set ``field`` in this invocation (``--nproc-per-node`` for ``nproc_per_node``),
    or ``None`` when the value came from a profile or a default: an error in a value the user
    typed as a flag names that flag, not a field of a file they never wrote."""
    candidates: list[tuple[str, str]] = []
    if field in OWN_RULE_FLAGS:
        candidates.append(OWN_RULE_FLAGS[field])
    if field.startswith("env.") and any(pair.partition("=")[0] == field[len("env."):] for pair in args.env or ()):
        candidates.append(("env", f"--env {field[len('env.'):]}"))  # given with --env, not in the profile
    if field.startswith("slurm.") and field[len("slurm."):] in SLURM_FLAGS:
        candidates.append((field[len("slurm."):], SLURM_FLAGS[field[len("slurm."):]]))
    for item in all_settings(schema):
        if item.path == field and item.setting.flag is not None:
            candidates.append((flag_dest(item), item.setting.flag))
    for dest, flag in candidates:
        if getattr(args, dest, None) not in (None, False, [], ()):
            return flag
    return None
