"""Where Rankwatch's flags end and the script's arguments begin, for `run`, `command`, `profiles save`.

Two habits meet here, and argparse alone serves neither:

* torchrun's: ``rankwatch run [FLAGS] SCRIPT [SCRIPT_ARGS]``. Everything after the
  script is the script's, flags included (``train.py --epochs 3 --help``).
* docker's and git's: ``rankwatch run PROFILE [FLAGS] [-- SCRIPT_ARGS]``. A profile
  is no script, so flags after it are Rankwatch's and override the profile for
  this run; arguments after ``--`` replace the profile's script arguments.
  ``--example`` is a profile too: ``rankwatch run --example -- --epochs 1``.

So the words are split before argparse sees them: the flags (from before the target,
and from after a profile) go to argparse; the target and the script arguments are
set on the namespace as they were typed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

END_OF_FLAGS = "--"
EXAMPLE_FLAG = "--example"
PROFILE_FLAGS = (EXAMPLE_FLAG, "--from")
"""Flags that name the profile (`profiles save NAME --from PROFILE [FLAGS] [-- SCRIPT_ARGS]`)."""
MODULE_FLAGS = ("-m", "--module")


@dataclass(frozen=True)
class LaunchWords:
    """One `run`/`command` invocation's words, sorted."""

    flags: list[str]
    """Rankwatch's flags with their values, for argparse."""
    target: str | None
    """The profile, ``.toml`` file, script (or a module's first argument) as typed."""
    script_args: list[str] | None
    """The script's arguments; ``None`` when a profile was given none (it keeps its own)."""
    stray: str | None = None
    """A word after a profile (or ``--example``) that is neither a flag nor after ``--``."""
    flags_before_target: int = 0
    """How many words of ``flags`` came before the target (all of them when there is none)."""
    profile_flag: str | None = None
    """The flag that named the profile, as typed (``--example``, ``--from nightly``), if one did."""


def split_launch_words(words: list[str], takes_value: Callable[[str], bool],
                       is_profile: Callable[[str], bool]) -> LaunchWords:
    """Sort ``words`` (what follows ``rankwatch run``) into flags, target and script arguments.

    ``takes_value(flag)`` says whether a known flag takes the next word as its value
    (unknown flags are taken to stand alone: argparse reports them); ``is_profile(target)``
    whether a target names a profile or a ``.toml`` file rather than a script.
    """
    before: list[str] = []
    launch = _split(words, takes_value, is_profile, before)
    return replace(launch, flags_before_target=len(before) if launch.target is not None else len(launch.flags),
                   profile_flag=_profile_flag(before))


def _profile_flag(flags: list[str]) -> str | None:
    """``--example`` or ``--from NAME`` (the last such flag) among ``flags``, as typed."""
    for index in range(len(flags) - 1, -1, -1):
        name = flags[index].split("=", 1)[0]
        if name == EXAMPLE_FLAG or (name in PROFILE_FLAGS and "=" in flags[index]):
            return flags[index]
        if name in PROFILE_FLAGS:
            return " ".join(flags[index:index + 2])
    return None


def _split(words: list[str], takes_value: Callable[[str], bool], is_profile: Callable[[str], bool],
           flags: list[str]) -> LaunchWords:
    """``split_launch_words``; ``flags`` holds the flags before the target once it returns."""
    profile_given = module_given = False
    index = 0
    while index < len(words):
        word = words[index]
        if word == END_OF_FLAGS:
            rest = words[index + 1:]
            if profile_given:  # `--example -- ARGS`: the profile's script arguments
                return LaunchWords(flags, None, rest)
            if not rest:
                return LaunchWords(flags, None, None)
            return _after_target(list(flags), rest[0], rest[1:], takes_value, is_profile(rest[0]) and not module_given)
        if _is_flag(word):
            index = _take_flag(words, index, flags, takes_value)
            name = word.split("=", 1)[0]
            profile_given = profile_given or name in PROFILE_FLAGS
            module_given = module_given or name in MODULE_FLAGS or (word.startswith("-m") and word[1:2] != "-")
            continue
        if profile_given:  # `--example WORD`: the profile is named already
            return _after_profile(flags, None, words[index:], takes_value)
        return _after_target(list(flags), word, words[index + 1:], takes_value, is_profile(word) and not module_given)
    return LaunchWords(flags, None, None)


def _is_flag(word: str) -> bool:
    return word.startswith("-") and word != "-" and not _is_number(word)


def _is_number(word: str) -> bool:
    try:
        float(word)
    except ValueError:
        return False
    return True


def _take_flag(words: list[str], index: int, flags: list[str], takes_value: Callable[[str], bool]) -> int:
    """Append the flag at ``index`` (and its value, when it takes one) to ``flags``; the next index."""
    word = words[index]
    flags.append(word)
    if "=" not in word and takes_value(word) and index + 1 < len(words):
        flags.append(words[index + 1])
        return index + 2
    return index + 1


def _after_target(flags: list[str], target: str, rest: list[str], takes_value: Callable[[str], bool],
                  profile: bool) -> LaunchWords:
    if not profile:  # a script (or a module): everything after it is its own, as with torchrun,
        if rest[:1] == [END_OF_FLAGS]:  # but a `--` right after it only says where they begin
            rest = rest[1:]
        return LaunchWords(flags, target, rest)
    return _after_profile(flags, target, rest, takes_value)


def _after_profile(flags: list[str], target: str | None, rest: list[str],
                   takes_value: Callable[[str], bool]) -> LaunchWords:
    """After a profile: flags that override it, then ``--`` and the script's arguments."""
    stray = None
    index = 0
    while index < len(rest):
        word = rest[index]
        if word == END_OF_FLAGS:
            return LaunchWords(flags, target, rest[index + 1:], stray)
        if _is_flag(word):
            index = _take_flag(rest, index, flags, takes_value)
            continue
        stray = stray or word
        index += 1
    return LaunchWords(flags, target, None, stray)
