"""The ssh command lines Rankwatch runs: argument lists for OpenSSH, remote commands quoted.

OpenSSH does the connecting, so whatever makes ``ssh node2`` work for the user (their
``~/.ssh/config`` with aliases, ProxyJump and keys, their ssh-agent, known_hosts)
works for Rankwatch too. ``BatchMode=yes`` means ssh never prompts: a node that
wants a password or has an unknown host key fails at once, with a message
``explain_ssh_failure`` turns into advice, instead of hanging a launch that runs in
the background.

On our side everything is an argument list; the one string ssh hands to the
node's login shell is built with ``shlex.quote``. ``RANKWATCH_SSH_OPTIONS`` adds
options to every ssh call (split like a shell would split them, never run by
one), e.g. ``-F /path/to/config``: tests use it to reach their own sshd with a
throwaway key and known_hosts, without touching ``~/.ssh``.
"""

from __future__ import annotations

import os
import shlex
import subprocess

from runner.profile.resolve import ResolvedNode

SSH_OPTIONS_VARIABLE = "RANKWATCH_SSH_OPTIONS"
SSH_PROGRAM = "ssh"
BASE_OPTIONS = (
    "-T",  # no terminal: stdin is a byte channel (the launch message, then control lines)
    "-o", "BatchMode=yes",  # never prompt: fail with a message instead
    "-o", "ConnectTimeout=10",
    "-o", "ServerAliveInterval=15",  # a vanished node is noticed within about a minute
    "-o", "ServerAliveCountMax=4",
)
RUNNER_MODULE = "runner"
"""``python -m runner``: Rankwatch's headless CLI on the node (it must be installed there)."""


class SshOptionsError(ValueError):
    """``RANKWATCH_SSH_OPTIONS`` cannot be split into arguments."""


def extra_options() -> list[str]:
    """Options from ``RANKWATCH_SSH_OPTIONS`` (empty when unset).

    Raises:
        SshOptionsError: unbalanced quotes.
    """
    text = os.environ.get(SSH_OPTIONS_VARIABLE, "")
    try:
        return shlex.split(text)
    except ValueError as error:
        raise SshOptionsError(f"{SSH_OPTIONS_VARIABLE}: {error}") from None


def destination_options(node: ResolvedNode) -> list[str]:
    """``-p PORT`` and ``-l USER`` when the node spec sets them (else ssh's config decides)."""
    options = []
    if node.ssh_port:
        options += ["-p", str(node.ssh_port)]
    if node.user:
        options += ["-l", node.user]
    return options


def ssh_argv(node: ResolvedNode, remote_command: str) -> list[str]:
    """``ssh [options] -- HOST COMMAND`` for ``node``.

    ``--`` keeps a host name that starts with ``-`` from being read as an option.

    Raises:
        SshOptionsError: ``RANKWATCH_SSH_OPTIONS`` is malformed.
    """
    return [SSH_PROGRAM, *BASE_OPTIONS, *extra_options(), *destination_options(node), "--", node.host, remote_command]


def remote_python_command(python: str, arguments: list[str], env: dict[str, str] | None = None) -> str:
    """The string the node's login shell runs: ``cd / && exec env K=V PYTHON ARGS...``.

    ``cd /`` first because ``python -m`` puts the current directory on ``sys.path``
    and a folder named ``runner`` in the home directory must not shadow Rankwatch.
    ``env`` sets variables for that process only (and works in every login shell).
    """
    assignments = [f"{key}={value}" for key, value in (env or {}).items()]
    words = ["env", *assignments, python, *arguments] if assignments else [python, *arguments]
    return "cd / && exec " + " ".join(shlex.quote(word) for word in words)


def ssh_target(node: ResolvedNode) -> str:
    """How a person would type the destination: ``[-p PORT ]user@host``."""
    target = f"{node.user}@{node.host}" if node.user else node.host
    return f"-p {node.ssh_port} {target}" if node.ssh_port else target


def last_error_line(stderr: str) -> str:
    """The line of ssh's (or the remote command's) stderr that says what went wrong."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    lines = [line for line in lines if not line.startswith("Warning: Permanently added")]
    return lines[-1] if lines else ""


def explain_ssh_failure(node: ResolvedNode, stderr: str) -> str:
    """One line: why ssh could not reach ``node``, and what to do about it."""
    detail = last_error_line(stderr) or "ssh failed without a message"
    target = ssh_target(node)
    if "Permission denied" in detail:
        advice = f"set up key-based login: ssh-copy-id {target}"
    elif "Host key verification failed" in detail or "host key" in detail.lower():
        advice = f"its host key is not known here yet: run `ssh {target}` once by hand to check and accept it"
    elif "Could not resolve hostname" in detail:
        advice = "check the host name (or add it to ~/.ssh/config)"
    elif "Connection refused" in detail:
        advice = f"is sshd running on {node.host}{f' (port {node.ssh_port})' if node.ssh_port else ''}?"
    elif "timed out" in detail or "No route to host" in detail or "Network is unreachable" in detail:
        advice = "check the network and the host name"
    else:
        advice = f"check that `ssh {target} true` works without a password"
    return f"cannot reach {node.host} over ssh ({detail}); {advice}"


def configured_hostname(node: ResolvedNode, timeout: float = 10.0) -> str:
    """The real host name ssh connects to for ``node`` (``ssh -G`` expands aliases from
    the user's config); the node's host as given when ssh cannot tell."""
    try:
        argv = [SSH_PROGRAM, "-G", "-T", *extra_options(), *destination_options(node), "--", node.host]
        result = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired, SshOptionsError):
        return node.host
    for line in result.stdout.splitlines():
        key, _, value = line.partition(" ")
        if key.lower() == "hostname" and value.strip():
            return value.strip()
    return node.host
