"""Which run a command means when RUN is left out: the live one, as a person would.

`attach` and `stacks` without RUN take the one live run (else the last run, live or
not: its stored view); `stop` without RUN stops the one live run, and with none or
several says so rather than guess. Both choose here, the same way.
"""

from __future__ import annotations

from runner.rows import StoredRun
from runner.store.liveness import runner_alive
from runner.store.store import RunNotFound, RunStore

LIVE_RUNS_LOOKED_AT = 1000


class NoLiveRun(RunNotFound):
    """RUN was left out and no run is live."""


class SeveralLiveRuns(RunNotFound):
    """RUN was left out and more than one run is live: the message lists them."""


def live_runs(store: RunStore) -> list[StoredRun]:
    """The runs whose runner is alive now, newest first (a run without an end whose runner
    died is lost, not live)."""
    return [run for run in store.runs(limit=LIVE_RUNS_LOOKED_AT, live_only=True) if runner_alive(run)]


def chosen_run(store: RunStore, given: str | None, *, command: str, live_only: bool = False) -> StoredRun:
    """The run ``given`` names ('last', 'last-N', an id); when None, the one live run, or, unless
    ``live_only``, the last run when none or several are live.

    Raises:
        RunNotFound: no such run, or no runs recorded.
        NoLiveRun: ``live_only``, RUN left out, and nothing is live.
        SeveralLiveRuns: ``live_only``, RUN left out, and more than one run is live.
    """
    if given is not None:
        return store.stored_run(store.resolve_run_id(given))
    live = live_runs(store)
    if len(live) == 1:
        return live[0]
    if not live_only:
        return store.stored_run(store.resolve_run_id("last"))
    if not live:
        raise NoLiveRun(f"no run is live, so there is nothing to {command}; "
                        "`rankwatch runs list` shows the runs recorded")
    ids = ", ".join(str(run.id) for run in live)
    raise SeveralLiveRuns(f"{len(live)} runs are live ({ids}); say which: `rankwatch {command} {live[0].id}`")
