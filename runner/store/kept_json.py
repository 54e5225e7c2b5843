"""Reading back the JSON the store keeps (a run's statistics, its figures, its summary), leniently.

What a hub wrote is read by any later Rankwatch, so nothing here trusts a shape: a value of the
wrong type reads as None (not measured), a missing object as an empty one, and the readers
return precise types instead of ``Any``. Numbers are read as they were kept: a loss that went
NaN was measured NaN, so non-finite floats are kept too (unlike the wire's
``rankwatch.protocol.as_float``, which refuses them from workers).
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from runner.rows import wire_int

__all__ = ["kept_float", "kept_int", "kept_list", "kept_object", "kept_shares", "kept_text", "loaded_json"]


def loaded_json(text: str | bytes | None) -> object:
    """The JSON value of ``text``; None for no text or text that does not parse."""
    if not text:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return None


def kept_object(value: object) -> Mapping[str, object]:
    """``value`` when it is a JSON object; an empty one otherwise."""
    return value if isinstance(value, Mapping) else {}


def kept_list(value: object) -> list[object]:
    """``value`` when it is a JSON list; an empty one otherwise."""
    return value if isinstance(value, list) else []


def kept_int(value: object) -> int | None:
    return wire_int(value)


def kept_float(value: object) -> float | None:
    """A number as it was kept (NaN and infinities too); None for anything else (a bool included)."""
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def kept_text(value: object) -> str | None:
    return value if isinstance(value, str) else None


def kept_shares(value: object) -> dict[str, float | None] | None:
    """A name -> share object (each phase's share of the steps); None when it is not an object."""
    if not isinstance(value, Mapping):
        return None
    return {str(name): kept_float(share) for name, share in value.items()}
