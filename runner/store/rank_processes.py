"""Which run, and which rank of it, a process on this machine belongs to: `rankwatch gpus` names them.

Every process of a run carries the run's marker in its environment (``RANKWATCH_RUN_KEY``,
``runner.processes``), and the store knows each rank's pid (from its hello). A
process belongs to a run when it carries the marker of a run whose runner is alive
(``runner.store.liveness``); it is a rank when its pid is that rank's. The marker is what
makes the pid trustworthy: a rank's pid on another node, or a pid the kernel gave to another
process after the rank ended, is not the process here, which does not carry the marker.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from runner.processes import MARKER_VARIABLE
from runner.store.liveness import runner_alive
from runner.store.store import RunStore

LIVE_RUNS_LIMIT = 1000
"""Runs without a recorded end read from the store (lost ones among them are left out by liveness)."""


@dataclass(frozen=True)
class RunProcess:
    run: int
    rank: int | None
    """None: a process of the run that is not a rank's own (a DataLoader worker, a child of a rank)."""
    profile: str | None

    def describe(self) -> str:
        """``rank 0 of run 3 (train)``, or ``a process of run 3`` when it is no rank's own."""
        who = f"rank {self.rank} of run {self.run}" if self.rank is not None else f"a process of run {self.run}"
        return f"{who} ({self.profile})" if self.profile else who


def run_key_of(pid: int) -> str | None:
    """The run marker process ``pid`` carries; None without one, or when its environment cannot be
    read (gone, or another user's: not of a run of ours)."""
    prefix = f"{MARKER_VARIABLE}=".encode()
    try:
        with open(f"/proc/{pid}/environ", "rb") as handle:
            environ = handle.read()
    except OSError:
        return None
    for entry in environ.split(b"\0"):
        if entry.startswith(prefix):
            return entry[len(prefix):].decode(errors="replace") or None
    return None


def run_processes(store: RunStore, pids: Iterable[int]) -> dict[int, RunProcess]:
    """pid -> the live run (and rank) it belongs to, for those of ``pids`` that belong to one."""
    keys = {pid: key for pid in set(pids) if (key := run_key_of(pid)) is not None}
    if not keys:
        return {}
    runs = {run.run_key: run for run in store.runs(limit=LIVE_RUNS_LIMIT, live_only=True)
            if run.run_key in keys.values() and runner_alive(run)}
    found: dict[int, RunProcess] = {}
    ranks_by_run: dict[int, dict[int, int]] = {}
    for pid, key in keys.items():
        run = runs.get(key)
        if run is None:
            continue
        ranks = ranks_by_run.get(run.id)
        if ranks is None:
            ranks = ranks_by_run[run.id] = {row.pid: row.rank for row in store.ranks(run.id) if row.pid}
        found[pid] = RunProcess(run=run.id, rank=ranks.get(pid), profile=run.profile)
    return found
