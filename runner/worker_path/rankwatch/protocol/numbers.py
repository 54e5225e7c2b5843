"""Lenient values: one definition of "a number", "an integer", "a pid" and "text the store can hold".

A field from the wire that is missing, of the wrong type, not finite or outside SQLite's range
reads as unknown (None) here, never as an exception: a bad value costs its own field only.
"""

from __future__ import annotations

TYPE_CHECKING = False  # `typing` costs ~3 ms to import and workers import this module
if TYPE_CHECKING:
    pass


INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1
"""SQLite's INTEGER range: an integer outside it cannot be stored."""
LATEST_PLAUSIBLE_TIME = 1e11
"""Timestamps are seconds since 1970; anything past the year 5000 is garbage."""
MAX_NAME_CHARS = 128
MAX_SOURCE_CHARS = 16
MAX_TEXT_CHARS = 64 * 1024
"""Longest text field kept whole (a log line, a traceback is longer: ``MAX_LONG_TEXT_CHARS``)."""
MAX_LONG_TEXT_CHARS = 1 << 20


# ---- lenient values: one definition of "a number", "an integer", "text" ---------------------


def as_int(value: object) -> int | None:
    """An integer SQLite can hold, from a JSON number (a float is truncated); else None.

    Booleans are not numbers here, and neither are NaN, infinities or integers
    outside the 64-bit range.
    """
    kind = type(value)
    if kind is int:
        return value if INT64_MIN <= value <= INT64_MAX else None  # type: ignore[return-value,operator]
    if kind is float:
        number: float = value  # type: ignore[assignment]
        if number - number == 0 and INT64_MIN <= number <= INT64_MAX:
            return int(number)
    return None


def as_count(value: object) -> int | None:
    """``as_int`` of a count: None for a negative number (no count is; a forged ``dropped: -1``
    would read "-1 records dropped")."""
    number = as_int(value)
    return number if number is not None and number >= 0 else None


def as_float(value: object) -> float | None:
    """A finite float from a JSON number; None for anything else (booleans included)."""
    kind = type(value)
    if kind is float:
        number: float = value  # type: ignore[assignment]
        return number if number - number == 0 else None
    if kind is int:
        try:
            return float(value)  # type: ignore[arg-type]
        except OverflowError:
            return None
    return None


def as_time(value: object) -> float | None:
    """A plausible wall-clock time (seconds since 1970), else None."""
    number = as_float(value)
    return number if number is not None and 0.0 < number < LATEST_PLAUSIBLE_TIME else None


def is_storable_text(text: str) -> bool:
    """Whether ``text`` encodes to UTF-8 (JSON lets lone surrogates through; SQLite refuses them)."""
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def clean_text(text: str, limit: int = MAX_TEXT_CHARS) -> str:
    """``text`` as the store can hold it: lone surrogates replaced by U+FFFD, at most ``limit`` chars."""
    if len(text) > limit:
        text = text[:limit]
    if is_storable_text(text):
        return text
    return "".join("\ufffd" if "\ud800" <= char <= "\udfff" else char for char in text)


def as_text(value: object, limit: int = MAX_TEXT_CHARS) -> str | None:
    """``clean_text`` of a string; None for anything else."""
    return clean_text(value, limit) if isinstance(value, str) else None


MAX_PID = 1 << 22
"""Linux's ``PID_MAX_LIMIT``: no process id is above it."""


def as_pid(value: object) -> int | None:
    """A process id (1 .. ``MAX_PID``) from a JSON number; None for anything else: a pid of 0 or
    -1 names a process group or every process to ``kill``, and no sampler can follow it."""
    pid = as_int(value)
    return pid if pid is not None and 0 < pid <= MAX_PID else None
