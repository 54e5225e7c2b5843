"""Slurm's own client tools, run on this machine or on the login host over ssh.

Everything Rankwatch asks of Slurm goes through its documented commands (``sbatch``,
``squeue``, ``scontrol``, ``scancel``, ``sacct``, ``sinfo``), never its internals, so
whatever the cluster's Slurm version and site configuration accept by hand works
the same here. Over ssh the command runs in the login host's shell as one quoted
line (``runner.remote.ssh``: argument lists here, ``shlex.quote`` there).
"""

from __future__ import annotations

import asyncio
import contextlib
import shlex
import subprocess
from dataclasses import dataclass

from runner.profile.resolve import ResolvedNode
from runner.profile.spec import SlurmSpec
from runner.remote.ssh import SshOptionsError, explain_ssh_failure, last_error_line, ssh_argv

COMMAND_TIMEOUT_SECONDS = 60.0
SSH_FAILED = 255
NOT_FOUND = 127


class SlurmToolError(OSError):
    """A Slurm command could not be run or did not answer (the message says why and what to do)."""


@dataclass(frozen=True)
class CommandResult:
    returncode: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    def error_line(self) -> str:
        return last_error_line(self.stderr) or f"exit status {self.returncode}"


def login_node(slurm: SlurmSpec, python: str, workdir: str) -> ResolvedNode | None:
    """The login host as the ssh layer knows nodes; ``None`` when submitting from here."""
    if slurm.login_host is None:
        return None
    return ResolvedNode(node_rank=0, host=slurm.login_host, processes=0, python=python, workdir=workdir,
                        user=slurm.login_user, ssh_port=slurm.login_port)


class SlurmClient:
    def __init__(self, login: ResolvedNode | None = None, timeout: float = COMMAND_TIMEOUT_SECONDS):
        self.login = login
        self.timeout = timeout

    @property
    def where(self) -> str:
        """How messages name the place the commands run."""
        return "here" if self.login is None else f"on {self.login.host}"

    def argv(self, command: list[str]) -> list[str]:
        """The argument list that runs ``command`` here, or on the login host over ssh.

        Raises:
            SlurmToolError: ``RANKWATCH_SSH_OPTIONS`` is malformed.
        """
        if self.login is None:
            return list(command)
        try:
            return ssh_argv(self.login, shlex.join(command))
        except SshOptionsError as error:
            raise SlurmToolError(str(error)) from None

    async def run(self, command: list[str], stdin: bytes | None = None, timeout: float | None = None,
                  check: bool = False) -> CommandResult:
        """Run ``command``; with ``check``, a non-zero status raises.

        Raises:
            SlurmToolError: the tool is not installed, ssh failed, it timed out, or
                (``check``) it reported an error.
        """
        argv = self.argv(command)
        try:
            process = await asyncio.create_subprocess_exec(
                *argv, stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        except FileNotFoundError:
            raise SlurmToolError(self._not_installed(argv[0])) from None
        try:
            stdout, stderr = await asyncio.wait_for(process.communicate(stdin), timeout or self.timeout)
        except asyncio.TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()
            raise SlurmToolError(f"{command[0]} did not answer {self.where} within "
                                 f"{timeout or self.timeout:.0f} s") from None
        code = await process.wait()  # at once: communicate() has seen the process end
        result = CommandResult(code, stdout.decode(errors="replace"), stderr.decode(errors="replace"))
        return self._checked(command, result) if check else self._reachable(command, result)

    def run_sync(self, command: list[str], stdin: str | None = None, timeout: float | None = None,
                 check: bool = False) -> CommandResult:
        """``run`` for code outside the event loop (preflight)."""
        argv = self.argv(command)
        try:
            done = subprocess.run(argv, capture_output=True, text=True, input=stdin,
                                  stdin=subprocess.DEVNULL if stdin is None else None,
                                  timeout=timeout or self.timeout)
        except FileNotFoundError:
            raise SlurmToolError(self._not_installed(argv[0])) from None
        except subprocess.TimeoutExpired:
            raise SlurmToolError(f"{command[0]} did not answer {self.where} within "
                                 f"{timeout or self.timeout:.0f} s") from None
        result = CommandResult(done.returncode, done.stdout, done.stderr)
        return self._checked(command, result) if check else self._reachable(command, result)

    def _reachable(self, command: list[str], result: CommandResult) -> CommandResult:
        """ssh that could not connect, or a tool missing there, is never an answer."""
        if self.login is not None and result.returncode == SSH_FAILED:
            raise SlurmToolError(explain_ssh_failure(self.login, result.stderr))
        if result.returncode == NOT_FOUND and ("not found" in result.stderr or not result.stderr.strip()):
            raise SlurmToolError(self._not_installed(command[0]))
        return result

    def _checked(self, command: list[str], result: CommandResult) -> CommandResult:
        result = self._reachable(command, result)
        if not result.ok:
            raise SlurmToolError(f"{command[0]} failed {self.where}: {result.error_line()}")
        return result

    def _not_installed(self, program: str) -> str:
        if self.login is None:
            if program == "ssh":
                return "ssh is not installed here; install the OpenSSH client (e.g. apt-get install openssh-client)"
            return (f"{program} is not installed here, so this machine is not a Slurm login node; "
                    "set slurm.login_host (--login-host) to submit over ssh from a login node")
        return (f"{program} was not found on {self.login.host}; is it a Slurm login node "
                "(does `ssh {self.login.host} {program} --version` work)?")
