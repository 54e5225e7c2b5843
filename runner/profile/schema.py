"""One description per launch setting, read by the TOML reader and writer, the CLI and the GUI form.

A spec dataclass field declared with ``setting(...)`` carries a ``Setting`` in its
metadata: its kind and bounds (the validation), its CLI flag and help, its form label,
section and widget. ``runner.profile.parse`` reads and writes the field from it,
``runner.cli.spec_flags`` makes its flag, and the launch form (``gui.models.launch_form``,
``gui.widgets.launch_panel``) shows it: adding a setting is one edit, here on the dataclass.

A field declared with ``metadata=SETTINGS_TABLE`` is a nested table (``[telemetry]``) whose
own fields are settings. Fields with neither (``nodes``, ``rendezvous``, ``gpus`` ...)
have rules of their own, written out in ``parse`` and the form.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import MISSING, Field, dataclass, field, fields
from typing import Any, TypeAlias

SettingValue: TypeAlias = str | int | float | None
"""A setting's value as a spec holds it: a bool (an ``int`` to Python), an integer, a number or
text, ``"auto"`` where allowed, and ``None`` for "not set" (an auto number, an empty text)."""

SETTING = "rankwatch.setting"
TABLE = "rankwatch.table"
AUTO = "auto"

BOOL = "bool"
INTEGER = "integer"
NUMBER = "number"
CHOICE = "choice"
TEXT = "text"
KINDS = (BOOL, INTEGER, NUMBER, CHOICE, TEXT)

CHECK = "check"
LINE = "line"
COMBO = "combo"
WIDGETS = (CHECK, LINE, COMBO)
"""How the form shows a setting: a check box (``bool``), a line of text (numbers and text,
typed as they would be in the TOML file, so a bad value gets the parser's own message), or a
drop-down list (``choice``)."""


@dataclass(frozen=True)
class Setting:
    """What one launch setting is, for every surface that reads or edits it."""

    kind: str
    """``bool``, ``integer``, ``number`` (a float), ``choice`` or ``text`` (an optional string)."""
    help: str = ""
    """The CLI flag's help; also the form's tool tip unless ``tip`` is given."""
    low: float | None = None
    high: float | None = None
    auto: bool = False
    """``"auto"`` is allowed too: an integer stays ``"auto"``; a number reads it as ``None``."""
    choices: tuple[str, ...] = ()
    unit: str = ""
    """What a number counts (``seconds``), said in its type error."""
    check: Callable[[Any], str | None] | None = None
    """More validation of a value that passed the kind's own (not ``None``, not ``"auto"``):
    the error message, or ``None`` when it is fine."""
    omit_default: bool = False
    """Leave the key out of a written profile while it holds the default."""
    flag: str | None = None
    """The CLI flag (``--hash-every``); ``None``: no flag."""
    aliases: tuple[str, ...] = ()
    metavar: str | None = None
    negative: bool = False
    """A ``bool`` whose flag turns it off (``--no-instrument``)."""
    label: str | None = None
    """The form's label; ``None``: not on the generic form (the panel shows it its own way)."""
    section: str = ""
    """The form's group box the setting is shown in."""
    widget: str = ""
    """``check``, ``line`` or ``combo``; empty: the kind's usual one."""
    placeholder: str = ""
    tip: str = ""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown setting kind {self.kind!r}; one of {', '.join(KINDS)}")
        if self.kind == CHOICE and not self.choices:
            raise ValueError("a choice setting needs its choices")

    @property
    def form_widget(self) -> str:
        if self.widget:
            return self.widget
        return {BOOL: CHECK, CHOICE: COMBO}.get(self.kind, LINE)

    @property
    def tool_tip(self) -> str:
        return self.tip or self.help


def setting(default: Any, kind: str, **details: Any) -> Any:
    """A dataclass field that is a launch setting (``details``: the ``Setting``'s fields)."""
    return field(default=default, metadata={SETTING: Setting(kind=kind, **details)})


SETTINGS_TABLE = {TABLE: True}
"""The metadata of a field that is a nested table of settings (``[telemetry]``; the key is the
field's name): ``field(default_factory=TelemetrySpec, metadata=SETTINGS_TABLE)``."""


def setting_of(spec_field: Field) -> Setting | None:
    return spec_field.metadata.get(SETTING)


def is_table(spec_field: Field) -> bool:
    return bool(spec_field.metadata.get(TABLE))


def table_class(spec_field: Field) -> type:
    """The dataclass of a nested settings table (from its default factory)."""
    factory = spec_field.default_factory
    if factory is MISSING:
        raise TypeError(f"{spec_field.name} is not a settings table")
    return type(factory())


def default_of(spec_field: Field) -> Any:
    if spec_field.default is not MISSING:
        return spec_field.default
    if spec_field.default_factory is not MISSING:
        return spec_field.default_factory()
    raise TypeError(f"{spec_field.name} has no default")


@dataclass(frozen=True)
class PathSetting:
    """A setting where it sits in a profile: ``path`` is the dotted TOML key (``telemetry.hash_every``)."""

    path: str
    name: str
    default: Any
    setting: Setting

    @property
    def table(self) -> str:
        """The table it is in (``telemetry``), empty at the top level."""
        return self.path.rpartition(".")[0]


def all_settings(cls: type, prefix: str = "") -> Iterator[PathSetting]:
    """Every setting of a spec, nested tables included, by dotted path."""
    for spec_field in fields(cls):
        described = setting_of(spec_field)
        if described is not None:
            yield PathSetting(prefix + spec_field.name, spec_field.name, default_of(spec_field), described)
        elif is_table(spec_field):
            yield from all_settings(table_class(spec_field), f"{prefix}{spec_field.name}.")


def value_at(spec: Any, path: str) -> Any:
    """The value of the setting at ``path`` in ``spec``."""
    value = spec
    for part in path.split("."):
        value = getattr(value, part)
    return value
