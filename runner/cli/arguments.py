"""The argument parser every ``rankwatch`` command uses: argparse with the habits of git.

* Flags are never abbreviated (``allow_abbrev=False`` on every parser): ``--nproc-per-nod 2``
  is a typo, not ``--nproc-per-node``, and a flag added later cannot change what an
  abbreviation in someone's script meant.
* An error is two lines, as git's are: what is wrong (a flag's error worded as the flag:
  ``--nproc-per-node: expected an integer, got 'x'``) and a hint; no usage screen. Exit
  code 2, as argparse's. ``-h``/``--help`` stays whole.
* A mistyped command or flag gets a "did you mean ...?" (as git and pip do), and the
  list of commands it shows leaves out the internal ones. An unknown flag of a launch
  command with nothing close is probably the script's (``--epochs``): the hint says where
  a script's arguments go.
* Commands added without ``help`` (``agent``, ``node-info``: started by Rankwatch
  itself over ssh) are hidden from ``--help`` and from error messages, yet still run.
* `run`, `command` and `profiles save` split their words as torchrun and docker do
  (``runner.cli.launch_arguments``).
"""

from __future__ import annotations

import argparse
import difflib
import sys
from collections.abc import Callable
from typing import Any, NoReturn

from runner.cli.launch_arguments import LaunchWords, split_launch_words

HINT_PREFIX = "hint: "
FLAG_CUTOFF = 0.7
"""How alike an unknown flag and a real one must be to be offered (``--epochs`` is not ``--qos``)."""


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


def with_hint(message: str, hint: str) -> str:
    """An error message whose second line is ``hint`` (``Parser.error`` prints it as given)."""
    return f"{message}\n{HINT_PREFIX}{hint}"


class Parser(argparse.ArgumentParser):
    """``argparse.ArgumentParser`` with the fixes above; subcommand parsers inherit it."""

    launch_target_is_profile: Callable[[str], bool] | None = None
    """Set by ``add_spec_flags``: this command takes ``[FLAGS] TARGET ...`` (see
    ``runner.cli.launch_arguments``), and this says whether a target is a profile."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        kwargs["exit_on_error"] = False  # parse_known_args words the errors (as flags, with a hint)
        super().__init__(*args, **kwargs)

    def _check_value(self, action: argparse.Action, value) -> None:
        if isinstance(action, argparse._SubParsersAction) and value not in action.choices:
            commands = visible_commands(action)
            what = "command" if self.prog.count(" ") == 0 else f"{self.prog.split(' ', 1)[1]} action"
            self.error(with_hint(f"{value!r} is not a {what}{did_you_mean(value, commands)}",
                                 f"{', '.join(commands)}; see `{self.prog} --help`"))
        if action.choices is not None and value not in action.choices:
            choices = [str(choice) for choice in action.choices]
            raise argparse.ArgumentError(
                action, f"{value!r} is not one of {', '.join(choices)}{did_you_mean(str(value), choices)}")
        super()._check_value(action, value)

    def _get_value(self, action: argparse.Action, arg_string: str):
        try:
            return super()._get_value(action, arg_string)
        except argparse.ArgumentError:
            kind = {int: "an integer", float: "a number"}.get(action.type)  # type: ignore[call-overload]
            if kind is None:
                raise
            raise argparse.ArgumentError(action, f"expected {kind}, got {arg_string!r}") from None

    def parse_known_args(self, args=None, namespace=None):
        words = list(sys.argv[1:] if args is None else args)
        launch = None
        if self.launch_target_is_profile is not None:
            launch = split_launch_words(words, self._takes_value, self.launch_target_is_profile)
            words = launch.flags
        try:
            namespace, extras = super().parse_known_args(words, namespace)
        except argparse.ArgumentError as error:
            self.error(_worded(error))
        # Unknown words are reported by the parser that knows the neighbours (a command's,
        # not the top level's), with the flag it probably meant.
        if extras:
            self._reject_unknown(extras, launch)
        if launch is not None:
            self._take_launch_words(namespace, launch)
        return namespace, extras

    def _takes_value(self, flag: str) -> bool:
        action = self._option_string_actions.get(flag)
        return action is not None and action.nargs != 0

    def _take_launch_words(self, namespace: argparse.Namespace, launch: LaunchWords) -> None:
        if launch.stray is not None:
            where = launch.target if launch.target is not None else launch.profile_flag
            self.error(with_hint(f"{launch.stray!r} after {where}: a profile's script arguments go after --",
                                 f"`{self.prog} {where} [FLAGS] -- {launch.stray} ...`"))
        namespace.target = launch.target
        namespace.script_args_given = launch.script_args is not None
        namespace.script_args = list(launch.script_args or [])

    def _reject_unknown(self, extras: list[str], launch: LaunchWords | None) -> NoReturn:
        flags = [word.split("=", 1)[0] for word in flags_typed(extras)]
        if not flags:
            self.error(f"unexpected argument{'s' if len(extras) > 1 else ''}: {' '.join(extras)}")
        flag = flags[0]
        close = self._close_flags(flag)
        if close:
            self.error(f"unknown flag {flag}; did you mean {' or '.join(repr(f) for f in close)}?")
        if launch is None:
            self.error(f"unknown flag {flag}")
        profile = None
        if launch.target is None and launch.profile_flag is not None:
            profile = launch.profile_flag
        elif launch.target is not None and self._is_profile(launch.target) \
                and launch.flags.index(flags_typed(extras)[0]) >= launch.flags_before_target:
            profile = launch.target  # `run PROFILE --epochs 3`: after the profile, not before a script
        where = (f"after -- : `{self.prog} {profile} -- {flag} ...`" if profile else
                 f"after the script (`{self.prog} [FLAGS] SCRIPT {flag} ...`), or after -- with a profile "
                 f"(`{self.prog} PROFILE -- {flag} ...`)")
        self.error(with_hint(f"unknown flag {flag}; it looks like a script argument", f"script arguments go {where}"))

    def _is_profile(self, target: str) -> bool:
        return self.launch_target_is_profile is not None and self.launch_target_is_profile(target)

    def _close_flags(self, word: str) -> list[str]:
        """``['--nproc-per-node']`` for ``--nprocs``: one spelling per flag, and a flag that
        shares a stem with the typo before flags that merely look alike."""
        spelling_of: dict[str, str] = {}
        for action in self._actions:
            if action.help == argparse.SUPPRESS:
                continue
            for option in action.option_strings:
                spelling_of[option] = action.option_strings[-1 if len(action.option_strings[0]) < 3 else 0]
        stem = word[:max(4, len(word) - 2)]
        found = [option for option in spelling_of if option.startswith(stem)] \
            or suggestions(word, list(spelling_of), cutoff=FLAG_CUTOFF)
        return list(dict.fromkeys(spelling_of[option] for option in found))[:3]

    def error(self, message: str) -> NoReturn:
        """Two lines, as git's: what is wrong, and a hint (``see `... --help```, unless the
        message brings its own); exit code 2."""
        if f"\n{HINT_PREFIX}" not in message:
            message = with_hint(message, f"see `{self.prog} --help`")
        self.exit(2, f"{self.prog}: {message}\n")


def flags_typed(words: list[str]) -> list[str]:
    """The words that are flags (``-x``, ``--name``, ``--name=value``)."""
    return [word for word in words if word.startswith("-") and len(word) > 1]


def _worded(error: argparse.ArgumentError) -> str:
    """An argparse error worded as the flag the user typed: ``--backend: 'ncl' is not one of ...``
    (argparse says ``argument --backend: invalid choice: ...``)."""
    name = (error.argument_name or "").split("/")[0]
    message = error.message
    if message.startswith("expected ") and message.endswith(" argument"):  # "expected one argument"
        message = "needs a value"
    return f"{name}: {message}" if name else message
