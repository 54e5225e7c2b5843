"""The runner's side of a Slurm run: the job, its nodes, and what the run shows of them.

``Run`` treats a Slurm run like a multi-node one (``runner.remote.head``): one
``SlurmNode`` handle per node of the allocation, whose agent connects back over
the run's token-authenticated TCP listener. ``SlurmNodes`` adds what Slurm brings:

* ``listen`` opens that listener on the address the compute nodes reach
  (``runner.slurm.address``), or behind the login host's relay;
* node 0's ``start`` submits the job (``runner.slurm.job``) and starts its
  watchdog; the run is then *pending*, with Slurm's reason and the queue position,
  until Slurm allocates the nodes, then *running* (nodes named as Slurm named them);
* a node's ``wait`` ends with its agent's ``node_exit`` or, for an agent that never
  reported, with the job's end; either way after Slurm has recorded the end;
* ``stop`` is ``scancel`` and a verified end;
* agents that do not connect back within ``AGENT_CONNECT_SECONDS`` of the job's
  start fail the run with the reason (and the job is cancelled);
* ``conclude`` puts Slurm's final state into the run's summary (``runner.slurm.outcome``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable

from rankwatch.protocol import AgentHello, NodeExit
from runner import paths
from runner.diagnosis.summary import RunSummary
from runner.hub.hub import Hub
from runner.launch.command import RendezvousPlan, RunnerContext
from runner.launch.nodes import NodeHandle
from runner.launch.output import OutputLine
from runner.profile.resolve import ResolvedLaunch, ResolvedNode
from runner.rank_failure import RankFailure
from runner.remote.addresses import HeadAddressError, address_override
from runner.remote.head import RemoteNodes
from runner.remote.launch_message import LaunchMessage, context_for_agent
from runner.slurm import address, outcome
from runner.slurm.agent import launch_template
from runner.slurm.client import SlurmClient, SlurmToolError, login_node
from runner.slurm.job import SlurmJob
from runner.slurm.relay import LoginRelay
from runner.slurm.script import (
    OUTPUT_FILE,
    node_command,
    render_by_hand,
    render_for_runner,
    slurm_table,
)
from runner.slurm.states import JobRecord, RunPhase
from runner.state import NodeState, RunStatus

AGENT_CONNECT_SECONDS = 120.0
"""From the job's start: Python and Rankwatch starting on a busy compute node, with room."""
FINAL_MESSAGE_SECONDS = 5.0
"""After Slurm ended the job: how long an agent's ``node_exit`` may still take."""
END_CONFIRM_SECONDS = 90.0
"""After the agents' end or a cancel: how long Slurm may take to record the end (KillWait
is 30 s by default; a job's epilog adds to it)."""
OUTPUT_TAIL_LINES = 10


class SlurmNodes(RemoteNodes):
    def __init__(self, hub: Hub, run_key: str, token: str, on_lost: Callable[[str], None]):
        super().__init__(hub, run_key, token, on_lost)
        self._launch: ResolvedLaunch | None = None
        self._client: SlurmClient | None = None
        self.job: SlurmJob | None = None
        """Once submitted (node 0's ``start``)."""
        self.relay: LoginRelay | None = None
        self.agent_endpoint: tuple[str, int] | None = None
        """Where the agents connect: this machine's listener, or the login host's relay."""
        self.failure: str | None = None
        """Why the run failed on the Slurm side (agents that never connected back)."""
        self._launch_json: str | None = None
        self._watchdog: subprocess.Popen | None = None
        self._connected: set[int] = set()
        self._agent_timer: asyncio.Task | None = None
        self._phase_tasks: set[asyncio.Task] = set()
        self._phase_lock = asyncio.Lock()
        """Phases reach the store in the order Slurm reported them."""

    @property
    def launch(self) -> ResolvedLaunch:
        """Raises RuntimeError before ``listen`` (which every use follows)."""
        if self._launch is None:
            raise RuntimeError("SlurmNodes used before listen()")
        return self._launch

    @property
    def client(self) -> SlurmClient:
        """Raises RuntimeError before ``listen``."""
        if self._client is None:
            raise RuntimeError("SlurmNodes used before listen()")
        return self._client

    @property
    def submitted_job(self) -> SlurmJob:
        """Raises RuntimeError before ``submit``."""
        if self.job is None:
            raise RuntimeError("no Slurm job submitted yet")
        return self.job

    # ---- listening ---------------------------------------------------------------------

    async def listen(self, launch: ResolvedLaunch, plan: RendezvousPlan) -> None:
        """Open the listener for the agents (never raises: see ``error``)."""
        slurm = slurm_table(launch)
        self._launch = launch
        self._client = SlurmClient(login_node(slurm, launch.head.python, launch.head.workdir))
        self.hub.add_observer(self)
        route = address.route_of(slurm)
        try:
            if route == address.LOGIN:
                endpoint = await self._listen_behind_login_relay()
            else:
                endpoint = await self._listen_directly()
        except (HeadAddressError, SlurmToolError, OSError) as error:
            self.error = f"cannot listen for the Slurm job's agents: {error}"
            return
        self.agent_endpoint = host, port = endpoint
        self.hub.add_event("agents_listening", None, f"listening for the Slurm job's agents, which connect to "
                                                     f"{host}:{port} ({route} route; token required)",
                           addresses=list(dict.fromkeys(self.addresses.values())), port=self.port, route=route,
                           agent_host=host, agent_port=port)

    async def _listen_directly(self) -> tuple[str, int]:
        """Where the agents connect. Raises HeadAddressError, SlurmToolError, OSError."""
        bind = address_override()
        if bind is None:
            bind = address.source_address_toward(await self._compute_node_address())
        self.port = await self.hub.serve_tcp(bind, 0)
        self.addresses = {node.node_rank: bind for node in self.launch.nodes}
        return bind, self.port

    async def _listen_behind_login_relay(self) -> tuple[str, int]:
        """Where the agents connect (the relay on the login host). Raises SlurmToolError, OSError."""
        self.port = await self.hub.serve_tcp(address.LOOPBACK, 0)
        self.addresses = {node.node_rank: address.LOOPBACK for node in self.launch.nodes}
        login = self.client.login
        if login is None:
            raise SlurmToolError('slurm.telemetry_route = "login" needs slurm.login_host (the host to relay through)')
        self.relay = LoginRelay(login, self.launch.head.python, self.run_key, self.port)
        return await self.relay.start(await self._compute_node_address())

    async def _compute_node_address(self) -> str:
        """A compute node of the job's partition, as Slurm knows its address (``NodeAddr``)."""
        command = ["sinfo", "--noheader", "--Node", "--format=%o"]
        partition = slurm_table(self.launch).partition
        if partition:
            command.append(f"--partition={partition}")
        result = await self.client.run(command, check=True)
        node_address = address.first_node_address(result.stdout)
        if node_address is None:
            raise SlurmToolError(f"sinfo lists no node {self.client.where}"
                                 + (f" in partition {partition}" if partition else ""))
        return node_address

    # ---- the nodes -----------------------------------------------------------------------

    def create(self, launch: ResolvedLaunch, node: ResolvedNode, plan: RendezvousPlan, context: RunnerContext,
               on_lines: Callable[[ResolvedNode, list[OutputLine]], None], grace: float) -> SlurmNode:
        """The handle for ``node``; the first one also prepares the agents' launch.

        Raises:
            OSError: the runner cannot listen for the agents.
        """
        if self.error is not None or self.agent_endpoint is None:
            raise OSError(self.error or "not listening for the Slurm job's agents")
        if self._launch_json is None:
            command = node_command(launch, context_for_agent(context))
            host, port = self.agent_endpoint
            self._launch_json = launch_template(LaunchMessage(
                token="", head_host=host, head_port=port, run_key=self.run_key, run=context.run_id,
                node_rank=0, host="", argv=command.argv, env=command.env, cwd=command.cwd, grace=grace,
                sample_interval=launch.spec.telemetry.sample_interval))
        handle = SlurmNode(node, self, on_lost=self._node_lost)
        self.nodes[node.node_rank] = handle
        return handle

    async def submit(self) -> None:
        """Submit the job: the run is pending from here.

        Raises:
            OSError: Slurm refused the job or could not be reached (the message says why).
        """
        run_id, launch_json = self.hub.run_id, self._launch_json
        if run_id is None or launch_json is None:
            raise RuntimeError("submit() before the run was recorded and its nodes created")
        job = self.job = SlurmJob(self.client, on_change=self._on_slurm_change,
                                  on_warning=lambda text: self.hub.add_event("warning", None, text))
        script = render_for_runner(self.launch)
        run_dir = paths.run_dir(run_id)
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "sbatch.sh").write_text(script)
        job_id = await job.submit(script, self.token, launch_json)
        self._start_watchdog(job)
        by_hand = render_by_hand(self.launch)
        await self.hub.update_run(status=RunStatus.PENDING.value, command=by_hand)
        self.hub.add_event("slurm_submitted", None, f"submitted as Slurm job {job_id} {self.client.where}",
                           job_id=job_id, where=self.client.where, script=str(run_dir / "sbatch.sh"),
                           output=f"{self.launch.head.workdir}/{OUTPUT_FILE.replace('%j', job_id)}")
        for node in self.launch.nodes:
            await self.hub.update_node(node.node_rank, node.host, NodeState.STARTING.value,
                                       detail=f"Slurm job {job_id}: queued")
        await job.poll()
        job.start_polling()

    def _start_watchdog(self, job: SlurmJob) -> None:
        env = {key: value for key, value in os.environ.items() if not key.startswith("RANKWATCH_RUN_KEY")}
        env["PYTHONPATH"] = str(paths.REPO_ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        self._watchdog = subprocess.Popen(
            [sys.executable, "-m", "runner.slurm.watchdog", json.dumps(job.scancel_argv())],
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
            env=env, close_fds=True)

    def _release_watchdog(self) -> None:
        if self._watchdog is None:
            return
        if self._watchdog.stdin is not None:
            with contextlib.suppress(OSError):
                self._watchdog.stdin.write(b"done")
                self._watchdog.stdin.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._watchdog.wait(timeout=5)
        self._watchdog = None

    # ---- what Slurm says -------------------------------------------------------------

    def _on_slurm_change(self, record: JobRecord, previous: JobRecord | None) -> None:
        phase = record.phase
        if previous is not None and previous.phase == phase and phase != RunPhase.PENDING:
            return
        if previous is not None and phase == RunPhase.PENDING and (previous.reason, previous.position) == \
                (record.reason, record.position):
            return
        self.hub.add_event("slurm", None, f"Slurm job {record.job_id}: {record.describe()}", **record.to_json())
        task = asyncio.get_running_loop().create_task(self._record_phase(record, previous))
        self._phase_tasks.add(task)
        task.add_done_callback(self._phase_tasks.discard)

    async def _record_phase(self, record: JobRecord, previous: JobRecord | None) -> None:
        async with self._phase_lock:
            await self._record_phase_now(record, previous)

    async def _record_phase_now(self, record: JobRecord, previous: JobRecord | None) -> None:
        status = None if self.hub.run_row is None else self.hub.run_row.status
        phase = record.phase
        if phase == RunPhase.PENDING:
            for node in self.launch.nodes:
                await self.hub.update_node(node.node_rank, node.host, NodeState.STARTING.value,
                                           detail=f"Slurm job {record.job_id}: {record.describe()}")
        elif phase in (RunPhase.RUNNING, RunPhase.COMPLETING) and (previous is None or
                                                                   previous.phase == RunPhase.PENDING):
            if status in (RunStatus.STARTING.value, RunStatus.PENDING.value):
                await self.hub.update_run(status=RunStatus.RUNNING.value, started=record.start or time.time())
            names = record.nodes
            for node in self.launch.nodes:
                name = names[node.node_rank] if node.node_rank < len(names) else node.host
                await self.hub.update_node(node.node_rank, name, NodeState.RUNNING.value,
                                           detail=f"Slurm job {record.job_id} on {name}")
            if self._agent_timer is None:
                self._agent_timer = asyncio.get_running_loop().create_task(self._expect_agents())

    async def _expect_agents(self) -> None:
        """Every agent connects back soon after the job starts, or the run fails saying why."""
        job = self.submitted_job  # the job started: it was submitted
        deadline = time.monotonic() + AGENT_CONNECT_SECONDS
        while time.monotonic() < deadline:
            if len(self._connected) == len(self.launch.nodes) or job.ended.is_set():
                return
            await asyncio.sleep(0.5)
        if job.cancel_requested or job.ended.is_set():
            return
        self.failure = self._agents_missing(f"within {AGENT_CONNECT_SECONDS:.0f} s of the job's start")
        self.hub.add_event("warning", None, self.failure)
        with contextlib.suppress(SlurmToolError):
            await job.cancel()

    def _agents_missing(self, when: str) -> str:
        """Why the run failed when agents never connected back, and what to do about it."""
        missing = sorted(set(range(len(self.launch.nodes))) - self._connected)
        where = "{}:{}".format(*self.agent_endpoint) if self.agent_endpoint is not None else "this machine"
        return (f"the agents of node(s) {', '.join(map(str, missing))} did not connect back to {where} {when}: "
                "the compute nodes cannot reach this machine there (use slurm.telemetry_route = \"login\", or set "
                "RANKWATCH_HEAD_ADDRESS), or Rankwatch could not start there (see the job's output file "
                f"{self.launch.head.workdir}/{OUTPUT_FILE.replace('%j', self.submitted_job.submitted_id)})")

    def on_agent_connected(self, hello: AgentHello) -> None:
        if hello.node_rank is not None:
            self._connected.add(hello.node_rank)
        super().on_agent_connected(hello)

    # ---- stopping and the end --------------------------------------------------------

    async def cancel(self, force: bool) -> None:
        if self.job is None:
            return
        try:
            await self.job.cancel(force)
        except SlurmToolError as error:
            self.hub.add_event("warning", None, f"could not cancel Slurm job {self.job.job_id}: {error}")
            return
        if not await self.job.wait_ended(END_CONFIRM_SECONDS):
            state = self.job.record.describe() if self.job.record else "unknown"
            self.hub.add_event("warning", None, f"Slurm has not confirmed the end of job {self.job.job_id} "
                                                f"{END_CONFIRM_SECONDS:.0f} s after scancel (it says: {state}); "
                                                f"check with squeue -j {self.job.job_id}")

    async def confirm_end(self) -> bool:
        """Wait (bounded) until Slurm has recorded the job's end; then let the watchdog go."""
        if self.job is None:
            return True
        ended = await self.job.wait_ended(END_CONFIRM_SECONDS)
        if ended:
            self._release_watchdog()
        return ended

    async def read_output_tail(self) -> list[str]:
        """The end of the job's Slurm output file (where agents and srun say what went wrong)."""
        if self.job is None or self.job.job_id is None:
            return []
        path = f"{self.launch.head.workdir}/{OUTPUT_FILE.replace('%j', self.job.job_id)}"
        try:
            result = await self.client.run(["tail", "-n", str(OUTPUT_TAIL_LINES), path], timeout=20)
        except SlurmToolError:
            return []
        return [line for line in result.stdout.splitlines() if line.strip()] if result.ok else []

    @property
    def ended_from_outside(self) -> bool:
        """Slurm ended the job (time limit, preemption, a scancel not from Rankwatch)."""
        return self.job is not None and outcome.ended_from_outside(self.job.record, self.job.cancel_requested)

    async def conclude(self, summary: RunSummary, status: RunStatus,
                       exit_code: int) -> tuple[RunSummary, RunStatus, int]:
        """The summary with Slurm's side of the end, and the run's status and exit code."""
        if self.job is None:
            return summary, status, exit_code
        if self.failure is None and not self._connected and self.job.record is not None and \
                self.job.record.ended and not self.job.cancel_requested:
            record = self.job.record
            self.failure = self._agents_missing(f"before Slurm job {record.job_id} ended ({record.describe()})")
        tail = await self.read_output_tail() if self.failure is not None else []
        result = outcome.conclude(summary, status, exit_code, record=self.job.record, job_id=self.job.job_id,
                                  cancel_requested=self.job.cancel_requested, failure=self.failure,
                                  rank_rows=list(self.hub.model.ranks.values()), output_tail=tail,
                                  failed_node_code=self._failed_node_code(summary.first_failure))
        await self.close()
        return result

    def _failed_node_code(self, first: RankFailure | None) -> int | None:
        """torchrun's exit status on the node of the rank that failed first (``None``: unknown)."""
        rank = first.rank if first is not None else None
        row = self.hub.model.ranks.get(rank) if rank is not None else None
        handle = self.nodes.get(row.node_rank) if row is not None and row.node_rank is not None else None
        code = handle.exit_message.code if handle is not None and handle.exit_message is not None else None
        return code if isinstance(code, int) and code > 0 else None

    async def close(self) -> None:
        if self.job is not None:
            await self.job.close()
            if self.job.ended.is_set():
                self._release_watchdog()
        if self._agent_timer is not None:
            self._agent_timer.cancel()
        if self.relay is not None:
            await self.relay.stop()


class SlurmNode(NodeHandle):
    """One node of a Slurm run, as the runner waits for it (its agent does the work there)."""

    def __init__(self, node: ResolvedNode, owner: SlurmNodes, on_lost: Callable[[SlurmNode], None]):
        self.node = node
        self.owner = owner
        self.on_lost = on_lost
        self.exit_message: NodeExit | None = None
        self.lost_at: float | None = None
        self.lost_reason: str | None = None
        self._stopping = False
        self._connected = False
        self._done = asyncio.Event()
        """The agent reported its end, or its connection was lost."""

    @property
    def stopping(self) -> bool:
        return self._stopping

    # ---- what the hub reports about this node's agent (via runner.remote.head) -------

    def on_agent_connected(self) -> None:
        self._connected = True

    def on_node_exit(self, message: NodeExit) -> None:
        self.exit_message = message
        self._done.set()
        if all(handle.exit_message is not None or handle.lost_at is not None
               for handle in self.owner.nodes.values()) and self.owner.job is not None:
            self.owner.job.expect_end()

    def on_agent_closed(self) -> None:
        if self.exit_message is None and not self._stopping and not self.owner.ended_from_outside:
            self.lost_at = time.time()
            self.lost_reason = "the connection to its agent dropped"
            self.on_lost(self)
        self._done.set()

    # ---- NodeHandle ------------------------------------------------------------------

    async def start(self) -> None:
        """Node 0 submits the job (the others are in the same job).

        Raises:
            OSError: Slurm refused the job or could not be reached.
        """
        if self.node.node_rank == 0:
            await self.owner.submit()

    async def wait(self) -> int:
        """The node's torchrun exit status (from its agent), else what Slurm says; returns
        only once Slurm has recorded the job's end (bounded)."""
        job = self.owner.job
        if job is None:
            return outcome.EXIT_ENDED_BY_SLURM
        done = asyncio.create_task(self._done.wait())
        ended = asyncio.create_task(job.ended.wait())
        await asyncio.wait({done, ended}, return_when=asyncio.FIRST_COMPLETED)
        if not done.done() and self._connected:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.shield(done), FINAL_MESSAGE_SECONDS)
        done.cancel()
        ended.cancel()
        await self.owner.confirm_end()
        if self.exit_message is not None and self.exit_message.code is not None:
            code = self.exit_message.code
            detail = f"torchrun exit status {code}"
        else:
            code = (job.record.exit_status if job.record is not None else None) or outcome.EXIT_ENDED_BY_SLURM
            detail = "its agent never reported" + (f" (Slurm: {job.record.describe()})" if job.record else "")
        if self.lost_at is None:
            state = NodeState.EXITED if code == 0 else NodeState.FAILED
            await self.owner.hub.update_node(self.node.node_rank, self.name, state.value, detail=detail)
        return code

    @property
    def name(self) -> str:
        """The node's name once Slurm allocated it, else its placeholder."""
        record = self.owner.job.record if self.owner.job is not None else None
        names = record.nodes if record is not None else []
        return names[self.node.node_rank] if self.node.node_rank < len(names) else self.node.host

    async def stop(self, grace: float, force: bool = False) -> None:
        """``scancel`` the job (every node at once) and wait until Slurm says it ended."""
        self._stopping = True
        await self.owner.cancel(force)
