"""Start torchrun for one node, follow its output, and stop it and all it started.

torchrun runs under its keeper (``runner.launch.keeper``, a single-threaded parent that
passes a stop on exactly once), in a session of its own (so a Ctrl-C in the runner's
terminal reaches the runner, which then stops the job in order), with a parent-death
signal on the keeper (so a killed runner takes the run down with it), and with the
user's own umask (the runner's is 077; the workers, which inherit torchrun's, write the
user's files).

The workers' output arrives through pipes handed out on the node's ``WorkerOutput``
socket, one per rank and stream, already attributed. torchrun's own stdout and stderr (its log
lines, and a worker's output from before its bootstrap took over its descriptors)
are read in chunks, not lines, so a progress bar without newlines cannot stall the
reader; the ``RankLineSplitter``s turn chunks into lines.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import secrets
import shutil
import signal
import sys
import time
from collections.abc import Callable

from runner import paths, priority, privacy
from runner.launch.command import NodeCommand
from runner.launch.output import OutputLine, RankLineSplitter
from runner.launch.process_tree import NODE_VARIABLE, end_job, parent_death_signal_for
from runner.launch.worker_output import WorkerOutput

READ_CHUNK = 64 * 1024
STALE_PARTIAL_CHECK_SECONDS = 0.5
TORCHRUN_SHUTDOWN_SECONDS = 5
"""torchrun's grace period between SIGTERM and SIGKILL for its workers (its default is 30 s),
unless the user set ``TORCH_ELASTIC_SHUTDOWN_TIMEOUT``. Should the runner, its sentinel and
torchrun's keeper all be killed, torchrun (SIGTERMed once by the keeper's death) is the only
one left to end the workers, and a worker that ignores SIGTERM (a user's handler, a
checkpoint on preemption) must not outlive the run by half a minute. The runner's own stops
wait as long (``STOP_GRACE_SECONDS``). torch older than 2.11 ignores the variable."""
SHUTDOWN_TIMEOUT_VARIABLE = "TORCH_ELASTIC_SHUTDOWN_TIMEOUT"
KEEPER_GRACE_SECONDS = TORCHRUN_SHUTDOWN_SECONDS + 1
"""After a stop, torchrun's keeper SIGKILLs whatever of the run is left this much later: a
second after torchrun's own deadline, whatever the torch version."""
OUTPUT_DRAIN_SECONDS = 2.0
"""After torchrun's keeper exits, and with it every process of the node's job (the keeper ends
what torchrun left behind, ``runner.launch.keeper``): how long its and the workers' output
pipes may take to end. Only a process that dropped the job's marker can still hold one open;
what it already wrote is read either way."""


def compose_environment(command: NodeCommand, worker_path: str | None = None) -> dict[str, str]:
    """The inherited environment, minus any Rankwatch variables of an enclosing job (and the
    runner's own, such as the user's recorded umask), plus the command's variables, a
    bounded torchrun shutdown unless the user chose one, with the worker modules first on
    PYTHONPATH."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RANKWATCH_")}
    env.update(command.env)
    env.setdefault(SHUTDOWN_TIMEOUT_VARIABLE, str(TORCHRUN_SHUTDOWN_SECONDS))
    worker_path = worker_path or str(paths.WORKER_PATH)
    existing = env.get("PYTHONPATH")
    env["PYTHONPATH"] = worker_path + (os.pathsep + existing if existing else "")
    return env


def keeper_command(argv: tuple[str, ...] | list[str], env: dict[str, str]) -> list[str]:
    """torchrun's command, started through its keeper (``runner.launch.keeper``: a
    single-threaded parent that passes a stop on to torchrun exactly once)."""
    return [sys.executable, "-m", "runner.launch.keeper", str(KEEPER_GRACE_SECONDS), env.get("PYTHONPATH", ""),
            "--", *argv]


def keeper_environment(env: dict[str, str]) -> dict[str, str]:
    """torchrun's environment, with Rankwatch's own modules importable for the keeper
    (which gives torchrun its own ``PYTHONPATH`` back)."""
    existing = env.get("PYTHONPATH")
    return {**env, "PYTHONPATH": str(paths.REPO_ROOT) + (os.pathsep + existing if existing else "")}


def exit_status(returncode: int) -> int:
    """A shell-style exit status: 128 + N for death by signal N."""
    return 128 - returncode if returncode < 0 else returncode


class TorchrunSupervisor:
    def __init__(self, command: NodeCommand, run_key: str, on_lines: Callable[[list[OutputLine]], None]):
        self.command = command
        self.run_key = run_key
        self.on_lines = on_lines
        self.process: asyncio.subprocess.Process | None = None
        self.returncode: int | None = None
        self._splitters = {"stdout": RankLineSplitter("stdout"), "stderr": RankLineSplitter("stderr")}
        self._readers: list[asyncio.Task] = []
        self._output: WorkerOutput | None = None
        self._stopping = False

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    async def start(self) -> int:
        """Start torchrun; returns its pid.

        Raises:
            OSError: the interpreter cannot be executed (missing, not executable), or the
                workers' output socket cannot be made.
        """
        env = compose_environment(self.command)
        interpreter = self.command.argv[0]
        if os.sep in interpreter:  # a path: relative to torchrun's working directory, as exec takes it
            interpreter = os.path.join(self.command.cwd, interpreter)
        if shutil.which(interpreter, path=env.get("PATH")) is None:  # the keeper would only exit 127
            raise FileNotFoundError(errno.ENOENT, "no such interpreter, or not executable", self.command.argv[0])
        self._output = output = WorkerOutput(paths.socket_dir() / f"out-{secrets.token_hex(6)}.sock", self.on_lines)
        await output.start()
        env.update(output.environment)
        try:
            self.process = process = await asyncio.create_subprocess_exec(
                *keeper_command(self.command.argv, env),
                cwd=self.command.cwd,
                env=keeper_environment(env),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                start_new_session=True,
                preexec_fn=priority.for_child(parent_death_signal_for(os.getpid())),  # the user's scheduling
                umask=privacy.user_umask(),
            )
        except BaseException:
            await output.close()
            raise
        assert process.stdout is not None and process.stderr is not None  # PIPE, as asked
        self._readers = [
            asyncio.create_task(self._read(process.stdout, "stdout"), name="torchrun-stdout"),
            asyncio.create_task(self._read(process.stderr, "stderr"), name="torchrun-stderr"),
            asyncio.create_task(self._flush_stale_partials(output), name="torchrun-partials"),
        ]
        return process.pid

    def claim_output(self, pid: int, rank: int) -> None:
        """Process ``pid`` said hello as ``rank``: its pending output is that rank's
        (a self-spawning script's processes, ``runner.launch.worker_output``)."""
        if self._output is not None:
            self._output.claim(pid, rank)

    async def _read(self, stream: asyncio.StreamReader, name: str) -> None:
        splitter = self._splitters[name]
        while True:
            chunk = await stream.read(READ_CHUNK)
            if not chunk:
                break
            lines = splitter.feed(chunk.decode("utf-8", errors="replace"), time.time())
            if lines:
                self.on_lines(lines)
        lines = splitter.flush_all(time.time())
        if lines:
            self.on_lines(lines)

    async def _flush_stale_partials(self, output: WorkerOutput) -> None:
        while True:
            await asyncio.sleep(STALE_PARTIAL_CHECK_SECONDS)
            now = time.time()
            for splitter in self._splitters.values():
                lines = splitter.flush_stale(now)
                if lines:
                    self.on_lines(lines)
            output.flush_stale(now)

    async def wait(self) -> int:
        """Wait for torchrun to exit, every process of the job on this node to end, and its and
        its workers' output to be read; returns the exit status.

        The keeper ends what torchrun left behind before it exits; should the keeper itself
        have been killed, what is left gets SIGTERM here, and SIGKILL after the keeper's grace."""
        if self.process is None or self._output is None:
            raise RuntimeError("torchrun was not started")
        returncode = await self.process.wait()
        if not self._stopping:  # a stop sweeps (``stop``); otherwise the keeper did, unless it was killed
            node_rank = self.command.env.get(NODE_VARIABLE)  # this node's: another may share the machine
            await asyncio.get_running_loop().run_in_executor(
                None, lambda: end_job(self.run_key, grace=KEEPER_GRACE_SECONDS, terminate=True, node_rank=node_rank))
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.gather(*self._readers[:2], self._output.drained()),
                                   timeout=OUTPUT_DRAIN_SECONDS)
        self._readers[2].cancel()
        await self._output.close()
        self.returncode = exit_status(returncode)
        return self.returncode

    async def stop(self, grace: float = 5.0, force: bool = False, reached_torchrun: bool = False) -> None:
        """Stop the whole job: SIGTERM to torchrun (through its keeper; torchrun forwards it to
        each worker's process group, once), then SIGKILL every process carrying the job marker
        after ``grace`` seconds (at once if ``force``).

        ``reached_torchrun``: the stop was sent to every process of the job already (Slurm
        signals a whole job step), the keeper and torchrun included; one more SIGTERM from here
        would be torchrun's second, so only the SIGKILL after ``grace`` is left to do."""
        process = self.process
        if process is None:
            return
        # torchrun gets one SIGTERM only: a second one aborts its shutdown halfway
        if process.returncode is None and (force or not (self._stopping or reached_torchrun)):
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGKILL if force else signal.SIGTERM)
        self._stopping = True
        await asyncio.get_running_loop().run_in_executor(
            None, lambda: end_job(self.run_key, grace=0.0 if force else grace, also=[process.pid]))
