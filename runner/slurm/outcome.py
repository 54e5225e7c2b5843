"""How a Slurm run ended, in the run's terms: its status, exit code and headline.

The runner's triage (``runner.diagnosis.triage``) explains what the ranks did. Slurm
adds what happened *to* the job, which only Slurm knows, and which must win over a
plausible-looking rank failure:

* ``TIMEOUT``, ``PREEMPTED``, ``DEADLINE`` and a ``CANCELLED`` that Rankwatch did not
  ask for ended the job from outside: the ranks were stopped, none of them failed.
  The headline says so, names Slurm's state and lists the ranks' states and steps.
* ``NODE_FAIL``, ``BOOT_FAIL`` and ``OUT_OF_MEMORY`` come before triage's headline
  (the first failed rank is still named).
* A job whose agents never connected back is explained by the runner's side
  (``failure``: compute nodes that cannot reach it, an interpreter missing there),
  with the end of Slurm's output file.

Every Slurm run's summary also carries ``slurm``: Slurm's own final record.
"""

from __future__ import annotations

import signal
from dataclasses import replace
from typing import Any

from runner.diagnosis.summary import RunSummary
from runner.slurm.states import ENDINGS, JobRecord
from runner.state import Outcome, RunStatus

ENDED_FROM_OUTSIDE = frozenset({"TIMEOUT", "PREEMPTED", "DEADLINE"})
"""The job was ended by Slurm's rules, not by a rank: the ranks count as stopped."""
PREFIXED = frozenset({"NODE_FAIL", "BOOT_FAIL", "OUT_OF_MEMORY"})
OUTCOMES = {state: Outcome(state.lower()).value for state in
            ("CANCELLED", "TIMEOUT", "PREEMPTED", "DEADLINE", "NODE_FAIL", "BOOT_FAIL", "OUT_OF_MEMORY")}
"""Slurm's state of a job it ended -> the summary's outcome (``runner.state.Outcome``)."""
EXIT_CANCELLED = 128 + signal.SIGTERM
"""``rankwatch run``'s exit code for a job cancelled from outside (as if it got SIGTERM)."""
EXIT_ENDED_BY_SLURM = 1


def ended_from_outside(record: JobRecord | None, cancel_requested: bool) -> bool:
    """Slurm ended the job (time limit, preemption, someone's scancel): no rank is to blame."""
    if record is None or not record.ended:
        return False
    return record.state in ENDED_FROM_OUTSIDE or (record.state == "CANCELLED" and not cancel_requested)


def describe_ranks(rows: list[Any]) -> str:
    """"rank 0 stopped at step 37, rank 1 stopped at step 38" (a summary for many ranks)."""
    if not rows:
        return "no rank had started"
    if len(rows) > 8:
        states: dict[str, int] = {}
        for row in rows:
            states[row.state] = states.get(row.state, 0) + 1
        steps = [row.step for row in rows if row.step is not None]
        where = f" (steps {min(steps)}-{max(steps)})" if steps else ""
        return ", ".join(f"{count} ranks {state}" for state, count in sorted(states.items())) + where
    parts = []
    for row in sorted(rows, key=lambda r: r.rank):
        at = f" at step {row.step}" if row.step is not None else " before its first step"
        parts.append(f"rank {row.rank} {row.state}{at}")
    return ", ".join(parts)


def conclude(summary: RunSummary, status: RunStatus, exit_code: int, *, record: JobRecord | None,
             job_id: str | None, cancel_requested: bool, failure: str | None, rank_rows: list[Any],
             output_tail: list[str], failed_node_code: int | None = None) -> tuple[RunSummary, RunStatus, int]:
    """The run's summary with Slurm's side of the end (a new value: ``summary`` is left as it is),
    and the run's status and exit code.

    ``failed_node_code`` is the exit status of torchrun on the node of the first failed rank:
    the run's exit code, rather than that of a node Slurm stopped afterwards (``srun
    --kill-on-bad-exit`` ends the other nodes when one fails).
    """
    if job_id is None:
        return summary, status, exit_code
    (outcome, headline), status, exit_code = _conclude(
        summary.outcome, summary.headline, status, exit_code, record=record, job_id=job_id,
        cancel_requested=cancel_requested, failure=failure, rank_rows=rank_rows, output_tail=output_tail,
        failed_node_code=failed_node_code)
    slurm = {"job_id": job_id, **(record.to_json() if record else {}), "output_tail": output_tail or None}
    return (replace(summary, outcome=outcome, headline=headline, exit_code=exit_code,
                    extra={**summary.extra, "slurm": slurm}), status, exit_code)


def _conclude(outcome: Outcome, headline: str, status: RunStatus, exit_code: int, *, record: JobRecord | None,
              job_id: str, cancel_requested: bool, failure: str | None, rank_rows: list[Any],
              output_tail: list[str], failed_node_code: int | None) -> tuple[tuple[Outcome, str], RunStatus, int]:
    """((outcome, headline), status, exit code) once Slurm's record of the end is taken into account."""
    name = f"Slurm job {job_id}"
    if failure is not None:
        tail = f"; its output ends with: {output_tail[-1]}" if output_tail else ""
        return (Outcome.FAILED, failure + tail), RunStatus.FAILED, exit_code or EXIT_ENDED_BY_SLURM
    if record is None or not record.ended:
        if status != RunStatus.SUCCEEDED:
            headline += f" ({name}: Slurm had not recorded the end when Rankwatch finished)"
        return (outcome, headline), status, exit_code
    state = record.state
    ranks = describe_ranks(rank_rows)
    if state == "CANCELLED" and cancel_requested:
        if not rank_rows:
            return ((outcome, f"stopped on request while pending in Slurm ({name} cancelled before it started)"),
                    status, exit_code)
        return (outcome, headline + f" ({name} cancelled)"), status, exit_code
    if ended_from_outside(record, cancel_requested):
        words = {"CANCELLED": "was cancelled outside Rankwatch (scancel by a user or an administrator)",
                 "TIMEOUT": f"reached its time limit ({record.time_limit}) after {record.run_time}",
                 "PREEMPTED": "was preempted (Slurm gave its nodes to a job of higher priority)",
                 "DEADLINE": "passed its deadline"}[state]
        ended = (Outcome(OUTCOMES[state]), f"{name} {words}; {ranks}")
        if state == "CANCELLED":
            return ended, RunStatus.STOPPED, EXIT_CANCELLED
        return ended, RunStatus.FAILED, exit_code or record.exit_status or EXIT_ENDED_BY_SLURM
    if status == RunStatus.FAILED and failed_node_code:
        exit_code = failed_node_code
    if state in PREFIXED:
        return ((Outcome(OUTCOMES[state]), f"{name}: {ENDINGS[state]} ({record.reason or state}); {headline}"),
                RunStatus.FAILED, exit_code or record.exit_status or EXIT_ENDED_BY_SLURM)
    if state == "COMPLETED" or (state == "FAILED" and status == RunStatus.FAILED):
        return (outcome, headline), status, exit_code
    return (outcome, headline + f" (Slurm: {record.describe()})"), status, exit_code

