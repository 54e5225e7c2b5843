"""One run from launch to end: the runner's main object.

``prepare_launch`` turns a profile into something that can run here (or refuses
with field-named errors, exit code 2, before anything starts). ``Run.execute`` then:

1. records the run in the store and opens the hub's private socket;
2. starts the sentinel (no orphans even if this process is SIGKILLed);
3. starts torchrun on every node (``runner.launch.nodes``), the GPU and process
   samplers, and the diagnosis monitors (stalls, stragglers, consistency);
4. waits for every node to end, or for a stop (Ctrl-C, SIGTERM, a subscriber);
5. lets the workers' last messages arrive, triages a failure, records the end,
   says bye to subscribers, and returns the job's exit status.

The spec stays what was asked for; everything live sits on the ``Run``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

from rankwatch.protocol import EventKind, Hello, MetricRecord, ProcessSample
from runner import paths
from runner.diagnosis.evidence import TriageEvidence
from runner.diagnosis.hints import GpuMemory
from runner.diagnosis.monitors import start_monitors
from runner.diagnosis.pacing import PacedTick
from runner.diagnosis.summary import RunSummary, StopRequest
from runner.diagnosis.triage import TriageInput
from runner.diagnosis.triage import conclude as conclude_summary
from runner.exit_status import (
    EXIT_KILLED,
    EXIT_NOT_STARTED,
    describe_stop_reason,
    stopped_run_exit_code,
)
from runner.hub.hub import Hub
from runner.hub.observer import HubObserver
from runner.launch.command import (
    NodeCommand,
    RendezvousPlan,
    RunnerContext,
    build_commands,
    build_node_command,
    uses_init_file,
)
from runner.launch.nodes import LocalNode, NodeHandle
from runner.launch.output import OutputLine
from runner.masking import masked_env, masked_pairs
from runner.profile.check import check_launch
from runner.profile.files import Profile, dumps_spec
from runner.profile.parse import SpecErrors, spec_to_dict
from runner.profile.resolve import MachineFacts, ResolvedLaunch, ResolvedNode, resolve
from runner.profile.spec import SELF_SPAWN
from runner.remote.addresses import remote_nodes
from runner.remote.head import RemoteNodes
from runner.remote.preflight import preflight_nodes
from runner.remote.rendezvous import plan_rendezvous
from runner.sampling.gpu_report import GpuReport
from runner.sampling.nvml import shared_nvml
from runner.sampling.samplers import GpuSampler, ProcessSampler, gpu_rows, rank_gpu_usage
from runner.slurm.nodes import SlurmNodes
from runner.slurm.preflight import preflight_slurm
from runner.slurm.script import slurm_plan
from runner.state import NodeState, Outcome, RankState, RunStatus
from runner.telemetry.printed_metrics import Point, PrintedMetrics
from runner.telemetry.stdout_parser import StdoutMetrics

STOP_GRACE_SECONDS = 5.0
FINAL_MESSAGES_WAIT_SECONDS = 3.0
MONITOR_INTERVAL_SECONDS = 0.5


@dataclass(frozen=True)
class PreparedLaunch:
    profile: Profile
    launch: ResolvedLaunch
    plan: RendezvousPlan
    machine: MachineFacts

    def user_commands(self, init_file: str | None = None) -> list[NodeCommand]:
        """The commands to run the job by hand; ``init_file``: the file ``{init_method:file}`` names
        (a run's own; without it, a fresh private one the shell makes)."""
        return build_commands(self.launch, self.plan, init_file=init_file)


def detect_machine() -> MachineFacts:
    """This machine's facts for resolving a spec: usable CPUs and the GPUs (NVML, the sampler's
    shared session). Composed here, above both: the spec's resolution knows no NVML, the sampling
    no spec."""
    return MachineFacts.detect(gpus=shared_nvml().report(with_processes=False))


def prepare_launch(profile: Profile, machine: MachineFacts | None = None, probe_interpreter: bool = True,
                   check_ports: bool = True) -> PreparedLaunch:
    """Resolve and check ``profile`` for this machine.

    Raises:
        SpecErrors: every reason it cannot run; nothing has been started.
    """
    machine = machine or detect_machine()
    launch = resolve(profile.spec, machine, profile.base_dir)
    errors = check_launch(launch, machine, probe_interpreter=probe_interpreter)
    if probe_interpreter:
        # remote nodes, over ssh: reachable, Rankwatch and torch there; Slurm: sbatch --test-only and the same
        errors += preflight_slurm(launch) if launch.spec.slurm else preflight_nodes(launch)
    if errors:
        raise SpecErrors(errors)
    if launch.spec.slurm:
        plan = slurm_plan()  # c10d on the first allocated node, found when the job runs
    else:
        plan = plan_rendezvous(launch) if check_ports else RendezvousPlan(mode=launch.spec.rendezvous.mode)
    return PreparedLaunch(profile=profile, launch=launch, plan=plan, machine=machine)


def _recorded_command(commands: list[NodeCommand]) -> str:
    """The command lines stored with the run (what ``runs show`` and the GUI show): secret-looking
    variables masked (``runner.masking``); the processes started get their values."""
    return "\n".join(replace(command, env=masked_env(command.env)).shell_text() for command in commands)


def start_sentinel(run_key: str, store_path: Path, run_id: int) -> subprocess.Popen:
    """The watchdog that ends the job if this process dies (see ``runner.launch.sentinel``)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RANKWATCH_RUN_KEY")}
    env["PYTHONPATH"] = str(paths.REPO_ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return subprocess.Popen(
        [sys.executable, "-m", "runner.launch.sentinel", run_key, str(store_path), str(run_id)],
        stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True, env=env, close_fds=True)


class RunView(Protocol):
    """What shows a run in the runner's own process (``runner.view.terminal.TerminalView``)."""

    @property
    def watches_live(self) -> bool:
        """Shows records as they come (keeps the run fresh, ``runner.hub.freshness``)."""

    def handle(self, message: dict[str, Any]) -> None:
        """One hub message (snapshot, update, bye)."""


class Run(HubObserver):
    """One run. It orchestrates: the hub takes the telemetry, ``TriageEvidence`` collects what
    failure triage needs, the monitors watch for hangs and stragglers; the run starts and stops
    the nodes and records the end. As a hub observer it only answers subscribers (stop, stacks)
    and attributes a self-spawned rank's output; printed losses (``--parse-stdout``) are
    ``PrintedMetrics``'."""

    def __init__(self, prepared: PreparedLaunch, view: RunView | None = None,
                 on_ready: Callable[[dict[str, Any]], None] | None = None):
        self.prepared = prepared
        self.launch = prepared.launch
        self.spec = prepared.launch.spec
        self.view = view
        self.on_ready = on_ready
        self.run_key = secrets.token_hex(12)
        self.token = secrets.token_urlsafe(32)
        self.store_path = paths.store_path()
        self.hub = Hub(self.store_path, self.token)
        self.hub.compactor.full_detail = self.spec.telemetry.full_detail_hours * 3600.0
        self.run_id: int | None = None
        self.run_dir: Path | None = None
        self.socket_path: Path | None = None
        self.nodes: list[NodeHandle] = []
        self.evidence = TriageEvidence(TriageInput(
            legacy_local_rank=self.spec.legacy_local_rank, backend=self.launch.backend,
            cpu_mode=self.launch.cpu_mode, interpreter=self.launch.head.python,
            instrumented=self.spec.telemetry.instrument))
        self.printed_metrics = PrintedMetrics(
            StdoutMetrics(self.spec.telemetry.loss_pattern), self._add_printed_points,
            ranks_report_steps=self.spec.telemetry.instrument) if self.spec.telemetry.parse_stdout else None
        """``--parse-stdout``: points read from printed lines, at the step of the moment they were printed."""
        self.monitors: list = []
        """Diagnosis monitors: objects with ``tick(now)``, called every ``MONITOR_INTERVAL_SECONDS``,
        or less often when their ticks are costly (``runner.diagnosis.pacing``)."""
        self._stop_requested = asyncio.Event()
        self._force_requested = asyncio.Event()
        self._stop_reason: str | None = None
        self.received_signal: int | None = None
        """The first SIGINT/SIGTERM/SIGHUP this process received (``runner.exit_status``)."""
        self._samplers: list = []
        self.remote: RemoteNodes | None = None
        """Jobs with remote nodes: the agents' TCP listener and those nodes (``runner.remote``)."""
        self.slurm: SlurmNodes | None = None
        """Slurm runs: the job and its nodes (``runner.slurm``), also ``remote``."""
        self._loop: asyncio.AbstractEventLoop  # set first thing in ``execute``
        self.exit_code: int | None = None

    # ---- control -------------------------------------------------------------------------

    def request_stop(self, force: bool = False, reason: str = "stop requested") -> None:
        """Stop the job gracefully (SIGTERM, then SIGKILL after a grace period); ``force``: SIGKILL now."""
        self._stop_reason = self._stop_reason or reason
        if force:
            self._force_requested.set()
        self._stop_requested.set()

    def _install_signal_handlers(self) -> None:
        def on_signal(number: int) -> None:
            self.received_signal = self.received_signal or number
            # A second Ctrl-C means "now": skip the grace period.
            self.request_stop(force=self._stop_requested.is_set(), reason=signal.Signals(number).name)

        for number in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            with contextlib.suppress(ValueError, RuntimeError):  # not the main thread
                self._loop.add_signal_handler(number, on_signal, number)

    def dump_stacks(self) -> None:
        """Capture every rank's Python stacks (see ``runner.diagnosis``); a no-op until ranks said hello."""
        for monitor in self.monitors:
            capture = getattr(monitor, "capture_stacks", None)
            if capture is not None:
                capture(reason="requested")

    @property
    def triage_input(self) -> TriageInput:
        return self.evidence.data

    # ---- what the hub tells the run (HubObserver) ----------------------------------------

    def on_stop_requested(self, force: bool) -> None:
        self.request_stop(force, reason="stop requested by a subscriber")

    def on_dump_stacks(self) -> None:
        self.dump_stacks()

    def on_hello(self, hello: Hello) -> None:
        """A self-spawned rank's output waits for its hello to be attributed (``runner.launch.worker_output``)."""
        if self.launch.self_spawn and hello.pid is not None:
            for handle in self.nodes:
                handle.claim_output(hello.pid, hello.rank)

    # ---- output and telemetry ------------------------------------------------------------

    def _on_node_lines(self, node: ResolvedNode, lines: list[OutputLine]) -> None:
        for line in lines:
            rank = line.rank
            if rank is not None and line.local_rank_only:
                rank = self._global_rank(node.node_rank, rank)
            self.hub.add_log(rank, line.stream, line.text, line.t, node=node.host)

    def _add_printed_points(self, points: list[Point]) -> None:
        for rank, t, step, name, value in points:
            self.hub.add_metric(MetricRecord(rank, t, step, name, value, "parsed"))
            self.evidence.data.measured.add(rank)

    def _global_rank(self, node_rank: int, local_rank: int) -> int:
        """Older torch prefixes lines with the local rank; map it through the hellos."""
        for row in self.hub.model.ranks.values():
            if row.local_rank == local_rank and (row.node_rank or 0) == node_rank:
                return row.rank
        return local_rank

    def _on_process_rows(self, rows: list[ProcessSample]) -> None:
        self.hub.add_process_samples(rows)

    def _on_gpu_report(self, report: GpuReport) -> None:
        if not report.available:
            if not self.launch.cpu_mode:
                self.hub.add_event(EventKind.WARNING, None, f"GPU sampling off: {report.describe_unavailable()}")
            return
        now = time.time()
        self.hub.add_gpu_samples(gpu_rows(report, now))
        gpus = {gpu.index: gpu for gpu in report.gpus}
        for rank, (index, util, memory) in rank_gpu_usage(report, self._local_pids()).items():
            self.hub.model.on_gpu_use(rank, index, util, memory, now)
            # for the out-of-memory hint: the GPU's memory while the rank's process was on it, before
            # it reported its failure (after that, it frees its memory on the way out)
            if rank not in self.triage_input.exceptions:
                self.triage_input.rank_gpu_memory[rank] = GpuMemory(index, gpus[index].memory_used,
                                                                    gpus[index].memory_total, now)

    def _thread_safe(self, function: Callable) -> Callable:
        loop = self._loop

        def call(*args):
            with contextlib.suppress(RuntimeError):  # loop closed at shutdown
                loop.call_soon_threadsafe(function, *args)
        return call

    # ---- setting up ----------------------------------------------------------------------

    async def _open(self) -> None:
        profile = self.prepared.profile
        commands = self.prepared.user_commands()
        # a self-spawning script is recorded as such (run again, it runs the same way; views label its lines)
        ran = self.spec.with_changes(launch_mode=SELF_SPAWN) if self.launch.self_spawn else self.spec
        ran = ran.with_changes(env=masked_pairs(ran.env))  # the record shows no secret; the job gets it
        self.run_id = await self.hub.create_run(
            spec_to_dict(ran),
            run_key=self.run_key, profile=profile.name, spec_toml=dumps_spec(ran),
            command=_recorded_command(commands), host=socket.gethostname(),
            workdir=self.launch.head.workdir, runner_pid=os.getpid(), socket=None,
            world_size=None if self.launch.self_spawn else self.launch.world_size, status=RunStatus.STARTING.value)
        self.evidence.data.run_id = self.run_id  # hints name it in their commands
        self.run_dir = paths.make_run_dir(self.run_id)  # 0700, with its stacks and torchrun folders
        self.socket_path = paths.socket_dir() / f"{self.run_key[:16]}.sock"
        paths.remove_stale_sockets(self.socket_path.parent)  # what SIGKILLed runners left there
        if uses_init_file(self.launch):  # the command recorded names the file this run uses, in its folder
            await self.hub.update_run(command=_recorded_command(self.prepared.user_commands(init_file=self._init_file())))
        await self.hub.serve_unix(self.socket_path)
        if remote_nodes(self.launch):
            # A lost node fails the run: the others are stopped (their collectives could only
            # hang), but the run is not "stopped on request".
            nodes_class = SlurmNodes if self.spec.slurm else RemoteNodes
            self.remote = nodes_class(self.hub, self.run_key, self.token, on_lost=self._on_node_lost)
            self.slurm = self.remote if isinstance(self.remote, SlurmNodes) else None
            await self.remote.listen(self.launch, self.prepared.plan)
        self.hub.add_observer(self)
        self.hub.add_observer(self.evidence)
        if self.printed_metrics is not None:
            self.hub.add_observer(self.printed_metrics)
        self.hub.start()
        await self.hub.update_run(socket=str(self.socket_path))
        for node in self.launch.nodes:
            await self.hub.update_node(node.node_rank, node.host, NodeState.STARTING.value, node.processes)

    def _on_node_lost(self, reason: str) -> None:
        self._loop.create_task(self._stop_nodes(force=False))

    def _opened(self) -> tuple[int, Path, Path]:
        """The run's id, folder and socket (``_open`` sets them before anything needs them)."""
        assert self.run_id is not None and self.run_dir is not None and self.socket_path is not None
        return self.run_id, self.run_dir, self.socket_path

    def runner_context(self) -> RunnerContext:
        run_id, run_dir, socket_path = self._opened()
        return RunnerContext(
            socket=str(socket_path), token=self.token, run_key=self.run_key, run_id=run_id,
            log_dir=str(run_dir / "torchrun"), stacks_dir=str(run_dir / "stacks"),
            instrument=self.spec.telemetry.instrument, hash_every=self.spec.telemetry.hash_every,
            init_file=self._init_file() if uses_init_file(self.launch) else None)

    def _init_file(self) -> str:
        """``{init_method:file}``'s file, in a private folder of the run's: made fresh (the file must
        not exist before the run, torch's rule), removed after the run (``execute``)."""
        folder = self._opened()[1] / "init-method"
        folder.mkdir(mode=0o700, exist_ok=True)
        return str(folder / "store")

    def _create_nodes(self) -> list[NodeHandle]:
        nodes: list[NodeHandle] = []
        for node in self.launch.nodes:
            if node.is_local:
                command = build_node_command(self.launch, node, self.prepared.plan, self.runner_context())
                nodes.append(LocalNode(node, command, self.run_key, self._on_node_lines))
            else:
                nodes.append(self._create_remote_node(node))
        return nodes

    def _create_remote_node(self, node: ResolvedNode) -> NodeHandle:
        """Raises OSError when the head cannot listen for the node's agent."""
        assert self.remote is not None  # _open creates it for a run with remote nodes
        return self.remote.create(self.launch, node, self.prepared.plan, self.runner_context(),
                                  on_lines=self._on_node_lines, grace=STOP_GRACE_SECONDS)

    def _local_pids(self) -> dict[int, int]:
        """rank -> pid for ranks on this machine: a remote rank's pid means nothing here
        (its agent samples it there)."""
        pids = self.hub.model.pids()
        if self.remote is None:
            return pids
        local = {node.node_rank for node in self.launch.nodes if node.is_local}
        ranks = self.hub.model.ranks
        return {rank: pid for rank, pid in pids.items() if (ranks[rank].node_rank or 0) in local}

    def _start_samplers(self) -> None:
        interval = self.spec.telemetry.sample_interval
        self._samplers = [
            ProcessSampler(interval, pids=self._local_pids, emit=self._thread_safe(self._on_process_rows)),
        ]
        if self.slurm is None:  # this machine's GPUs are not a Slurm job's
            self._samplers.append(GpuSampler(interval, emit=self._thread_safe(self._on_gpu_report)))
        for sampler in self._samplers:
            sampler.start()

    def _stop_samplers(self) -> None:
        for sampler in self._samplers:
            sampler.stop()

    def _start_monitors(self) -> None:
        """Diagnosis monitors that watch the live model (hangs, stragglers, consistency)."""
        self.monitors = start_monitors(self.hub, self.launch, self._opened()[1], self.triage_input, self.run_key,
                                       remote_capture=self.remote.request_stacks if self.remote is not None else None)

    async def _watch(self) -> None:
        paced: dict[int, PacedTick] = {}  # by id(monitor): each keeps to its share of the loop
        while True:
            await asyncio.sleep(MONITOR_INTERVAL_SECONDS)
            now = time.time()
            if self.printed_metrics is not None:
                self.printed_metrics.tick(now)
            for monitor in self.monitors:
                try:
                    paced.setdefault(id(monitor), PacedTick(monitor)).tick(now)
                except Exception as error:  # a broken monitor must not end the run
                    self.hub.add_event(EventKind.WARNING, None, f"monitor {type(monitor).__name__} failed: {error}")

    # ---- the run -------------------------------------------------------------------------

    async def execute(self) -> int:
        self._loop = asyncio.get_running_loop()
        await self._open()
        sentinel = start_sentinel(self.run_key, self.store_path, self._opened()[0])
        try:
            return await self._run_opened()
        finally:
            with contextlib.suppress(OSError):
                if sentinel.stdin is not None:
                    sentinel.stdin.write(b"done")
                    sentinel.stdin.close()
            with contextlib.suppress(subprocess.TimeoutExpired):
                sentinel.wait(timeout=5)
            if self.socket_path is not None:
                self.socket_path.unlink(missing_ok=True)
            if self.run_dir is not None:
                shutil.rmtree(self.run_dir / "init-method", ignore_errors=True)

    async def _run_opened(self) -> int:
        if self.view is not None:
            self.hub.add_local_subscriber(self.view.handle, watches_live=self.view.watches_live)
        choice = self.launch.launch_mode
        self.hub.add_event(EventKind.LAUNCH_MODE, None, choice.describe(), mode=choice.mode, reason=choice.reason,
                           chosen_by=choice.chosen_by)
        if self.on_ready is not None:
            run_id, run_dir, socket_path = self._opened()
            self.on_ready({"run_id": run_id, "socket": str(socket_path), "pid": os.getpid(),
                           "log": str(run_dir / "runner.log")})
        self._install_signal_handlers()
        try:
            self.nodes = self._create_nodes()
            for handle in self.nodes:
                await handle.start()
                if self.slurm is None:  # a Slurm job's nodes run once Slurm allocates them (runner.slurm)
                    await self.hub.update_node(handle.node.node_rank, handle.node.host, NodeState.RUNNING.value)
        except (OSError, SpecErrors) as error:
            await self._stop_nodes(force=True)
            return await self._finish_unstarted(f"could not start the job: {error}")
        if self.slurm is None:  # a Slurm job is pending until Slurm starts it
            await self.hub.update_run(started=time.time(), status=RunStatus.RUNNING.value)
        self._start_samplers()
        self._start_monitors()
        watcher = asyncio.create_task(self._watch(), name="run-monitors")
        node_waits = [asyncio.create_task(self._wait_node(handle)) for handle in self.nodes]
        all_done = asyncio.gather(*node_waits)
        stop_task = asyncio.create_task(self._stop_requested.wait())
        either: set[asyncio.Future[Any]] = {all_done, stop_task}
        await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
        stopped = stop_task.done() and not all_done.done()
        if stopped:
            await self.hub.update_run(status=RunStatus.STOPPING.value)
            self.hub.add_event(EventKind.STOPPING, None,
                               f"stopping the job ({describe_stop_reason(self._stop_reason)})",
                               stopped_by=describe_stop_reason(self._stop_reason))
            forced = asyncio.create_task(self._escalate_on_force())
            await self._stop_nodes(force=self._force_requested.is_set())
            forced.cancel()
        else:
            stop_task.cancel()
        codes = await all_done
        watcher.cancel()
        self._stop_samplers()
        await self._await_final_messages()
        exit_code = next((code for code in codes if code), 0)
        if stopped:  # one code whoever asked (runner.exit_status); 137 when it had to be killed
            exit_code = stopped_run_exit_code(killed=self._force_requested.is_set() or EXIT_KILLED in codes)
        return await self._finish(exit_code, stopped)

    async def _wait_node(self, handle: NodeHandle) -> int:
        """The node's torchrun exit status. Never raises: a node that cannot be waited for
        counts as failed, and a node end the store cannot take (a full disk) is still the
        node's end; either is said in an event rather than crashing the runner mid-run."""
        try:
            code = await handle.wait()
        except Exception as error:
            self.hub.add_event(EventKind.WARNING, None, f"lost track of node {handle.node.host}'s torchrun: {error}")
            code = EXIT_NOT_STARTED
        if getattr(handle, "lost_at", None) is not None:
            return code  # a remote node that dropped out: already recorded LOST, with the time
        if self.slurm is not None:
            return code  # runner.slurm records its nodes as Slurm reports them
        # a stop on request ends torchrun with SIGTERM's or SIGKILL's status: that is no failure of the node's
        state = (NodeState.EXITED if code == 0 else NodeState.STOPPED if self._stop_requested.is_set()
                 else NodeState.FAILED)
        try:
            await self.hub.update_node(handle.node.node_rank, handle.node.host, state.value,
                                       detail=f"torchrun exit status {code}")
        except Exception as error:
            self.hub.add_event(EventKind.WARNING, None, f"could not record the end of node {handle.node.host}: {error}")
        return code

    async def _stop_nodes(self, force: bool) -> None:
        await asyncio.gather(*(handle.stop(STOP_GRACE_SECONDS, force=force) for handle in self.nodes),
                             return_exceptions=True)

    async def _escalate_on_force(self) -> None:
        """A forced stop during a graceful one (second Ctrl-C, "Force" in the GUI) kills now."""
        await self._force_requested.wait()
        await self._stop_nodes(force=True)

    async def _await_final_messages(self) -> None:
        """Workers flush their queues on exit; give their connections a moment to drain."""
        deadline = time.monotonic() + FINAL_MESSAGES_WAIT_SECONDS
        while self.hub.worker_connections > 0 and time.monotonic() < deadline:
            await asyncio.sleep(0.05)

    # ---- the end -------------------------------------------------------------------------

    def _final_rank_states(self, summary: dict[str, Any], stopped: bool) -> None:
        first = (summary.get("first_failure") or {}).get("rank")
        failed_with_exception = set(self.triage_input.exceptions)
        report = self.triage_input.report
        # One exit code per rank everywhere: the one triage settled on (the OS's status from
        # torchrun's report beats the rank's own last word; runner.exit_status).
        triaged = {failure["rank"]: failure.get("exit_code")
                   for failure in [summary.get("first_failure") or {}, *(summary.get("other_failures") or [])]
                   if failure.get("rank") is not None}
        # Ended because another rank failed (torchrun's SIGTERM, a peer gone): stopped (runner.exit_status).
        after_another = {failure["rank"] for failure in summary.get("other_failures") or []
                         if failure.get("after") is not None}
        for row in self.hub.model.ranks.values():
            state = RankState(row.state)
            reported = report.for_rank(row.rank) if report else None
            if triaged.get(row.rank) is not None:
                row.exit_code = triaged[row.rank]
            elif reported is not None and reported.exit_code is not None and (
                    row.exit_code is None or reported.exit_code < 0):
                row.exit_code = reported.exit_code
            if state == RankState.EXITED and row.exit_code == 0:
                continue
            if state == RankState.LOST:  # its node dropped out (runner.remote)
                continue
            if row.rank == first or (row.rank in failed_with_exception and not stopped
                                     and row.rank not in after_another):
                new_state = RankState.FAILED
            elif stopped or summary["outcome"] == "failed":
                new_state = RankState.STOPPED
            else:
                new_state = RankState.EXITED
            self.hub.model.on_exit(row.rank, row.exit_code, new_state)

    async def _finish(self, exit_code: int, stopped: bool) -> int:
        # Slurm ending the job (time limit, preemption, a scancel from outside) stopped the ranks.
        ranks_stopped = stopped or (self.slurm is not None and self.slurm.ended_from_outside)
        if self.printed_metrics is not None:
            self.printed_metrics.finish()  # every rank's lines and steps are in
        for monitor in self.monitors:  # their last word, over the whole run
            conclude = getattr(monitor, "conclude", None)
            if conclude is not None:
                try:
                    conclude()
                except Exception as error:  # a broken monitor must not lose the run's end
                    self.hub.add_event(EventKind.WARNING, None, f"monitor {type(monitor).__name__} failed: {error}")
        stop = (StopRequest(describe_stop_reason(self._stop_reason),
                            killed=exit_code == stopped_run_exit_code(killed=True)) if stopped else None)
        # What the store lacks (records dropped, refused, a full disk) is in the summary and its headline.
        concluded = conclude_summary(self.evidence.conclude(), exit_code, ranks_stopped, stop, self.hub.losses())
        self._final_rank_states(concluded.to_wire(), ranks_stopped)
        status = RunStatus.STOPPED if stopped else RunStatus.SUCCEEDED if exit_code == 0 else RunStatus.FAILED
        if self.slurm is not None:  # Slurm's own record of the end, in the summary
            concluded, status, exit_code = await self.slurm.conclude(concluded, status, exit_code)
        summary = concluded.to_wire()
        self.hub.add_event(EventKind.RUN_FINISHED, None, concluded.headline, status=status.value,
                           exit_code=exit_code, summary=summary)
        await self.hub.update_run(ended=time.time(), status=status.value, exit_code=exit_code, summary=summary)
        await self.hub.close(reason=status.value)
        self.exit_code = exit_code
        return exit_code

    async def _finish_unstarted(self, message: str) -> int:
        summary = RunSummary(Outcome.FAILED, message, EXIT_NOT_STARTED).to_wire()
        self.hub.add_event(EventKind.RUN_FINISHED, None, message, status=RunStatus.FAILED.value,
                           exit_code=EXIT_NOT_STARTED, summary=summary)
        await self.hub.update_run(ended=time.time(), status=RunStatus.FAILED.value, exit_code=EXIT_NOT_STARTED,
                                  summary=summary)
        await self.hub.close(reason=RunStatus.FAILED.value)
        self.exit_code = EXIT_NOT_STARTED
        return EXIT_NOT_STARTED
