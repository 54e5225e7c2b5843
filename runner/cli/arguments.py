"""The argument parser every ``rankwatch`` command uses: argparse with three fixes.

* An abbreviation matches a flag, not a spelling: ``--nproc`` is ``--nproc-per-node``
  even though ``--nproc_per_node`` (torchrun's other spelling) starts the same way.
  Plain argparse calls that "ambiguous".
* A mistyped command or flag gets a "did you mean ...?" (as git and pip do), and the
  list of commands it shows leaves out the internal ones.
* Commands added without ``help`` (``agent``, ``node-info``: started by Rankwatch
  itself over ssh) are hidden from ``--help`` and from error messages, yet still run.
"""

from __future__ import annotations

import argparse
import difflib
import sys
from typing import NoReturn


def suggestions(word: str, candidates: list[str], cutoff: float = 0.6) -> list[str]:
    """Close matches for a mistyped ``word`` (prefix matches first), at most three."""
    prefixed = [c for c in candidates if c.startswith(word) and word]
    close = difflib.get_close_matches(word, candidates, n=3, cutoff=cutoff)
    return list(dict.fromkeys(prefixed + close))[:3]


def did_you_mean(word: str, candidates: list[str], cutoff: float = 0.6) -> str:
    """``"; did you mean 'run'?"``, or an empty string when nothing is close."""
    found = suggestions(word, candidates, cutoff)
    if not found:
        return ""
    return "; did you mean " + " or ".join(repr(c) for c in found) + "?"


def visible_commands(action: argparse._SubParsersAction) -> list[str]:
    """The commands of a subparsers action that ``--help`` lists (those added with ``help``)."""
    return [choice.dest for choice in action._choices_actions]


class Parser(argparse.ArgumentParser):
    """``argparse.ArgumentParser`` with the fixes above; subcommand parsers inherit it."""

    def _get_option_tuples(self, option_string: str):
        # Several spellings of one flag (--nproc-per-node, --nproc_per_node) all match an
        # abbreviation; that is one flag, not an ambiguity. Keep the first spelling per action.
        matches = super()._get_option_tuples(option_string)
        unique, seen = [], set()
        for match in matches:
            if id(match[0]) not in seen:
                seen.add(id(match[0]))
                unique.append(match)
        return unique

    def _check_value(self, action: argparse.Action, value) -> None:
        if isinstance(action, argparse._SubParsersAction) and value not in action.choices:
            commands = visible_commands(action)
            what = "command" if self.prog.count(" ") == 0 else f"{self.prog.split(' ', 1)[1]} action"
            self.exit(2, f"{self.prog}: {value!r} is not a {what}{did_you_mean(value, commands)}\n"
                         f"  ({', '.join(commands)}; see `{self.prog} --help`)\n")
        super()._check_value(action, value)

    def parse_known_args(self, args=None, namespace=None):
        # Unknown flags are reported by the parser that knows the neighbours (a command's,
        # not the top level's), with its usage and the flag it probably meant.
        namespace, extras = super().parse_known_args(args, namespace)
        if extras:
            hints = "".join(self._flag_hint(word.split("=", 1)[0]) for word in extras if word.startswith("--"))
            self.error(f"unrecognized arguments: {' '.join(extras)}{hints}")
        return namespace, extras

    def _flag_hint(self, word: str) -> str:
        """``"; did you mean '--nproc-per-node'?"`` for ``--nprocs``: one spelling per flag, and a
        flag that shares a stem with the typo before flags that merely look alike."""
        spelling_of: dict[str, str] = {}
        for action in self._actions:
            if action.help == argparse.SUPPRESS:
                continue
            for option in action.option_strings:
                spelling_of[option] = action.option_strings[-1 if len(action.option_strings[0]) < 3 else 0]
        stem = word[:max(4, len(word) - 2)]
        found = [option for option in spelling_of if option.startswith(stem)]
        found += suggestions(word, list(spelling_of), cutoff=0.6)
        unique = list(dict.fromkeys(spelling_of[option] for option in found))[:3]
        return "; did you mean " + " or ".join(repr(f) for f in unique) + "?" if unique else ""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(2, f"{self.prog}: {message}\n")
