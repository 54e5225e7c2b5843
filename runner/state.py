"""Run state: what is happening (the spec says what was asked for).

The values are strings so they travel unchanged through the store, the protocol
and the GUI.
"""

from __future__ import annotations

from enum import Enum


class RunStatus(str, Enum):
    """A run's life::

        STARTING --torchrun started--> RUNNING --torchrun exit 0--------> SUCCEEDED
            |                            |      --torchrun exit != 0---> FAILED
            |                            +--stop asked--> STOPPING --> STOPPED
            +--spec/launch error---------------------------------------> FAILED
            +--queued (Slurm)--> PENDING --allocated--> RUNNING
                                    +--cancelled while queued--> STOPPING --> STOPPED

    ``PENDING``: waiting in a scheduler's queue; the run's events say why (Slurm's
    reason) and where in the queue (``runner.slurm``).

    ``LOST`` marks a run whose runner died without recording an end (found later
    by a reader: the runner's pid is gone but ``ended`` is empty).
    """

    STARTING = "starting"
    PENDING = "pending"
    RUNNING = "running"
    STOPPING = "stopping"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    STOPPED = "stopped"
    LOST = "lost"

    @property
    def finished(self) -> bool:
        return self in (RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.STOPPED, RunStatus.LOST)


class RankState(str, Enum):
    """One rank's life::

        WAITING --hello--> RUNNING <--progress again-- STALLED
                             |   \\--no progress for the stall timeout--^
                             +--exit 0--> EXITED
                             +--exception / exit != 0 / signal--> FAILED
                             +--ended because another rank failed (the launcher's SIGTERM, or a peer
                             |  went away: runner.exit_status)--> STOPPED
                             +--its node dropped out--> LOST

    WAITING covers ranks known from the plan (or from their output) that have not
    said hello yet, e.g. still importing torch.
    """

    WAITING = "waiting"
    RUNNING = "running"
    STALLED = "stalled"
    EXITED = "exited"
    FAILED = "failed"
    STOPPED = "stopped"
    LOST = "lost"

    @property
    def finished(self) -> bool:
        return self in (RankState.EXITED, RankState.FAILED, RankState.STOPPED, RankState.LOST)


class NodeState(str, Enum):
    """A node of a multi-node job: PREFLIGHT -> STARTING -> RUNNING -> EXITED | FAILED | STOPPED | LOST.

    ``STOPPED``: the run was stopped on request (Ctrl-C, ``rankwatch stop``, the GUI) and the
    node's torchrun ended of that stop, not of a failure of its own.
    """

    PREFLIGHT = "preflight"
    STARTING = "starting"
    RUNNING = "running"
    EXITED = "exited"
    FAILED = "failed"
    STOPPED = "stopped"
    LOST = "lost"


class Outcome(str, Enum):
    """How a run ended, as its summary says it (``summary["outcome"]``, ``RunSummary.outcome``).

    ``SUCCEEDED``, ``FAILED`` and ``STOPPED`` as the run's status; ``LOST``: the runner died and its
    watchdog recorded the end (``runner.store.lost_run``); the others are Slurm ending the job
    from outside (``runner.slurm.outcome``): its time limit, a preemption, someone's scancel, ...
    """

    SUCCEEDED = "succeeded"
    FAILED = "failed"
    STOPPED = "stopped"
    LOST = "lost"
    CANCELLED = "cancelled"
    TIMEOUT = "timeout"
    PREEMPTED = "preempted"
    DEADLINE = "deadline"
    NODE_FAIL = "node_fail"
    BOOT_FAIL = "boot_fail"
    OUT_OF_MEMORY = "out_of_memory"
