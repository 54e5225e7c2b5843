"""More ranks than the machine has room for: allowed, but said before anything starts.

In CPU mode, more processes on the head node than it has cores give every rank less
than a core (torch's own threads compete too) and steps crawl. With GPUs and a backend
that allows it (gloo), more processes than picked GPUs put several ranks on one GPU.
Neither is an error (a person may mean it), so the launch form shows it as a warning
and `rankwatch run`/`command` print it; both word it here, once.
"""

from __future__ import annotations

from runner.profile.resolve import ResolvedLaunch


def cores_oversubscribed(launch: ResolvedLaunch, cpu_count: int) -> str | None:
    """In CPU mode, more processes on the head node than ``cpu_count`` cores: what to say."""
    processes = launch.head.processes
    if not launch.cpu_mode or not launch.head.is_local or processes <= cpu_count:
        return None
    return (f"{processes} processes on {cpu_count} CPU core{'s' if cpu_count != 1 else ''}: "
            f"each rank gets less than a core in CPU mode and steps will be slow; use at most {cpu_count}")


def gpus_oversubscribed(launch: ResolvedLaunch) -> str | None:
    """More processes on the head node than GPUs picked (NCCL refuses this: ``check_gpus``)."""
    processes = launch.head.processes
    if launch.cpu_mode or not launch.head.is_local or launch.self_spawn or processes <= len(launch.gpus):
        return None
    count = len(launch.gpus)
    return (f"{processes} processes on {count} GPU{'s' if count != 1 else ''}: ranks share a GPU "
            f"(its memory and compute); use at most {count}, or pick more GPUs")


def oversubscription_warnings(launch: ResolvedLaunch, cpu_count: int) -> list[str]:
    """Every over-subscription of this launch on the head machine (empty when it fits)."""
    return [warning for warning in (cores_oversubscribed(launch, cpu_count), gpus_oversubscribed(launch))
            if warning is not None]
