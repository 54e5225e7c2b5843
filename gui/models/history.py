"""The runs list and run comparisons, from what the run store recorded (Qt-free).

The store is the record of truth: a run whose ``ended`` is empty and whose runner
process is alive is live (the GUI can attach to its socket); one whose runner is
gone without recording an end is shown as ``lost``.

Nothing here reads the store: the gateway's store reader does, off the GUI thread
(``gui.gateway.store_reads``: the runs with their liveness, a run's loss rows), and
these functions turn its rows into what the runs list and the overlay show.
"""

from __future__ import annotations

import functools
import math
import shlex
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import PurePath
from typing import Any

from gui.gateway.run_state import RunInfo
from gui.gateway.store_reads import ListedRun, RunFigures

HISTORY_COLUMNS = ("Run", "Profile", "Script", "Tags", "Started", "Duration", "Status", "Outcome", "Exit",
                   "Final loss", "Best loss", "Steps", "Samples/s", "Ranks", "Host")
NUMERIC_COLUMNS = frozenset({"Run", "Duration", "Exit", "Final loss", "Best loss", "Steps", "Samples/s", "Ranks"})
"""Right-aligned, as numbers are in a table."""
NOT_MEASURED = "–"
"""A finished run whose exit status was never recorded (its runner died)."""
POLL_INTERVAL_S = 2.0
RUN_LIMIT = 500


@functools.lru_cache(maxsize=2048)
def entry_of(spec_toml: str | None) -> str:
    """``train.py --epochs 3`` or ``-m pkg.train``, from a stored spec (empty when unreadable).

    A spec is parsed once (the runs list is polled every few seconds)."""
    if not spec_toml:
        return ""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # Python 3.10
        import tomli as tomllib
    try:
        table = tomllib.loads(spec_toml)
    except (ValueError, TypeError):
        return ""
    if table.get("module"):
        entry = ["-m", str(table["module"])]
    elif table.get("script"):
        entry = [PurePath(str(table["script"])).name]
    else:
        return ""
    return shlex.join(entry + [str(arg) for arg in table.get("args") or []])


@dataclass(frozen=True)
class RunRow:
    run_id: int
    profile: str | None
    status: str
    """The stored status, or ``lost`` when the runner died without recording an end."""
    created: float
    started: float | None
    ended: float | None
    exit_code: int | None
    world_size: int | None
    host: str | None
    live: bool
    socket: str | None
    script: str = ""
    """What ran: the script (or ``-m module``) and its arguments, from the stored spec."""
    tags: tuple[str, ...] = ()
    notes: str = ""
    outcome: str = ""
    """What triage concluded (the stored summary's ``outcome``); empty while it runs."""
    figures: RunFigures = field(default_factory=RunFigures)
    """``None`` where not measured (``runner.store.run_figures``)."""

    @classmethod
    def from_store(cls, listed: ListedRun) -> RunRow:
        """From the store's row with its liveness (``StoreReads.with_liveness``)."""
        run = listed.run
        return cls(run_id=listed.id, profile=run.profile, status=listed.effective_status,
                   created=run.created or 0.0, started=run.started, ended=run.ended, exit_code=run.exit_code,
                   world_size=run.world_size, host=run.host, live=listed.live, socket=run.socket,
                   script=entry_of(run.spec_toml), tags=run.tags, notes=run.notes or "",
                   outcome=_outcome_of(run.summary), figures=listed.figures)

    def duration(self, now: float | None = None) -> float | None:
        start = self.started or self.created
        if not start:
            return None
        end = self.ended if self.ended is not None else (time.time() if now is None else now) if self.live else None
        return None if end is None else max(0.0, end - start)


def _outcome_of(summary: Mapping[str, Any] | None) -> str:
    """The stored summary's outcome (``succeeded``, ``failed``, ``stopped``...) as recorded, empty
    without one: its one key the list shows (the runs list is polled; the whole summary is decoded,
    ``RunSummary.from_wire``, where it is shown)."""
    return str(summary.get("outcome") or "") if summary is not None else ""


def _duration_text(seconds: float | None) -> str:
    if seconds is None:
        return ""
    seconds = round(seconds)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def _figure_text(value: float | None) -> str:
    """Four significant digits, as the charts' readout writes values; "–" when not measured."""
    if value is None or not math.isfinite(value):
        return NOT_MEASURED
    magnitude = abs(value)
    if magnitude != 0 and (magnitude < 1e-3 or magnitude >= 1e6):
        return f"{value:.3e}"
    if magnitude >= 1000:
        return f"{value:,.0f}"
    return f"{value:.4g}"


def history_cells(row: RunRow, now: float | None = None) -> tuple[str, ...]:
    """Texts of one runs-list row, in :data:`HISTORY_COLUMNS` order."""
    start = row.started or row.created
    started = time.strftime("%Y-%m-%d %H:%M", time.localtime(start)) if start else ""
    status = f"{row.status} (live)" if row.live else row.status
    figures = row.figures
    return (str(row.run_id), row.profile or "", row.script, ", ".join(row.tags), started,
            _duration_text(row.duration(now)), status, row.outcome,
            ("" if row.live else NOT_MEASURED) if row.exit_code is None else str(row.exit_code),
            _figure_text(figures.final_loss), _figure_text(figures.best_loss),
            NOT_MEASURED if figures.steps is None else f"{figures.steps:,}", _figure_text(figures.samples_per_s),
            "" if row.world_size is None else str(row.world_size), row.host or "")


def _number_key(value: float | None) -> float:
    """Not measured sorts below every number."""
    return -math.inf if value is None or not math.isfinite(value) else float(value)


def history_sort_keys(row: RunRow, now: float | None = None) -> tuple[Any, ...]:
    duration = row.duration(now)
    figures = row.figures
    return (row.run_id, row.profile or "", row.script, ", ".join(row.tags).lower(), row.started or row.created,
            -1.0 if duration is None else duration, row.status, row.outcome,
            -(10**9) if row.exit_code is None else row.exit_code, _number_key(figures.final_loss),
            _number_key(figures.best_loss), _number_key(figures.steps), _number_key(figures.samples_per_s),
            row.world_size or 0, row.host or "")


def matches_filter(row: RunRow, text: str) -> bool:
    """Whether ``row`` is shown under the filter ``text``: every word of it is found (any case) in
    the run id, profile, script, status, outcome or a tag, as W&B's runs search does."""
    words = text.lower().split()
    if not words:
        return True
    haystack = " ".join((str(row.run_id), row.profile or "", row.script, row.status, row.outcome,
                         " ".join(row.tags), "live" if row.live else "")).lower()
    return all(word in haystack for word in words)


def run_title(run: RunInfo, spec_toml: str | None = None) -> str:
    """``Run 12 · alpha · train.py --epochs 3 · succeeded``: what a picture of run ``run`` (its
    stored row, launched with ``spec_toml``) is titled."""
    parts = [f"Run {run.id}", run.profile or "", entry_of(spec_toml), run.status or ""]
    return " · ".join(part for part in parts if part)
