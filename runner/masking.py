"""Secrets kept out of what Rankwatch shows and records for display.

A launch's environment often carries credentials (``HF_TOKEN``, ``WANDB_API_KEY``,
``AWS_SECRET_ACCESS_KEY``). The job needs their values, so the processes Rankwatch starts
get them as given; but the run's record for people (the command line stored with the run,
the launch spec stored and published with it) shows ``***`` in their place, as CI systems
do. Masking where the run is recorded covers every reader: ``runs show`` (and ``--json``),
``runs list --json``, the CSV export, the GUI and any attached client.

A variable looks secret when its name holds ``TOKEN``, ``KEY``, ``SECRET`` or ``PASSWORD``
(any case). Standard library only.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

SECRET_WORDS = ("TOKEN", "KEY", "SECRET", "PASSWORD")
MASK = "***"


def looks_secret(name: str) -> bool:
    """Whether an environment variable's name says it holds a secret."""
    upper = name.upper()
    return any(word in upper for word in SECRET_WORDS)


def masked_env(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` with every value of a variable that looks secret replaced by ``MASK`` (an empty
    value stays empty: there is nothing to hide, and "set but empty" stays visible)."""
    return {name: MASK if value and looks_secret(name) else value for name, value in env.items()}


def masked_pairs(pairs: Iterable[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
    """``masked_env`` for a spec's ``(name, value)`` pairs, in their order."""
    return tuple(masked_env(dict(pairs)).items())
