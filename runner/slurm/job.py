"""One Slurm job from ``sbatch`` to Slurm's final record: submit, watch the queue, cancel.

``SlurmJob`` talks to Slurm only through its client tools (``runner.slurm.client``):

* ``submit`` pipes the batch script to ``sbatch --parsable``; the run's token and
  the agents' launch go with it in the job's environment, read from the same pipe
  by a tiny shell in front of sbatch, so they never appear in a command line, in
  the script, or in a file;
* ``poll`` asks ``scontrol -o show job`` (``sacct`` once the controller has
  forgotten the job) and, while the job is pending, ``squeue`` for its place in
  the partition's queue (pending jobs in the order Slurm will start them:
  priority, then job id);
* ``cancel`` is ``scancel`` (Slurm sends SIGTERM, then SIGKILL after its KillWait;
  ``force`` sends SIGKILL now), and ``wait_ended`` is the check that Slurm has
  recorded the end.

Every change of what Slurm says is handed to ``on_change`` (the runner's view of
the run: state, reason, position, nodes).

Polling is gentle on the controller: every 5 s while pending, 10 s while running,
faster only while an end is expected. ``RANKWATCH_SLURM_POLL_SECONDS`` sets one
interval for all (tests).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Callable

from runner.slurm.client import SlurmClient, SlurmToolError
from runner.slurm.states import JobRecord, RunPhase, parse_sacct, parse_scontrol, queue_position

POLL_VARIABLE = "RANKWATCH_SLURM_POLL_SECONDS"
PENDING_POLL_SECONDS = 5.0
RUNNING_POLL_SECONDS = 10.0
ENDING_POLL_SECONDS = 0.5
FAILED_POLLS_BEFORE_WARNING = 3
SUBMIT_SHELL = ("IFS= read -r RANKWATCH_SLURM_TOKEN && IFS= read -r RANKWATCH_SLURM_LAUNCH && "
                "export RANKWATCH_SLURM_TOKEN RANKWATCH_SLURM_LAUNCH && exec sbatch --parsable")
"""Reads the two secret-or-private lines from stdin into the environment sbatch passes
on to the job (sbatch's default ``--export=ALL``), then sbatch reads the script from
the rest of stdin. Not the run's marker (``RANKWATCH_RUN_KEY``): the batch script and
``srun`` would carry it, and a node's clean-up would wait for them and kill them
(``runner.slurm.agent``); the agent has the run key in its launch."""
ALREADY_ENDED = ("already completing or completed", "Invalid job id")
SACCT_FIELDS = "JobID,State,Reason,NodeList,Partition,Start,End,Timelimit,Elapsed,ExitCode"
VANISHED = "UNKNOWN"


class SlurmJob:
    def __init__(self, client: SlurmClient, on_change: Callable[[JobRecord, JobRecord | None], None],
                 on_warning: Callable[[str], None]):
        self.client = client
        self.on_change = on_change
        self.on_warning = on_warning
        self.job_id: str | None = None
        self.record: JobRecord | None = None
        """What Slurm said last."""
        self.cancel_requested = False
        self.force_requested = False
        self.ended = asyncio.Event()
        self._expect_end = asyncio.Event()
        self._poller: asyncio.Task | None = None
        self._failed_polls = 0

    # ---- submission --------------------------------------------------------------------

    async def submit(self, script: str, token: str, launch_json: str) -> str:
        """Submit the job; returns Slurm's job id.

        Raises:
            SlurmToolError: sbatch is not there, ssh failed, or Slurm refused the job
                (its own message, e.g. an invalid partition or account).
        """
        stdin = "\n".join([token, launch_json, script]).encode()
        result = await self.client.run(["sh", "-c", SUBMIT_SHELL], stdin=stdin)
        if not result.ok:
            raise SlurmToolError(f"sbatch refused the job {self.client.where}: {_sbatch_error(result.stderr)}")
        job_id = result.stdout.strip().splitlines()[-1].split(";")[0].strip() if result.stdout.strip() else ""
        if not job_id.isdigit():
            raise SlurmToolError(f"sbatch did not say which job it submitted (it printed {result.stdout.strip()!r})")
        self.job_id = job_id
        return job_id

    @property
    def submitted_id(self) -> str:
        """The job's id, once ``submit`` has returned it.

        Raises:
            RuntimeError: asked before the job was submitted (a mistake of the caller).
        """
        if self.job_id is None:
            raise RuntimeError("no Slurm job has been submitted yet")
        return self.job_id

    def start_polling(self) -> None:
        self._poller = asyncio.get_running_loop().create_task(self._poll_forever(), name="slurm-poll")

    # ---- watching ----------------------------------------------------------------------

    async def poll(self) -> JobRecord | None:
        """Ask Slurm once; hands a changed record to ``on_change``. ``None`` when Slurm did not answer."""
        try:
            record = await self._query()
        except SlurmToolError as error:
            self._failed_polls += 1
            if self._failed_polls == FAILED_POLLS_BEFORE_WARNING:
                self.on_warning(f"cannot ask Slurm about job {self.job_id} ({error}); still trying")
            return None
        self._failed_polls = 0
        previous, self.record = self.record, record
        if previous is None or previous.to_json() != record.to_json():
            self.on_change(record, previous)
        if record.ended:
            self.ended.set()
        return record

    async def _query(self) -> JobRecord:
        """Raises SlurmToolError when neither scontrol nor sacct answers."""
        job_id = self.submitted_id
        result = await self.client.run(["scontrol", "-o", "show", "job", job_id])
        record = parse_scontrol(result.stdout, job_id) if result.ok else None
        if record is None:
            if "Invalid job id" not in result.stderr and not result.ok:
                raise SlurmToolError(f"scontrol: {result.error_line()}")
            record = await self._from_accounting()
        if record.phase == RunPhase.PENDING:
            record = await self._with_position(record)
        return record

    async def _from_accounting(self) -> JobRecord:
        """The controller forgot the job (``MinJobAge`` passed): ask accounting, if the site has it."""
        job_id = self.submitted_id
        result = await self.client.run(["sacct", "--noheader", "--allocations", "--parsable2",
                                        f"--jobs={job_id}", f"--format={SACCT_FIELDS}"])
        record = parse_sacct(result.stdout, job_id) if result.ok else None
        return record or JobRecord(job_id=job_id, state=VANISHED,
                                   reason="no longer known to Slurm (and no accounting to ask)")

    async def _with_position(self, record: JobRecord) -> JobRecord:
        command = ["squeue", "--noheader", "--states=PENDING", "--sort=-p,i", "--format=%i"]
        if record.partition:
            command.append(f"--partition={record.partition}")
        try:
            result = await self.client.run(command)
        except SlurmToolError:
            return record
        if not result.ok:
            return record
        position, total = queue_position(result.stdout.splitlines(), self.submitted_id)
        return record.with_position(position, total)

    async def _poll_forever(self) -> None:
        while not self.ended.is_set():
            await self.poll()
            if self.ended.is_set():
                return
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._expect_end.wait(), self._interval())

    def _interval(self) -> float:
        if self._expect_end.is_set():
            return ENDING_POLL_SECONDS
        override = os.environ.get(POLL_VARIABLE)
        if override:
            with contextlib.suppress(ValueError):
                return max(0.2, float(override))
        if self.record is not None and self.record.phase == RunPhase.PENDING:
            return PENDING_POLL_SECONDS
        return RUNNING_POLL_SECONDS

    def expect_end(self) -> None:
        """The agents reported their end (or a cancel was sent): poll often until Slurm agrees."""
        self._expect_end.set()

    async def wait_ended(self, timeout: float) -> bool:
        """Whether Slurm recorded the end within ``timeout`` seconds."""
        if self.job_id is None:
            return True
        self.expect_end()
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self.ended.wait(), timeout)
        return self.ended.is_set()

    # ---- stopping ----------------------------------------------------------------------

    async def cancel(self, force: bool = False) -> None:
        """``scancel`` (SIGTERM first, SIGKILL after Slurm's KillWait; ``force``: SIGKILL now).

        Raises:
            SlurmToolError: scancel could not be run or refused.
        """
        if self.job_id is None or self.ended.is_set():
            return
        if self.cancel_requested and (not force or self.force_requested):
            return
        self.cancel_requested = True
        self.force_requested = self.force_requested or force
        command = ["scancel", "--signal=KILL", "--full", self.job_id] if force and self._started() else \
            ["scancel", self.job_id]
        self.expect_end()
        await self._scancel(command)
        if force and self._started():
            await self._scancel(["scancel", self.job_id])  # KILL reached the processes; now end the job

    async def _scancel(self, command: list[str]) -> None:
        result = await self.client.run(command)
        if not result.ok and not any(text in result.stderr for text in ALREADY_ENDED):
            raise SlurmToolError(f"scancel failed {self.client.where}: {result.error_line()}")

    def _started(self) -> bool:
        return self.record is not None and self.record.phase != RunPhase.PENDING

    def scancel_argv(self) -> list[str]:
        """What the watchdog runs if the runner dies (``runner.slurm.watchdog``)."""
        return self.client.argv(["scancel", self.submitted_id])

    async def close(self) -> None:
        if self._poller is not None:
            self._poller.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._poller


def _sbatch_error(stderr: str) -> str:
    """sbatch's reason without its prefixes: "Invalid partition name specified"."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    for line in reversed(lines):
        text = line
        for prefix in ("sbatch: error:", "Batch job submission failed:"):
            text = text.split(prefix, 1)[-1].strip() if prefix in text else text
        if text:
            return text
    return "no reason given"
