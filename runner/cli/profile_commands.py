"""`rankwatch profiles list | show | save | delete | path`."""

from __future__ import annotations

import argparse
import sys

from runner import paths
from runner.cli.arguments import Parser
from runner.cli.output import EXIT_FAILED, fail, print_spec_errors
from runner.cli.spec_flags import profile_from_args
from runner.profile.files import (
    ProfileError,
    delete_profile,
    dumps_spec,
    list_profiles,
    load_profile,
    profile_path,
    save_profile,
)
from runner.profile.parse import SpecErrors


def add_parser(commands, add_spec_flags) -> None:
    profiles = commands.add_parser("profiles", help="saved launch profiles (TOML files)")
    actions = profiles.add_subparsers(dest="action", metavar="ACTION")
    actions.add_parser("list", help="saved profile names").set_defaults(handler=list_main)
    show = actions.add_parser("show", help="print a profile as TOML")
    show.add_argument("name", metavar="NAME|FILE.toml", help="a saved profile's name or a .toml file")
    show.set_defaults(handler=show_main)
    save = actions.add_parser("save", help="save a profile from flags (as for `run`), or copy one with --from",
                              description=SAVE_USAGE)
    save.add_argument("name", nargs="?", help="the new profile's name")
    save.add_argument("rest", nargs=argparse.REMAINDER, metavar="...",
                      help="flags as for `run`, then the script and its arguments (or --from PROFILE)")
    save.set_defaults(handler=save_main, add_spec_flags=add_spec_flags)
    delete = actions.add_parser("delete", help="delete a saved profile")
    delete.add_argument("name", help="a saved profile's name")
    delete.set_defaults(handler=delete_main)
    where = actions.add_parser("path", help="where profiles live (or one profile's file)")
    where.add_argument("name", nargs="?", help="a profile's name (default: the folder)")
    where.set_defaults(handler=path_main)
    profiles.set_defaults(handler=lambda args: (profiles.print_help(), 2)[1])


def list_main(args: argparse.Namespace) -> int:
    names = list_profiles()
    if not names:
        print(f"no saved profiles yet (they live in {paths.profiles_dir()}); "
              "create one with `rankwatch profiles save NAME ...`", file=sys.stderr)
    for name in names:
        print(name)
    return 0


def show_main(args: argparse.Namespace) -> int:
    try:
        profile = load_profile(args.name)
    except SpecErrors as errors:
        return print_spec_errors(errors, args.name)
    except ProfileError as error:
        return fail(str(error), code=EXIT_FAILED)
    sys.stdout.write(dumps_spec(profile.spec))
    return 0


SAVE_USAGE = ("Save a profile: `rankwatch profiles save NAME [flags] SCRIPT [args]` (flags as for `run`), "
              "or `rankwatch profiles save NAME --from OTHER [flags]`.")


def _save_flags_parser(add_spec_flags) -> argparse.ArgumentParser:
    # Parsed apart from NAME: argparse cannot mix a leading positional with the
    # torchrun-style "flags, then script, then the script's arguments".
    parser = Parser(prog="rankwatch profiles save NAME", description=SAVE_USAGE)
    parser.add_argument("--from", dest="source", metavar="PROFILE|FILE.toml", help="start from this profile")
    parser.add_argument("--force", action="store_true", help="overwrite an existing profile")
    add_spec_flags(parser)
    return parser


def save_main(args: argparse.Namespace) -> int:
    parser = _save_flags_parser(args.add_spec_flags)
    if args.name in (None, "-h", "--help"):
        parser.print_help()
        return 0 if args.name else 2
    args = argparse.Namespace(name=args.name, **vars(parser.parse_args(args.rest)))
    try:
        target = profile_path(args.name)
        if target.exists() and not args.force:
            return fail(f"profile {args.name!r} exists ({target}); add --force to overwrite")
        if args.source:
            if args.target:
                return fail("give either --from PROFILE or a script, not both")
            args.target = args.source
        profile = profile_from_args(args)
        path = save_profile(args.name, profile.spec)
    except SpecErrors as errors:
        return print_spec_errors(errors, args.name)
    except (ProfileError, ValueError) as error:
        return fail(str(error))
    print(f"saved {path}")
    return 0


def delete_main(args: argparse.Namespace) -> int:
    try:
        path = delete_profile(args.name)
    except ProfileError as error:
        return fail(str(error), code=EXIT_FAILED)
    print(f"deleted {path}")
    return 0


def path_main(args: argparse.Namespace) -> int:
    try:
        print(profile_path(args.name) if args.name else paths.profiles_dir())
    except ProfileError as error:
        return fail(str(error))
    return 0
