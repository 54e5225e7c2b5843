"""Before a Slurm run is submitted: would Slurm take it, and can Rankwatch run there?

A job that waits in the queue for an hour and then fails in a second is the worst
outcome on a cluster, so everything that can be known before submission is asked
first, where the job will be submitted (here, or on the login host over ssh):

* ``sbatch --test-only`` with the very script that will be submitted: Slurm's own
  verdict on the partition, the node count, the CPUs and GPUs per node, the time
  limit and the extra options (it submits nothing);
* ``python -m runner node-info`` in the job's interpreter: Rankwatch and torch are
  installed for it (Rankwatch in the runner's version), and the working directory
  and the script exist (a cluster shares them between login and compute nodes).

Each problem is one ``SpecError`` naming the field and the fix, as for every other
launch.
"""

from __future__ import annotations

import json
import shlex

from runner.profile.parse import SpecError
from runner.profile.resolve import ResolvedLaunch
from runner.remote.node_info import DISTRIBUTION, installed_version
from runner.remote.ssh import RUNNER_MODULE
from runner.slurm.client import SlurmClient, SlurmToolError, login_node
from runner.slurm.script import render_for_runner, slurm_table

SBATCH_FIELDS = (
    ("partition", "slurm.partition"),
    ("account", "slurm.account"),
    ("qos", "slurm.qos"),
    ("time limit", "slurm.time_limit"),
    ("gres", "slurm.gpus_per_node"),
    ("node count", "slurm.nodes"),
)
"""Words in sbatch's refusal -> the field it is about."""
NODE_CONFIGURATION = "Requested node configuration is not available"


def client_for(launch: ResolvedLaunch) -> SlurmClient:
    return SlurmClient(login_node(slurm_table(launch), launch.head.python, launch.head.workdir))


def preflight_slurm(launch: ResolvedLaunch) -> list[SpecError]:
    """Every reason Slurm or the cluster would refuse ``launch`` (empty when none)."""
    client = client_for(launch)
    where_field = "slurm.login_host" if client.login is not None else "slurm"
    try:
        errors = check_with_sbatch(client, launch)
        errors += check_interpreter(client, launch)
    except SlurmToolError as error:
        return [SpecError(where_field, str(error))]
    return errors


def check_with_sbatch(client: SlurmClient, launch: ResolvedLaunch) -> list[SpecError]:
    """Raises SlurmToolError when sbatch cannot be run at all."""
    result = client.run_sync(["sbatch", "--test-only"], stdin=render_for_runner(launch))
    if result.ok:
        return []
    lines = [line.strip() for line in result.stderr.splitlines() if line.strip()]
    reason = "; ".join(line.split("error:", 1)[-1].strip() for line in lines) or result.error_line()
    lowered = reason.lower()
    if NODE_CONFIGURATION.lower() in lowered:
        slurm = slurm_table(launch)
        asked = (f"{slurm.nodes} node(s) with {slurm.cpus_per_node or launch.head.processes} CPU(s)"
                 + (f" and {slurm.gpus_per_node} GPU(s)" if slurm.gpus_per_node else "") + " each"
                 + (" and the extra sbatch options" if slurm.sbatch_options else ""))
        return [SpecError("slurm.nodes", f"Slurm has no such nodes {client.where}: {asked} "
                                         f"({reason}); compare with `sinfo --Node --long`")]
    for word, field in SBATCH_FIELDS:
        if word in lowered:
            return [SpecError(field, f"sbatch refused it {client.where}: {reason}")]
    return [SpecError("slurm", f"sbatch refused the job {client.where}: {reason}")]


def check_interpreter(client: SlurmClient, launch: ResolvedLaunch) -> list[SpecError]:
    """Raises SlurmToolError when ssh to the login host fails."""
    python = launch.head.python
    arguments = [python, "-m", RUNNER_MODULE, "node-info", "--json", "--workdir", launch.head.workdir]
    if launch.spec.script and not launch.spec.module:
        arguments += ["--script", launch.spec.script]
    # From / so that a folder named "runner" where this started cannot shadow Rankwatch.
    result = client.run_sync(["sh", "-c", "cd / && exec " + shlex.join(arguments)])
    info = _parse_info(result.stdout)
    where = client.where
    if info is None:
        if f"No module named {RUNNER_MODULE}" in result.stderr:
            return [SpecError("interpreter", f"rankwatch is not installed for {python} {where}; install it "
                                             f"there: {python} -m pip install {DISTRIBUTION}")]
        if result.returncode in (126, 127) or "not found" in result.stderr or "No such file" in result.stderr:
            return [SpecError("interpreter", f"{python} was not found {where}; set interpreter to the cluster's "
                                             "Python with torch and Rankwatch (the same path on every node)")]
        return [SpecError("interpreter", f"{python} -m {RUNNER_MODULE} node-info failed {where}: "
                                         f"{result.error_line()}")]
    errors = []
    here = installed_version(DISTRIBUTION)
    if client.login is not None and here and info.get("rankwatch") and info["rankwatch"] != here:
        errors.append(SpecError("interpreter", f"Rankwatch {info['rankwatch']} is installed for {python} {where} "
                                               f"but {here} here; install the same version: "
                                               f"{python} -m pip install {DISTRIBUTION}=={here}"))
    if not info.get("torch"):
        errors.append(SpecError("interpreter", f"torch is not installed for {python} {where}; "
                                               f"install it there ({python} -m pip install torch)"))
    workdir = info.get("workdir") or {}
    if workdir and not workdir.get("exists"):
        errors.append(SpecError("workdir", f"{workdir.get('path')} does not exist {where} (the job runs there)"))
    script = info.get("script") or {}
    if script and workdir.get("exists") and not script.get("exists"):
        errors.append(SpecError("script", f"{script.get('path')} does not exist {where}; the compute nodes "
                                          "need it at that path"))
    return errors


def _parse_info(stdout: str) -> dict | None:
    for line in reversed(stdout.splitlines()):
        if line.startswith("{"):
            try:
                info = json.loads(line)
            except ValueError:
                return None
            return info if isinstance(info, dict) else None
    return None
