"""The ``rankwatch`` command: parse, then hand over to one small function per command.

``rankwatch`` with no arguments (or ``rankwatch gui ...``) replaces this process with
the desktop app (``python -m gui.app``): the runner never imports Qt, so everything
else works on machines without a display or PySide6.
"""

from __future__ import annotations

import argparse
import os
import sys

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

DESCRIPTION = """Launch and watch PyTorch distributed (torchrun) jobs.

  rankwatch  |  rankwatch gui    open the desktop app (gui --example: with the example)
  rankwatch run --example        the bundled example: a rank per GPU (at most 2), or 2 on CPU
  rankwatch run PROFILE          a saved profile (or a .toml path)
  rankwatch run --nproc-per-node 2 train.py --epochs 3
"""


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="rankwatch", description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    # `rankwatch gui ...` becomes the desktop app before parsing (main); listed here for --help
    # and for "did you mean 'gui'?". Its own options are the app's (`rankwatch gui --help`).
    gui = commands.add_parser("gui", help="open the desktop app (also: rankwatch with no command)", add_help=False)
    gui.add_argument("app_args", nargs=argparse.REMAINDER, metavar="...",
                     help="the app's options: --example, --profile NAME, --theme")
    gui.set_defaults(handler=lambda args: exec_gui(args.app_args))

    run = commands.add_parser("run", help="launch a job and watch it live",
                              description="Launch a job with torchrun and watch every rank. "
                                          "Flags before the target are Rankwatch's; everything after a script goes to it.")
    run.add_argument("--detach", action="store_true", help="start in the background and return once it listens")
    run.add_argument("--json", action="store_true", help="with --detach: print the run id and socket as JSON")
    run.add_argument("--plain", action="store_true", help="plain prefixed lines, no live table")
    run.add_argument("--status-every", type=float, default=30.0, metavar="SECONDS",
                     help="in plain mode, a status line per rank this often (0: never; default 30)")
    run.add_argument("--no-view", action="store_true", help=argparse.SUPPRESS)
    run.add_argument("--ready-fd", type=int, help=argparse.SUPPRESS)
    add_spec_flags(run)
    run.set_defaults(handler=run_command.run_main)

    command = commands.add_parser("command", help="print the torchrun command for each node (to run by hand)")
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
