"""Per-rank argument templates: ``--rank {rank} --init_method {init_method}``, expanded per process.

Scripts written for a manual launch take their rank, world size and rendezvous on the
command line, one process per rank (the classic tutorials' ``--init_method tcp://HOST:PORT
--rank R --world_size N``). torchrun gives every process the same argv, so such
arguments are templates: each process expands its own, from what its launcher told it.
The runner checks the templates before anything starts (``check``); the bootstrap
expands them in every process (``expand``), from torchrun's environment and the values
the runner chose for all (``values_from_environment``).

The placeholders:

=====================  ===============================================================
``{rank}``             the process's global rank (torchrun's ``RANK``)
``{local_rank}``       its rank on its node (``LOCAL_RANK``)
``{world_size}``       the number of processes (``WORLD_SIZE``)
``{node_rank}``        its node's rank (``GROUP_RANK``)
``{master_addr}``      the rendezvous store's host (``MASTER_ADDR``)
``{master_port}``      the rendezvous store's port (``MASTER_PORT``)
``{init_method}``      ``tcp://MASTER_ADDR:MASTER_PORT`` (also spelled ``{init_method:tcp}``)
``{init_method:file}`` ``file://PATH``, a fresh file in a private folder that the runner
                       makes before the run and removes after it (``INIT_FILE``)
=====================  ===============================================================

Which arguments are templates: an argument that holds ``{{`` or a ``{`` followed by a
letter or ``_``. Any other argument is passed unchanged, so a JSON argument such as
``{"lr": 0.1}`` needs no escaping. In a template, ``{{`` and ``}}`` are literal braces and
every other brace must belong to a placeholder; anything else is an error that names the
argument (``TemplateError``), never a silently altered argument.

Standard library only: the worker imports it in the user's interpreter, the runner the
very same module.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence

PLACEHOLDERS = ("rank", "local_rank", "world_size", "node_rank", "master_addr", "master_port", "init_method")
SPELLINGS = {"init_method": ("tcp", "file")}
"""Placeholders with spellings (``{init_method:file}``); the first is the default."""
EXPAND_VARIABLE = "RANKWATCH_EXPAND_ARGS"
"""Set to "1" by the runner when the script's arguments hold templates: the bootstrap expands them."""
INIT_FILE_VARIABLE = "RANKWATCH_INIT_FILE"
"""The path ``{init_method:file}`` names (the runner made its private folder; the file must not exist)."""
LOOKS_LIKE_TEMPLATE = re.compile(r"\{\{|\{[A-Za-z_]")
PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)(?::([A-Za-z_][A-Za-z0-9_]*))?\}")


class TemplateError(ValueError):
    """An argument is a template that cannot be expanded: ``index`` names it, ``message`` says why."""

    def __init__(self, index: int, message: str) -> None:
        super().__init__(f"args[{index}]: {message}")
        self.index = index
        self.message = message


def expansion_requested(environ: Mapping[str, str] | None = None) -> bool:
    """Whether the runner said this process's arguments hold templates (``EXPAND_VARIABLE``)."""
    environ = os.environ if environ is None else environ
    return environ.get(EXPAND_VARIABLE, "").strip() == "1"


def is_template(argument: str) -> bool:
    """Whether ``argument`` is expanded (see the module docstring)."""
    return LOOKS_LIKE_TEMPLATE.search(argument) is not None


def parse(argument: str, index: int = 0) -> list[str | tuple[str, str | None]]:
    """The pieces of a template: literal text and ``(name, spelling)`` placeholders.

    Raises:
        TemplateError: a lone brace, an unknown placeholder or spelling.
    """
    pieces: list[str | tuple[str, str | None]] = []
    text: list[str] = []
    position = 0
    while position < len(argument):
        character = argument[position]
        pair = argument[position:position + 2]
        if pair in ("{{", "}}"):
            text.append(character)
            position += 2
            continue
        if character == "}":
            raise TemplateError(index, f"a lone '}}' in {argument!r}; write '}}}}' for a literal brace")
        if character != "{":
            text.append(character)
            position += 1
            continue
        found = PLACEHOLDER.match(argument, position)
        if found is None:
            raise TemplateError(index, f"{argument[position:position + 24]!r}... in {argument!r} is not a "
                                       f"placeholder; {known_words()}; write '{{{{' and '}}}}' for literal braces")
        name, spelling = found.group(1), found.group(2)
        if name not in PLACEHOLDERS:
            raise TemplateError(index, f"unknown placeholder {found.group(0)} in {argument!r}; {known_words()}; "
                                       "write '{{' and '}}' for literal braces")
        if spelling is not None and spelling not in SPELLINGS.get(name, ()):
            allowed = ", ".join(f"{{{name}:{word}}}" for word in SPELLINGS.get(name, ()))
            raise TemplateError(index, f"{found.group(0)} in {argument!r}: {name} has "
                                       + (f"the spellings {allowed}" if allowed else "no spellings"))
        if text:
            pieces.append("".join(text))
            text = []
        pieces.append((name, spelling))
        position = found.end()
    if text:
        pieces.append("".join(text))
    return pieces


def known_words() -> str:
    return ("the placeholders are " + ", ".join(f"{{{name}}}" for name in PLACEHOLDERS)
            + " and {init_method:file}")


def placeholders(arguments: Sequence[str]) -> list[tuple[int, str, str | None]]:
    """Every placeholder of ``arguments`` as ``(argument index, name, spelling)``.

    Raises:
        TemplateError: for the first argument that is not a valid template.
    """
    found: list[tuple[int, str, str | None]] = []
    for index, argument in enumerate(arguments):
        if is_template(argument):
            found.extend((index, *piece) for piece in parse(argument, index) if isinstance(piece, tuple))
    return found


def check(arguments: Sequence[str]) -> list[TemplateError]:
    """Every argument that is not a valid template (empty when all are)."""
    errors = []
    for index, argument in enumerate(arguments):
        if is_template(argument):
            try:
                parse(argument, index)
            except TemplateError as error:
                errors.append(error)
    return errors


def uses_templates(arguments: Sequence[str]) -> bool:
    """Whether any argument holds a placeholder (an argument with only ``{{`` escapes counts too:
    it changes when expanded)."""
    return any(is_template(argument) for argument in arguments)


def key(name: str, spelling: str | None) -> str:
    """How ``values`` names a placeholder: ``init_method`` (its default spelling) or ``init_method:file``."""
    default = SPELLINGS.get(name, (None,))[0]
    return name if spelling is None or spelling == default else f"{name}:{spelling}"


def expand(arguments: Sequence[str], values: Mapping[str, str]) -> list[str]:
    """``arguments`` with every template expanded from ``values`` (keys as ``key`` makes them).

    Raises:
        TemplateError: an argument is not a valid template, or a value it needs is missing.
    """
    expanded = []
    for index, argument in enumerate(arguments):
        if not is_template(argument):
            expanded.append(argument)
            continue
        parts = []
        for piece in parse(argument, index):
            if isinstance(piece, str):
                parts.append(piece)
                continue
            name = key(*piece)
            value = values.get(name)
            if value is None:
                raise TemplateError(index, f"{{{name}}} has no value here ({why_missing(name)})")
            parts.append(value)
        expanded.append("".join(parts))
    return expanded


def why_missing(name: str) -> str:
    if name == "init_method:file":
        return f"{INIT_FILE_VARIABLE} is not set: the runner sets it for a run on one node"
    return "not launched by torchrun under Rankwatch"


def tcp_address(host: str, port: str | int) -> str:
    """``tcp://HOST:PORT``, with an IPv6 host in brackets."""
    return f"tcp://[{host}]:{port}" if ":" in host and not host.startswith("[") else f"tcp://{host}:{port}"


def values_from_environment(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """What this process's placeholders expand to, from torchrun's variables and the runner's.

    ``{init_method}`` is torchrun's own rendezvous store (``MASTER_ADDR:MASTER_PORT``): every
    rank can reach it on every node, and with torchrun's agent store the ranks join it as
    ``env://`` would. Missing variables leave their placeholders without a value.
    """
    environ = os.environ if environ is None else environ
    sources = {"rank": "RANK", "local_rank": "LOCAL_RANK", "world_size": "WORLD_SIZE",
               "master_addr": "MASTER_ADDR", "master_port": "MASTER_PORT"}
    values = {name: environ[variable] for name, variable in sources.items() if environ.get(variable)}
    node_rank = environ.get("GROUP_RANK") or environ.get("RANKWATCH_NODE_RANK")
    if node_rank:
        values["node_rank"] = node_rank
    if "master_addr" in values and "master_port" in values:
        values["init_method"] = tcp_address(values["master_addr"], values["master_port"])
    init_file = environ.get(INIT_FILE_VARIABLE)
    if init_file:
        values["init_method:file"] = "file://" + init_file
    return values
