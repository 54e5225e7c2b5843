"""Slurm's compact host lists (``n[1-2]``, ``gpu[01-03,07],login1``) as node names.

Slurm writes an allocation's nodes this way in ``SLURM_JOB_NODELIST``, ``squeue`` and
``scontrol``. Expanding it here (instead of asking ``scontrol show hostnames``) is
one less round trip to the cluster for every state change.
"""

from __future__ import annotations

import re

RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")


class HostListError(ValueError):
    """Not a Slurm host list."""


def expand(host_list: str) -> list[str]:
    """Every node name in ``host_list``, in Slurm's order.

    Raises:
        HostListError: unbalanced brackets or a malformed range.
    """
    names: list[str] = []
    for item in _split_top_level(host_list.strip()):
        names.extend(_expand_item(item))
    return names


def _split_top_level(text: str) -> list[str]:
    """Split on commas outside brackets."""
    items, depth, start = [], 0, 0
    for index, character in enumerate(text):
        if character == "[":
            depth += 1
        elif character == "]":
            depth -= 1
            if depth < 0:
                raise HostListError(f"unbalanced ']' in {text!r}")
        elif character == "," and depth == 0:
            items.append(text[start:index])
            start = index + 1
    if depth != 0:
        raise HostListError(f"unbalanced '[' in {text!r}")
    items.append(text[start:])
    return [item for item in items if item]


def _expand_item(item: str) -> list[str]:
    """``prefix[ranges]rest``: every number of the ranges, each followed by every expansion of rest."""
    opening = item.find("[")
    if opening < 0:
        return [item]
    closing = item.index("]", opening)
    prefix, ranges, rest = item[:opening], item[opening + 1:closing], item[closing + 1:]
    tails = _expand_item(rest)
    names: list[str] = []
    for part in ranges.split(","):
        match = RANGE.match(part.strip())
        if match is None:
            raise HostListError(f"{part!r} is not a number or a range in {item!r}")
        low_text, high_text = match.group(1), match.group(2) or match.group(1)
        width = len(low_text)  # "01-03" keeps its zero padding
        low, high = int(low_text), int(high_text)
        if high < low:
            raise HostListError(f"range {part!r} runs backwards in {item!r}")
        for number in range(low, high + 1):
            names.extend(f"{prefix}{number:0{width}d}{tail}" for tail in tails)
    return names
