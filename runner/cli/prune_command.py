"""``rankwatch runs prune``: delete old runs from the store, after saying what goes.

Like ``docker system prune``: it lists what it would delete and asks, unless ``--yes``; with
``--dry-run`` it only lists. Live runs are never deleted. The freed space is given back
(``VACUUM``) unless ``--no-vacuum``.
"""

from __future__ import annotations

import argparse
import re
import sys

from runner.cli.output import EXIT_FAILED, EXIT_INVALID, fail
from runner.format import format_bytes
from runner.store.prune import choose_runs, delete_runs, record_count, seconds_ago, store_bytes
from runner.store.store import RunNotFound, RunStore

UNITS = {"m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_age(text: str) -> float:
    """``30d``, ``12h``, ``90m``, ``2w`` as seconds (argparse's type: a bad one is a flag error)."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([mhdw])\s*", text)
    if match is None:
        raise argparse.ArgumentTypeError(f"expected an age such as 30d, 12h, 90m or 2w, got {text!r}")
    return float(match.group(1)) * UNITS[match.group(2)]


def add_parser(actions) -> None:
    prune = actions.add_parser(
        "prune", help="delete old runs (never a live one) and give their space back",
        description="Delete runs from the store: those that ended longer ago than --older-than, and/or all but "
                    "the newest --keep. Lists them and asks first (--yes: do not ask; --dry-run: only list). "
                    "Live runs are never deleted.")
    prune.add_argument("--older-than", type=parse_age, metavar="AGE",
                       help="runs that ended more than AGE ago (30d, 12h, 90m, 2w)")
    prune.add_argument("--keep", type=int, metavar="N", help="keep the newest N runs, delete the others")
    prune.add_argument("--dry-run", action="store_true", help="list what would be deleted, delete nothing")
    prune.add_argument("--yes", "-y", action="store_true", help="delete without asking")
    prune.add_argument("--no-vacuum", action="store_true",
                       help="do not compact the file afterwards (faster; the space is reused by later runs)")
    prune.set_defaults(handler=prune_main)


def prune_main(args: argparse.Namespace) -> int:
    if args.older_than is None and args.keep is None:
        return fail("runs prune: say which runs: --older-than AGE (e.g. 30d), --keep N, or both")
    if args.keep is not None and args.keep < 0:
        return fail(f"runs prune: --keep: expected 0 or more, got {args.keep}")
    try:
        store = RunStore()
    except RunNotFound as error:
        return fail(str(error), code=EXIT_FAILED)
    with store:
        ended_before = None if args.older_than is None else seconds_ago(args.older_than)
        choice = choose_runs(store, ended_before=ended_before, keep=args.keep)
        for run_id in choice.kept_live:
            print(f"run {run_id} is live: kept")
        if not choice.run_ids:
            print("no runs to delete")
            return 0
        records = record_count(store, choice.run_ids)
        listed = ", ".join(map(str, choice.run_ids))
        print(f"{len(choice.run_ids)} run{'s' if len(choice.run_ids) != 1 else ''} to delete ({records:,} rows): "
              f"{listed}")
        if args.dry_run:
            return 0
        if not args.yes:
            if not sys.stdin.isatty():
                return fail("runs prune: not deleting without a terminal to ask; add --yes to delete",
                            code=EXIT_INVALID)
            answer = input("Delete them? [y/N] ").strip().lower()
            if answer not in ("y", "yes"):
                print("nothing deleted")
                return 0
        before = store_bytes(store.path)
        delete_runs(store, choice.run_ids, vacuum=not args.no_vacuum)
        after = store_bytes(store.path)
    print(f"deleted {len(choice.run_ids)} run{'s' if len(choice.run_ids) != 1 else ''}; store "
          f"{format_bytes(before)} -> {format_bytes(after)}")
    return 0
