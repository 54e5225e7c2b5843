"""The type of a TOML document as Python holds it: what ``tomllib`` returns and ``tomli_w`` writes.

A launch profile travels as such a table between the file, the spec parser
(``runner.profile.parse``), the CLI (``runner.cli.spec_flags``) and the launch form
(``gui.models.launch_form``). Naming its type once says what a table may hold -- no
``None`` (TOML has no null: a key is left out instead), no tuples, no objects -- and lets
mypy check every place that builds or reads one.

Values read from a table are ``TomlValue``: narrow them with ``isinstance`` before use,
as the parser does when it validates a field.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import date, datetime, time
from typing import TypeAlias

TomlValue: TypeAlias = (
    str | int | float | bool | datetime | date | time | list["TomlValue"] | dict[str, "TomlValue"])
"""One TOML value: a string, integer, float, boolean, date/time, array or table (``bool`` is
listed although it is an ``int`` to Python, because TOML tells them apart)."""

TomlTable: TypeAlias = dict[str, TomlValue]
"""A TOML table (a whole profile, or ``[telemetry]``, ``[[nodes]]``, ``[slurm]`` in it)."""


def without_none(entries: Mapping[str, TomlValue | None]) -> TomlTable:
    """A table of ``entries`` less those that are ``None``: TOML has no null, so a value that is
    not set is a key left out (and reads back as the field's default)."""
    return {key: value for key, value in entries.items() if value is not None}
