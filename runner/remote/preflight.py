"""Before a multi-node job starts: can every node run it?

A multi-node launch that fails on its third node leaves the first two waiting in
the rendezvous for minutes. So before anything starts, the head asks every remote
node, over the same ssh the launch will use, ``python -m runner node-info --json``
in the node's own interpreter (one round trip per node, all nodes at once), and
turns every problem into a one-line ``SpecError`` that names the field and the
fix: the node cannot be reached (and why, as ssh said), the interpreter is
missing, Rankwatch or torch is not installed for it, versions differ from the
head's, the working directory or script is missing there. Then the head checks
that it has an address the nodes can reach it at. (The rendezvous port on the
head is checked by ``runner.remote.rendezvous``.)

``probe_nodes`` returns the per-node facts too, for the GUI's node table.
"""

from __future__ import annotations

import json
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from runner.profile.parse import SpecError
from runner.profile.resolve import ResolvedLaunch, ResolvedNode
from runner.remote.addresses import HeadAddressError, agent_addresses, remote_nodes
from runner.remote.node_info import DISTRIBUTION, installed_version
from runner.remote.ssh import (
    RUNNER_MODULE,
    SSH_OPTIONS_VARIABLE,
    SshOptionsError,
    explain_ssh_failure,
    extra_options,
    last_error_line,
    remote_python_command,
    ssh_argv,
)

NODE_INFO_TIMEOUT_SECONDS = 45.0
SSH_FAILED = 255
VERSION_SCRIPT = "from importlib.metadata import version; print(version('torch'))"


@dataclass
class NodeReport:
    """What one remote node said, and what is wrong with it for this launch."""

    node: ResolvedNode
    info: dict[str, Any] | None = None
    errors: list[SpecError] = field(default_factory=list)


@dataclass(frozen=True)
class HeadVersions:
    rankwatch: str | None
    torch: str | None
    python: str
    """The head's interpreter for the job (where ``torch`` was read)."""


def preflight_nodes(launch: ResolvedLaunch) -> list[SpecError]:
    """Every reason a remote node of ``launch`` cannot run it (empty when all can)."""
    if not remote_nodes(launch):
        return []
    try:
        extra_options()
    except SshOptionsError as error:
        return [SpecError(SSH_OPTIONS_VARIABLE, str(error).split(": ", 1)[-1])]
    errors = [error for report in probe_nodes(launch) for error in report.errors]
    try:
        agent_addresses(launch)
    except HeadAddressError as error:
        errors.append(error)
    return errors


def probe_nodes(launch: ResolvedLaunch) -> list[NodeReport]:
    """Ask every remote node at once; one report per node, in node order."""
    nodes = remote_nodes(launch)
    head = head_versions(launch)
    with ThreadPoolExecutor(max_workers=min(8, len(nodes)), thread_name_prefix="rankwatch-preflight") as pool:
        return list(pool.map(lambda node: check_node(launch, node, head), nodes))


def head_versions(launch: ResolvedLaunch) -> HeadVersions:
    """Rankwatch here, and torch in the head's job interpreter (read from metadata: fast)."""
    python = launch.head.python
    torch = None
    if launch.head.is_local:
        try:
            result = subprocess.run([python, "-c", VERSION_SCRIPT], capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            result = None
        if result is not None and result.returncode == 0:
            torch = result.stdout.strip() or None
    return HeadVersions(rankwatch=installed_version(DISTRIBUTION), torch=torch, python=python)


def node_info_command(launch: ResolvedLaunch, node: ResolvedNode) -> list[str]:
    arguments = ["-m", RUNNER_MODULE, "node-info", "--json", "--workdir", node.workdir]
    if launch.spec.script and not launch.spec.module:
        arguments += ["--script", launch.spec.script]
    return ssh_argv(node, remote_python_command(node.python, arguments))


def check_node(launch: ResolvedLaunch, node: ResolvedNode, head: HeadVersions) -> NodeReport:
    """Run ``node-info`` on ``node`` over ssh and judge the answer."""
    report = NodeReport(node)
    prefix = f"nodes[{node.node_rank}]"
    try:
        result = subprocess.run(node_info_command(launch, node), capture_output=True, text=True,
                                stdin=subprocess.DEVNULL, timeout=NODE_INFO_TIMEOUT_SECONDS)
    except FileNotFoundError:
        report.errors.append(SpecError(f"{prefix}.host", "ssh is not installed here; install the OpenSSH client "
                                                         "(e.g. apt-get install openssh-client)"))
        return report
    except subprocess.TimeoutExpired:
        report.errors.append(SpecError(f"{prefix}.host", f"{node.host} did not answer over ssh within "
                                                         f"{NODE_INFO_TIMEOUT_SECONDS:.0f} s"))
        return report
    report.info = _parse_info(result.stdout)
    if report.info is None:
        report.errors.append(_explain_no_info(node, result.returncode, result.stderr))
        return report
    report.errors.extend(judge(launch, node, report.info, head))
    return report


def _parse_info(stdout: str) -> dict[str, Any] | None:
    for line in reversed(stdout.splitlines()):
        if line.startswith("{"):
            try:
                info = json.loads(line)
            except ValueError:
                return None
            return info if isinstance(info, dict) else None
    return None


def _explain_no_info(node: ResolvedNode, returncode: int, stderr: str) -> SpecError:
    prefix = f"nodes[{node.node_rank}]"
    if returncode == SSH_FAILED:
        return SpecError(f"{prefix}.host", explain_ssh_failure(node, stderr))
    python = node.python
    if f"No module named {RUNNER_MODULE}" in stderr:
        return SpecError(f"{prefix}.python", f"rankwatch is not installed for {python} on {node.host}; "
                                             f"install it there: {python} -m pip install {DISTRIBUTION}")
    if returncode in (126, 127) or "not found" in stderr or "No such file" in stderr:
        return SpecError(f"{prefix}.python", f"{python} was not found on {node.host} (or is not executable); "
                                             "set python for this node to an interpreter with torch and Rankwatch")
    detail = last_error_line(stderr) or f"exit status {returncode}"
    return SpecError(f"{prefix}.python", f"{python} -m {RUNNER_MODULE} node-info failed on {node.host}: {detail}")


def judge(launch: ResolvedLaunch, node: ResolvedNode, info: dict[str, Any], head: HeadVersions) -> list[SpecError]:
    """What in a node's answer stops this launch."""
    prefix = f"nodes[{node.node_rank}]"
    python, host = node.python, node.host
    errors: list[SpecError] = []
    if head.rankwatch and info.get("rankwatch") and info["rankwatch"] != head.rankwatch:
        errors.append(SpecError(f"{prefix}.python", (
            f"Rankwatch {info['rankwatch']} is installed for {python} on {host} but {head.rankwatch} here; "
            f"install the same version on every node: {python} -m pip install {DISTRIBUTION}=={head.rankwatch}")))
    if not info.get("torch"):
        errors.append(SpecError(f"{prefix}.python", f"torch is not installed for {python} on {host}; "
                                                    f"install it there: {python} -m pip install torch"))
    elif head.torch and _release(info["torch"]) != _release(head.torch):
        errors.append(SpecError(f"{prefix}.python", (
            f"torch {info['torch']} on {host} but {head.torch} on the head ({head.python}); torchrun's rendezvous "
            "needs the same torch release on every node")))
    workdir = info.get("workdir") or {}
    if workdir and not workdir.get("exists"):
        errors.append(SpecError(f"{prefix}.workdir", f"{workdir.get('path')} does not exist on {host}"))
    script = info.get("script") or {}
    if script and workdir.get("exists") and not script.get("exists"):
        errors.append(SpecError("script", f"{script.get('path')} does not exist on {host} (node {node.node_rank}); "
                                          "copy the code there or give a path that exists on every node"))
    return errors


def _release(version: str) -> tuple[str, ...]:
    """Major and minor: 2.4.1+cu121 and 2.4.0+cpu both speak torch 2.4's rendezvous."""
    return tuple(version.split("+", 1)[0].split(".")[:2])
