"""A real runner whose node is fake: what the GUI tests and the frame benchmark watch.

:class:`LiveRun` runs the real runner object, ``runner.run.Run`` (its hub, the run
store, the process sampler, the diagnosis monitors, how a run is stopped and how it
ends, the ``bye``), on an event loop in a thread of this process. Only torchrun and
the training script are stood in for: each node of the run is a :class:`FakeNode`
whose ranks are :class:`FakeWorker` s, small fake workers that connect to the hub's
socket and speak the real protocol with the contract's typed messages (``Hello``,
``metrics`` lines, ``Heartbeat``, ``Exit``), as ``rankwatch._reporter`` does, and
whose printed lines reach the run the way the node supervisor hands them over.

The training is simulated, seeded: the loss falls, one slow rank waits for its data
(a straggler) or computes a longer forward while the others wait for it in their
collectives (``slow_phase="forward"``), every rank prints a line every ten steps, the
launcher prints how many steps an epoch has. Each step goes as the zero-code
instrumentation sends it, one step row (``protocol.STEP_ROW_LENGTH``) with its phases
on the CPU's clock (or the GPU's), some of them skipped by ``GradScaler`` if asked. What each rank sent is kept (:meth:`LiveRun.sent`), so a test can
compare it with what the GUI shows. A worker's pid is this process's (the fake ranks
live here), so the real process sampler measures a real process.

A test drives the run: :meth:`LiveRun.fail_rank`, :meth:`LiveRun.notice` (a rank's
launch notice), :meth:`LiveRun.finish` (every rank exits), :meth:`LiveRun.vanish` (the
runner dies without a word); a subscriber's stop and dump requests reach the real
``Run`` (and are recorded in ``received``). :meth:`LiveRun.vanish` and ``FakeRun``
reach into the runner's internals (``Run._create_nodes``, the hub's server and writer):
the one place that must follow when those change.

As a program, in a process of its own. ``serve`` (the frame benchmark, screenshots)
prints one JSON line (``run_id``, ``socket``, ``pid``) once every rank has said hello,
and runs until its ranks are done or it gets SIGTERM / SIGINT (a graceful stop).
``run --detach --json SPEC`` stands in for ``python -m runner run --detach --json
SPEC`` (what the GUI's launch runs): the spec file is read and checked by the runner's
own code (an invalid one gets the runner's JSON errors, exit 2), then a runner for it
starts in a session of its own with fake ranks (``nproc_per_node`` of them, or
``$LIVE_RUN_RANKS``), and its ready line (``run_id``, ``socket``, ``pid``, ``log``) is
printed::

    python tests/gui/live_run.py serve --ranks 64 --rate 10 [--start-step N] [--steps N]
    python tests/gui/live_run.py run --detach --json SPEC.toml
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import random
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
for _path in (str(REPO_ROOT), str(REPO_ROOT / "runner" / "worker_path"), str(Path(__file__).parent)):
    if _path not in sys.path:
        sys.path.insert(0, _path)

from loop_thread import LoopThread  # noqa: E402

from rankwatch import protocol  # noqa: E402
from runner.cli.output import spec_errors_json  # noqa: E402
from runner.hub.observer import HubObserver  # noqa: E402
from runner.launch.command import RunnerContext  # noqa: E402
from runner.launch.nodes import NodeHandle  # noqa: E402
from runner.launch.output import OutputLine  # noqa: E402
from runner.profile.files import Profile, read_spec_file  # noqa: E402
from runner.profile.parse import SpecErrors  # noqa: E402
from runner.profile.resolve import MachineFacts, ResolvedNode  # noqa: E402
from runner.profile.spec import CPU, LaunchSpec, NodeSpec, RendezvousSpec  # noqa: E402
from runner.run import PreparedLaunch, Run, prepare_launch  # noqa: E402
from runner.sampling.gpu_report import GpuReport  # noqa: E402
from runner.state import RunStatus  # noqa: E402

HEARTBEAT_S = 1.0
USUAL_SPLIT = {"h2d": 0.03, "forward": 0.30, "backward": 0.45, "comm": 0.10, "optimizer": 0.08, "rest": 0.04}
"""How a rank's step past its data wait is split into the other phases (``protocol.PHASES``)."""
WAITED_SPLIT = {"h2d": 0.03, "forward": 0.22, "backward": 0.35, "comm": 0.30, "optimizer": 0.06, "rest": 0.04}
"""The same, for a rank that waits for a slower one in its collectives (``slow_phase`` "forward")."""
SLOW_FORWARD_SPLIT = {"h2d": 0.03, "forward": 0.50, "backward": 0.35, "comm": 0.02, "optimizer": 0.06, "rest": 0.04}
"""The slower one: a longer forward, and next to nothing to wait for."""
KILLED = -9
TERMINATED = -15
READY_TIMEOUT_S = 30.0


@dataclass
class Training:
    """What the fake ranks of one run do, step by step (shared by its nodes)."""

    world_size: int
    rate_hz: float = 10.0
    total_steps: int | None = None
    steps_per_epoch: int = 50
    slow_rank: int | None = 5
    """The straggler: 1.6x the step time, 55% of it waiting for data (``slow_phase`` "data"), or
    a forward of 0.50 of its step against 0.22 on the others, who wait for it in ``comm`` (0.30 of
    theirs against its 0.02; ``slow_phase`` "forward": every rank's step time alike, as under DDP)."""
    slow_phase: str = "data"
    skipped_steps: frozenset[int] = frozenset()
    """Steps every rank's ``GradScaler`` skipped."""
    clock: str | None = protocol.CLOCK_CPU
    """The clock the phases are timed on (``protocol.CLOCKS``); None: no phases measured."""
    start_step: int = 0
    stop_delay_s: float = 0.3
    """How long a rank takes to end after SIGTERM (a graceful stop)."""
    seed: int = 0
    step: int = -1
    """The newest step any rank sent."""
    sent: dict[tuple[int, str], list[float]] = field(default_factory=dict)
    random: random.Random = field(init=False)

    def __post_init__(self) -> None:
        self.random = random.Random(self.seed)
        if self.slow_rank is not None and self.slow_rank >= self.world_size:
            self.slow_rank = None

    def metrics(self, rank: int, step: int, now: float) -> tuple[list[list[Any]], float]:
        """One step of ``rank``: its step row (and any other wire items ``[t, step, name, value,
        source]``) and its loss. ``sent`` keeps each record the hub makes of them, by name."""
        noise = self.random.random
        loss = 2.3 * math.exp(-step / 150.0) + 0.05 * rank / self.world_size + 0.08 * noise()
        slow = rank == self.slow_rank
        slow_data = slow and self.slow_phase == "data"
        step_time = 0.1 * (1.6 if slow_data else 1.0) * (1 + 0.15 * noise())
        data_wait = step_time * (0.55 if slow_data else 0.08 + 0.05 * noise())
        samples = 32
        phases = None
        if self.clock is not None:
            split = SLOW_FORWARD_SPLIT if slow and self.slow_phase == "forward" else (
                WAITED_SPLIT if self.slow_rank is not None and self.slow_phase == "forward" else USUAL_SPLIT)
            working = step_time - data_wait
            phases = [self.clock, data_wait, *(working * split[phase] for phase in protocol.PHASES[1:])]
        skipped = step in self.skipped_steps
        row = [now, step, loss, step_time, data_wait, samples, None, skipped, phases]
        items: list[list[Any]] = [row]
        if step % self.steps_per_epoch == 0:
            items.append([now, step, "epoch", float(step // self.steps_per_epoch), "log"])
        for _rank, _t, _step, name, value, _source in protocol.step_row_records(rank, row):
            self.sent.setdefault((rank, name), []).append(value)
        for item in items[1:]:
            self.sent.setdefault((rank, item[2]), []).append(item[3])
        return items, loss

    def printed(self, rank: int, step: int, loss: float) -> str | None:
        """The line ``rank`` prints at ``step``, if any."""
        if step % 10 == 0 and (rank == 0 or self.world_size <= 8):
            return f"epoch {step // self.steps_per_epoch} step {step} loss: {loss:.4f}"
        return None

    def banner(self) -> str:
        """What the launcher prints first."""
        return f"fake torchrun: {self.world_size} ranks, {self.steps_per_epoch} steps per epoch"


class FakeWorker:
    """One rank: a connection to the hub speaking the real protocol (as ``rankwatch._reporter``)."""

    def __init__(self, rank: int, local_rank: int, node: ResolvedNode, world_size: int,
                 context: RunnerContext) -> None:
        self.rank = rank
        self.local_rank = local_rank
        self.node = node
        self.world_size = world_size
        self.context = context
        self.writer: asyncio.StreamWriter | None = None
        self.items_sent = 0
        self.step: int | None = None
        self.exit_code: int | None = None
        """Set when the rank ended: its exit status, or minus the signal that ended it."""
        self._last_heartbeat = 0.0

    @property
    def running(self) -> bool:
        return self.exit_code is None

    async def connect(self) -> None:
        """Connect and say hello. Raises OSError when the hub's socket cannot be reached."""
        _reader, self.writer = await asyncio.open_unix_connection(self.context.socket)
        self.writer.write(protocol.Hello(
            rank=self.rank, token=self.context.token, run_key=self.context.run_key, local_rank=self.local_rank,
            node_rank=self.node.node_rank, world_size=self.world_size, local_world_size=self.node.processes,
            host=self.node.host, pid=os.getpid(), python=sys.executable,
            python_version=".".join(map(str, sys.version_info[:3])), restart=0,
            argv=["fake_train.py"]).encode())
        await self.writer.drain()

    def send_step(self, items: list[list[Any]], step: int, now: float) -> None:
        assert self.writer is not None
        self.writer.write(protocol.encode_metric_items(self.rank, items))
        self.items_sent += sum(protocol.step_row_size(item) if len(item) == protocol.STEP_ROW_LENGTH else 1
                               for item in items)  # in records, as the reporter counts
        self.step = step
        if now - self._last_heartbeat >= HEARTBEAT_S:
            self._last_heartbeat = now
            self.writer.write(protocol.Heartbeat(self.rank, now, step, dropped=0, sent=self.items_sent).encode())

    def notice(self, key: str, facts: dict[str, Any]) -> None:
        """What the worker side noticed about the launch (``rankwatch._launch_checks``)."""
        if self.running and self.writer is not None:
            self.writer.write(protocol.Notice(self.rank, time.time(), key, facts).encode())

    def exit(self, code: int) -> None:
        """The script ended with ``code``: its last message, then the connection closes."""
        if not self.running or self.writer is None:
            return
        self.writer.write(protocol.Exit(self.rank, time.time(), code).encode())
        self.writer.close()
        self.exit_code = code

    def die(self, signal_number: int) -> None:
        """Ended by a signal: no last message, the connection just drops."""
        if not self.running:
            return
        self.exit_code = signal_number
        if self.writer is not None and self.writer.transport is not None:
            self.writer.transport.abort()


class FakeNode(NodeHandle):
    """Stands in for torchrun on one node: its ranks are fake workers on the runner's loop.

    ``start`` connects every rank (each says hello); the training then steps at the
    training's rate until every rank has ended. ``stop`` is torchrun's SIGTERM (ranks end
    ``stop_delay_s`` later, without an exit message), then SIGKILL after ``grace``.
    """

    def __init__(self, node: ResolvedNode, ranks: list[int], training: Training, context: RunnerContext,
                 on_lines: Callable[[ResolvedNode, list[OutputLine]], None]) -> None:
        self.node = node
        self.training = training
        self.workers = {rank: FakeWorker(rank, local_rank, node, training.world_size, context)
                        for local_rank, rank in enumerate(ranks)}
        self._on_lines = on_lines
        self._done: asyncio.Future[int] | None = None
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._done = asyncio.get_running_loop().create_future()
        for worker in self.workers.values():
            await worker.connect()
        self._task = asyncio.create_task(self._train(), name=f"fake-node-{self.node.node_rank}")

    async def wait(self) -> int:
        assert self._done is not None
        return await asyncio.shield(self._done)

    async def stop(self, grace: float, force: bool = False) -> None:
        if force or self._done is None:
            self._end_all(KILLED)
            return
        # SIGTERM: the ranks end ``stop_delay_s`` later, or SIGKILL at ``grace``; returns
        # as soon as they have ended (a forced stop meanwhile ends them at once).
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.shield(self._done), min(self.training.stop_delay_s, grace))
        if not self._done.done():
            self._end_all(TERMINATED if self.training.stop_delay_s <= grace else KILLED)

    def fail_rank(self, rank: int, code: int) -> None:
        worker = self.workers.get(rank)
        if worker is not None:
            worker.exit(code)
            self._lines([OutputLine(rank, "stderr", "RuntimeError: CUDA out of memory (simulated)", time.time())])
            self._settle()

    def finish(self, code: int) -> None:
        for worker in self.workers.values():
            worker.exit(code)
        self._settle()

    def _end_all(self, signal_number: int) -> None:
        for worker in self.workers.values():
            worker.die(signal_number)
        self._settle()

    def _settle(self) -> None:
        """Once every rank has ended, torchrun exits: 0, or the first failure's status."""
        if self._done is None or self._done.done() or any(w.running for w in self.workers.values()):
            return
        codes = [w.exit_code for w in self.workers.values()]
        self._done.set_result(next((code for code in codes if code), 0))
        if self._task is not None:
            self._task.cancel()

    def _lines(self, lines: list[OutputLine]) -> None:
        if lines:
            self._on_lines(self.node, lines)

    async def _train(self) -> None:
        training = self.training
        period = 1.0 / training.rate_hz
        next_tick = time.monotonic()
        step = training.start_step
        if self.node.node_rank == 0:
            self._lines([OutputLine(None, "stdout", training.banner(), time.time())])
        while True:
            now = time.time()
            lines = []
            for rank, worker in self.workers.items():
                if not worker.running:
                    continue
                items, loss = training.metrics(rank, step, now)
                worker.send_step(items, step, now)
                printed = training.printed(rank, step, loss)
                if printed is not None:
                    lines.append(OutputLine(rank, "stdout", printed, now))
            training.step = max(training.step, step)
            self._lines(lines)
            step += 1
            if training.total_steps is not None and step - training.start_step >= training.total_steps:
                self.finish(0)
                return
            next_tick += period
            delay = next_tick - time.monotonic()
            if delay < 0:
                next_tick = time.monotonic()
            await asyncio.sleep(max(0.0, delay))


class FakeRun(Run):
    """The real ``Run``; only its nodes are fake (see the module)."""

    def __init__(self, prepared: PreparedLaunch, training: Training, layout: list[int],
                 on_ready: Callable[[dict[str, Any]], None] | None = None) -> None:
        super().__init__(prepared, on_ready=on_ready)
        self.training = training
        self.layout = layout
        """The node rank of each rank."""

    def _create_nodes(self) -> list[NodeHandle]:
        context = self.runner_context()
        return [FakeNode(node, [rank for rank, node_rank in enumerate(self.layout) if node_rank == node.node_rank],
                         self.training, context, self._on_node_lines)
                for node in self.launch.nodes]


class RequestRecorder(HubObserver):
    """What subscribers asked the hub for, as the hub reported it, in the wire's words
    (``{"type": "stop", "v": 1, "force": False}``)."""

    def __init__(self) -> None:
        self.received: list[dict[str, Any]] = []

    def _record(self, message: protocol.Message) -> None:
        self.received.append(protocol.decode(message.encode(), protocol.SUBSCRIBER_TYPES))

    def on_stop_requested(self, force: bool) -> None:
        self._record(protocol.StopRequest(force=force))

    def on_dump_stacks(self) -> None:
        self._record(protocol.DumpStacks())


def fake_spec(script: Path, ranks: int, hosts: tuple[str, ...] | None) -> LaunchSpec:
    """A CPU launch of ``script``: one node, or one node per host in ``hosts``."""
    base = LaunchSpec(script=str(script), args=("--epochs", "4"), gpus=CPU, nproc_per_node=ranks)
    if not hosts:
        return base
    per_node = [sum(1 for rank in range(ranks) if rank % len(hosts) == n) for n in range(len(hosts))]
    return LaunchSpec(script=str(script), args=base.args, gpus=CPU, nproc_per_node=per_node[0],
                      nodes=tuple(NodeSpec(host=host, processes=count) for host, count in zip(hosts, per_node, strict=True)),
                      rendezvous=RendezvousSpec(mode="c10d", endpoint=f"{hosts[0]}:29400", job_id="fake"))


class LiveRun:
    """A real runner in this process with fake ranks (see the module); ``start()`` returns once
    every rank has said hello and the run is running.

    ``hosts``: one node per host, ranks dealt round-robin over them (rank ``r`` on node
    ``r % len(hosts)``); ``None``: one node, this machine. ``spec``: the launch spec to run
    (one node) instead of a CPU launch of a script made up here.
    """

    def __init__(self, ranks: int = 8, rate_hz: float = 10.0, total_steps: int | None = None, profile: str = "fake",
                 steps_per_epoch: int = 50, slow_rank: int | None = 5, stop_delay_s: float = 0.3, seed: int = 0,
                 start_step: int = 0, hosts: tuple[str, ...] | None = None, spec: LaunchSpec | None = None,
                 slow_phase: str = "data", skipped_steps: frozenset[int] = frozenset(),
                 clock: str | None = protocol.CLOCK_CPU) -> None:
        self.training = Training(world_size=ranks, rate_hz=rate_hz, total_steps=total_steps,
                                 steps_per_epoch=steps_per_epoch, slow_rank=slow_rank, start_step=start_step,
                                 stop_delay_s=stop_delay_s, seed=seed, slow_phase=slow_phase,
                                 skipped_steps=skipped_steps, clock=clock)
        self.world_size = ranks
        self.profile = profile
        self.hosts = hosts
        self.layout = [rank % len(hosts) if hosts else 0 for rank in range(ranks)]
        self.spec = spec
        self.recorder = RequestRecorder()
        self.run: FakeRun | None = None
        self.exit_code: int | None = None
        self._script_dir = tempfile.TemporaryDirectory(prefix="rw-fake-")
        self._thread: LoopThread | None = None
        self._task: asyncio.Task[int] | None = None
        self._ended = threading.Event()

    # ---- life ------------------------------------------------------------------------

    def prepare(self, on_ready: Callable[[dict[str, Any]], None] | None = None) -> FakeRun:
        """The run (see :meth:`launch_plan`); ``on_ready`` as ``Run``'s."""
        run = FakeRun(self.launch_plan(), self.training, self.layout, on_ready)
        run.hub.add_observer(self.recorder)
        return run

    def launch_plan(self) -> PreparedLaunch:
        """The launch, prepared as ``rankwatch run`` prepares one (no interpreter probe, no ports).

        Raises:
            SpecErrors: the spec is invalid (in the words ``rankwatch run`` uses).
        """
        spec = self.spec
        if spec is None:
            script = Path(self._script_dir.name) / "fake_train.py"
            script.write_text('"""Never run: the fake node\'s workers stand in for it."""\n', encoding="utf-8")
            spec = fake_spec(script, self.world_size, self.hosts)
        machine = MachineFacts(cpu_count=max(2, self.world_size),
                               gpus=GpuReport(available=False, reason="no NVIDIA driver"))
        return prepare_launch(Profile(self.profile, None, spec), machine, probe_interpreter=False, check_ports=False)

    def start(self) -> LiveRun:
        self._thread = LoopThread("live-run")
        self._thread.run(self._start())
        return self

    async def _start(self) -> None:
        run = self.run = self.prepare()
        self._task = asyncio.create_task(run.execute(), name="live-run-execute")
        self._task.add_done_callback(self._on_ended)
        await self.until_running(run, self._task)

    @staticmethod
    async def until_running(run: Run, task: asyncio.Task[int]) -> None:
        """Wait until every rank said hello and the run is running.

        Raises:
            RuntimeError: the run ended (or failed) before that.
            TimeoutError: not within ``READY_TIMEOUT_S``.
        """
        deadline = time.monotonic() + READY_TIMEOUT_S
        while True:
            row = run.hub.run_row
            if row is not None and row.status == RunStatus.RUNNING.value and len(run.hub.model.ranks) >= run.launch.world_size:
                return
            if task.done():
                raise RuntimeError(f"the run ended before it ran: {task.exception() or task.result()}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"the run did not start in {READY_TIMEOUT_S} s")
            await asyncio.sleep(0.02)

    def _on_ended(self, task: asyncio.Task[int]) -> None:
        if not task.cancelled() and task.exception() is None:
            self.exit_code = task.result()
        self._ended.set()

    # ---- what a test reads -----------------------------------------------------------

    @property
    def run_id(self) -> int:
        assert self.run is not None and self.run.run_id is not None
        return self.run.run_id

    @property
    def socket_path(self) -> str:
        assert self.run is not None and self.run.socket_path is not None
        return str(self.run.socket_path)

    @property
    def step(self) -> int:
        """The newest step the ranks sent."""
        return self.training.step

    @property
    def ended(self) -> bool:
        """The runner has finished the run (recorded its end, said bye), or vanished."""
        return self._ended.is_set()

    @property
    def received(self) -> list[dict[str, Any]]:
        return self.recorder.received

    def sent(self, rank: int, name: str) -> list[float]:
        """Every value of ``name`` that ``rank`` sent, in order."""
        return list(self.training.sent.get((rank, name), ()))

    def subscriber_count(self) -> int:
        assert self.run is not None and self._thread is not None
        hub = self.run.hub
        return self._thread.call(lambda: sum(1 for s in hub.publisher.subscribers if s.name != "local"))

    # ---- what a test does ------------------------------------------------------------

    def _nodes(self) -> list[FakeNode]:
        assert self.run is not None
        return [node for node in self.run.nodes if isinstance(node, FakeNode)]

    def fail_rank(self, rank: int, exit_code: int = 1) -> None:
        """``rank``'s script fails with ``exit_code`` (the others go on)."""
        assert self._thread is not None
        self._thread.call(lambda: [node.fail_rank(rank, exit_code) for node in self._nodes()])

    def notice(self, rank: int, key: str, **facts: Any) -> None:
        """``rank`` reports a launch notice ``key`` (with ``facts``), as the worker side does."""
        assert self._thread is not None
        self._thread.call(lambda: [node.workers[rank].notice(key, facts) for node in self._nodes()
                                   if rank in node.workers])

    def finish(self, exit_code: int = 0) -> None:
        """Every rank still running ends with ``exit_code``; the runner then ends the run."""
        assert self._thread is not None
        self._thread.call(lambda: [node.finish(exit_code) for node in self._nodes()])

    def wait_ended(self, timeout: float = 30.0) -> None:
        if not self._ended.wait(timeout):
            raise TimeoutError(f"the run did not end in {timeout} s")

    def vanish(self) -> None:
        """The runner dies without a word (as if SIGKILLed): connections drop, no bye."""
        assert self._thread is not None
        self._thread.run(self._vanish())
        self._shut_down()

    async def _vanish(self) -> None:
        assert self.run is not None and self._task is not None
        run = self.run
        run.hub.server.stop_listening()
        for connection in list(run.hub.server.connections):
            if connection.writer.transport is not None:
                connection.writer.transport.abort()
        for node in self._nodes():
            node._end_all(KILLED)
        run._stop_samplers()  # the process is gone: nothing samples any more
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        await asyncio.get_running_loop().run_in_executor(None, run.hub.writer.close)

    def close(self) -> None:
        """Stop the run now if it is still going (SIGKILL) and wait for its end."""
        if self._thread is None:
            return
        if not self.ended and self.run is not None:
            self._thread.call(self.run.request_stop, True, "the test ended")
            self._ended.wait(30)
        self._shut_down()

    def _shut_down(self) -> None:
        if self._thread is not None:
            self._thread.stop()
            self._thread = None
        self._script_dir.cleanup()


# ---- as a program -------------------------------------------------------------------------


def _serve(live: LiveRun, ready: Callable[[dict[str, Any]], None] | None = None) -> int:
    """Run ``live`` on this thread's loop until it ends; print its JSON line once it runs
    (``ready``: say so as the detached runner does, as soon as it listens, instead)."""

    async def serve() -> int:
        run = live.run = live.prepare(on_ready=ready)
        task = asyncio.create_task(run.execute())
        await LiveRun.until_running(run, task)
        if ready is None:
            print(json.dumps({"run_id": run.run_id, "socket": str(run.socket_path), "pid": os.getpid(),
                              "host": socket.gethostname()}), flush=True)
        return await task

    try:
        return 0 if asyncio.run(serve()) == 0 else 1
    finally:
        live._script_dir.cleanup()


def _detach(spec_path: Path) -> int:
    """``rankwatch run --detach --json SPEC``, with fake ranks (see the module)."""
    try:
        spec = read_spec_file(spec_path)
        live = LiveRun(ranks=_ranks(spec), profile=spec_path.stem, spec=spec)
        live.launch_plan()  # checked as the real runner checks it, before anything starts
    except SpecErrors as errors:
        print(json.dumps(spec_errors_json(errors)), flush=True)
        return 2
    child = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "serve", "--spec", str(spec_path)],
                             stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, start_new_session=True)
    assert child.stdout is not None
    line = child.stdout.readline()
    child.stdout.close()
    if not line:
        print(json.dumps({"error": "the runner stopped before it was ready", "errors": []}), flush=True)
        return 1
    print(line.decode().strip(), flush=True)
    return 0


def _ranks(spec: LaunchSpec) -> int:
    forced = os.environ.get("LIVE_RUN_RANKS")
    if forced:
        return int(forced)
    return spec.nproc_per_node if isinstance(spec.nproc_per_node, int) else 2


def _ready_then_quiet(info: dict[str, Any]) -> None:
    """Print the ready line, then nothing more on stdout (the launcher has gone)."""
    print(json.dumps(info), flush=True)
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="run until the ranks are done (or SIGTERM / SIGINT)")
    serve.add_argument("--ranks", type=int, default=8)
    serve.add_argument("--rate", type=float, default=10.0, help="steps per second")
    serve.add_argument("--steps", type=int, default=None, help="end after this many steps (default: never)")
    serve.add_argument("--start-step", type=int, default=0, help="first step (continue a history)")
    serve.add_argument("--profile", default="fake")
    serve.add_argument("--spec", type=Path, default=None, help="run this spec file, as a detached runner")
    run = commands.add_parser("run", help="stands in for `python -m runner run --detach --json SPEC`")
    run.add_argument("spec", type=Path)
    run.add_argument("--detach", action="store_true", required=True)
    run.add_argument("--json", action="store_true", required=True)
    args = parser.parse_args(argv)
    if args.command == "run":
        return _detach(args.spec)
    if args.spec is not None:
        spec = read_spec_file(args.spec)
        return _serve(LiveRun(ranks=_ranks(spec), profile=args.spec.stem, spec=spec), ready=_ready_then_quiet)
    return _serve(LiveRun(ranks=args.ranks, rate_hz=args.rate, total_steps=args.steps, profile=args.profile,
                          start_step=args.start_step))


if __name__ == "__main__":
    sys.exit(main())
