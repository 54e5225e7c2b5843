"""Nothing of a run outlives it, however it ends (issues 10 and 30).

Each rank (``tests/scripts/orphan_maker.py``) has a child that ignores SIGTERM and holds the
rank's output pipes: a helper, a server, a stuck DataLoader-like worker. torchrun waits only
for its ranks, so that child lives on with ppid 1 unless the run ends it: torchrun's keeper
(``runner.launch.keeper``) ends what torchrun left behind before it exits, whatever ended
torchrun, and SIGKILLs it after the grace period. Every ending must leave no process with the
run's marker 10 s later, print no asyncio traceback, and (when the runner lives) not sit out a
10 s wait for the held pipes. Real runners, real torchrun, one job per ending
(``tests/orphan_trials.py``; ``tests/bench/bench_kill_trials.py`` repeats them).
"""

from __future__ import annotations

import pytest

from runner.launch.supervisor import KEEPER_GRACE_SECONDS
from runner.store.liveness import effective_status
from runner.store.store import RunStore
from tests.orphan_trials import ENDINGS, SURVIVAL_LIMIT_SECONDS, run_trial

pytestmark = pytest.mark.torchrun

END_SLACK_SECONDS = 5.0
"""Beyond the keeper's grace period (a child that ignores SIGTERM is SIGKILLed then), how long the
runner may take from the job's end to its return: the last messages, triage, the store. A 10 s
wait for pipes held by the children would exceed it."""
EXPECTED = {
    "failure": (1, "failed"),
    "success": (0, "exited"),
    "torchrun_killed": (137, "failed"),
    "stop": (130, "stopped"),  # a Ctrl-C-stopped run's node was stopped, not failed
}
"""The runner's exit status and the node's recorded state, per ending the runner survives."""


@pytest.fixture(scope="module", autouse=True)
def _one_store():
    RunStore().close()  # made (and migrated) once


@pytest.mark.parametrize("ending", ENDINGS)
def test_no_process_of_the_run_outlives_it(ending):
    trial = run_trial(ending)
    assert trial.survivors == [], (
        f"{ending}: alive {SURVIVAL_LIMIT_SECONDS:.0f} s after the end: {trial.survivors}\n{trial.output}")
    assert trial.asyncio_tracebacks == [], trial.output
    if ending == "runner_and_sentinel_killed":
        with RunStore(readonly=True) as store:
            [run] = [run for run in store.runs(limit=100) if run.run_key == trial.run_key]
            assert effective_status(run) == "lost"  # its runner is gone: a reader sees the run as lost
        return
    assert (trial.exit_code, trial.node_state) == EXPECTED[ending], trial.output
    assert trial.end_seconds is not None and trial.end_seconds < KEEPER_GRACE_SECONDS + END_SLACK_SECONDS, (
        f"{ending}: the runner returned {trial.end_seconds:.1f} s after the job's end\n{trial.output}")
