"""The ``rankwatch`` command: parse, then hand over to one small function per command.

``rankwatch`` with no arguments (or ``rankwatch gui ...``) replaces this process with
the desktop app (``python -m gui.app``): the runner never imports Qt, so everything
else works on machines without a display or PySide6.
"""

from __future__ import annotations

import argparse
import os
import sys
from importlib import metadata

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10
    import tomli as tomllib

from runner import paths
from runner.cli import (
    inspect_commands,
    profile_commands,
    remote_commands,
    run_command,
    run_history,
    stop_command,
)
from runner.cli.arguments import Parser
from runner.cli.diagnose_commands import add_parsers as add_diagnose_parsers
from runner.cli.spec_flags import add_spec_flags
from runner.privacy import adopt_private_umask
from runner.remote.node_info import DISTRIBUTION

DESCRIPTION = """Launch and watch PyTorch distributed (torchrun) jobs.

  rankwatch  |  rankwatch gui    open the desktop app (gui --example: with the example)
  rankwatch run --example        the bundled example: a rank per GPU (at most 2), or 2 on CPU
  rankwatch run PROFILE          a saved profile (or a .toml path)
  rankwatch run PROFILE --nproc-per-node 4 -- --epochs 20    the profile, changed for this run
  rankwatch run --nproc-per-node 2 train.py --epochs 3
"""

RUN_USAGE = """  rankwatch run [FLAGS] SCRIPT [SCRIPT_ARGS]            as torchrun: everything after the script is its own
  rankwatch run PROFILE [FLAGS] [-- SCRIPT_ARGS]        a saved profile, a .toml file or --example:
                                                        flags after it override its settings for this run
                                                        only (the file is unchanged), and arguments after
                                                        -- replace its script arguments
  rankwatch run -m MODULE [FLAGS] [MODULE_ARGS]         a module, as python -m

examples:
  rankwatch run --nproc-per-node 2 train.py --epochs 3
  rankwatch run --example --nproc-per-node 1 -- --epochs 1
  rankwatch run nightly --backend gloo -- --epochs 20 --lr 0.1

per-rank arguments: a script argument may hold placeholders that every process fills in with its
own value (for scripts that take their rank on the command line; braces: {{ and }}):
  {rank} {local_rank} {world_size} {node_rank} {master_addr} {master_port}
  {init_method} (tcp://MASTER_ADDR:MASTER_PORT)   {init_method:file} (file://PATH, a fresh file per run)
  rankwatch run --nproc-per-node 2 train.py --rank {rank} --world_size {world_size} --init_method {init_method}
"""

COMMAND_USAGE = """Print the torchrun command for each node, to run by hand: the same words as `run`
(`rankwatch command PROFILE [FLAGS] [-- SCRIPT_ARGS]`, `rankwatch command [FLAGS] SCRIPT [ARGS]`),
with the overrides applied.
"""


def package_version() -> str:
    """Rankwatch's version: the installed package's, else (a source tree that was never
    installed) the one ``pyproject.toml`` next to this code declares."""
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        pass
    try:
        with (paths.REPO_ROOT / "pyproject.toml").open("rb") as file:
            declared = tomllib.load(file).get("project", {}).get("version")
    except (OSError, tomllib.TOMLDecodeError):
        declared = None
    return f"{declared} (source tree, not installed)" if declared else "unknown (not installed)"


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="rankwatch", description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"rankwatch {package_version()}",
                        help="print Rankwatch's version and exit")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    # `rankwatch gui ...` becomes the desktop app before parsing (main); listed here for --help
    # and for "did you mean 'gui'?". Its own options are the app's (`rankwatch gui --help`).
    gui = commands.add_parser("gui", help="open the desktop app (also: rankwatch with no command)", add_help=False)
    gui.add_argument("app_args", nargs=argparse.REMAINDER, metavar="...",
                     help="the app's options: --example, --profile NAME, --theme")
    gui.set_defaults(handler=lambda args: exec_gui(args.app_args))

    run = commands.add_parser("run", help="launch a job and watch it live",
                              description="Launch a job with torchrun and watch every rank.\n\n" + RUN_USAGE,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    run.add_argument("--detach", action="store_true", help="start in the background and return once it listens")
    run.add_argument("--json", action="store_true", help="with --detach: print the run id and socket as JSON")
    run.add_argument("--plain", action="store_true", help="plain prefixed lines, no live table")
    run.add_argument("--status-every", type=float, default=30.0, metavar="SECONDS",
                     help="in plain mode, a status line per rank this often (0: never; default 30)")
    run.add_argument("--no-view", action="store_true", help=argparse.SUPPRESS)
    run.add_argument("--ready-fd", type=int, help=argparse.SUPPRESS)
    add_spec_flags(run)
    run.set_defaults(handler=run_command.run_main)

    command = commands.add_parser("command", help="print the torchrun command for each node (to run by hand)",
                                  description=COMMAND_USAGE, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_spec_flags(command)
    command.set_defaults(handler=run_command.command_main)

    profile_commands.add_parser(commands, add_spec_flags)
    run_history.add_parsers(commands)
    stop_command.add_parser(commands)
    inspect_commands.add_parsers(commands)
    add_diagnose_parsers(commands)  # doctor, stacks
    remote_commands.add_parsers(commands)
    return parser


def exec_gui(arguments: list[str]) -> None:
    """Become the desktop app (same interpreter, same environment)."""
    os.execv(sys.executable, [sys.executable, "-m", "gui.app", *arguments])


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] == "gui":
        exec_gui(argv[1:])
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "handler", None) is None:
        parser.print_help()
        return 2
    try:
        return int(args.handler(args) or 0)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0


def entry_point() -> None:
    adopt_private_umask()  # what Rankwatch writes is private; the user's code keeps the user's umask
    sys.exit(main())
