"""The real runner of the scale benchmark, in a process of its own, with fake ranks and GPUs.

``runner.run.Run`` as ``rankwatch run`` drives it (its hub, the SQLite run store, the
publisher, the process sampler, the GPU sampler thread, the diagnosis monitors, the end
of the run and its ``bye``). Stood in for: torchrun, whose node is
:class:`FakeRanksNode` (it starts ``scale_ranks.py`` processes, each holding many
ranks with a connection each, and hands their printed lines to the run as torchrun's
captured output is handed over), and NVML, whose report (:class:`FakeNvml`) has 8 GPUs
per simulated node of 8 ranks. The GPU sampler's thread, its period and the way its
samples reach the hub are the runner's own.

Prints one JSON line (``run_id``, ``socket``, ``pid``) once every rank has said hello;
ends when the ranks have ended (the benchmark creates the stop file).

    python tests/bench/scale_runner.py --ranks 256 --rate 2 --workdir DIR
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
for _path in (str(REPO), str(REPO / "runner" / "worker_path"), str(REPO / "tests" / "gui")):
    if _path not in sys.path:
        sys.path.insert(0, _path)

from live_run import fake_spec  # noqa: E402

from runner.diagnosis.stragglers import StragglerMonitor  # noqa: E402
from runner.launch.nodes import NodeHandle  # noqa: E402
from runner.launch.output import OutputLine  # noqa: E402
from runner.profile.files import Profile  # noqa: E402
from runner.profile.resolve import MachineFacts  # noqa: E402
from runner.run import PreparedLaunch, Run, prepare_launch  # noqa: E402
from runner.sampling.gpu_report import GpuReport, GpuSnapshot  # noqa: E402
from runner.sampling.samplers import GpuSampler, ProcessSampler  # noqa: E402
from runner.state import RunStatus  # noqa: E402

RANKS_SCRIPT = Path(__file__).with_name("scale_ranks.py")
RANKS_PER_PROCESS = 256
READY_TIMEOUT_S = 600.0
GIB = 1 << 30


class FakeNvml:
    """NVML's report for ``count`` GPUs (8 per simulated node), busy, its readings varying."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.calls = 0

    def report(self, with_processes: bool = True, with_names: bool = True) -> GpuReport:
        self.calls += 1
        wobble = self.calls % 7
        return GpuReport(available=True, driver_version="550.0", cuda_driver_version="12.4", gpus=tuple(
            GpuSnapshot(index=index, name=None, uuid=None, memory_used=(60 + wobble) * GIB, memory_total=80 * GIB,
                        utilization=90.0 + wobble, power_watts=600.0 + wobble, temperature_c=70.0,
                        sm_clock_mhz=1980.0)
            for index in range(self.count)))


class FakeRanksNode(NodeHandle):
    """Stands in for torchrun on the run's node: ``scale_ranks.py`` processes of up to
    ``RANKS_PER_PROCESS`` ranks each; their printed lines go to the run."""

    def __init__(self, run: ScaleRun) -> None:
        self.node = run.launch.nodes[0]
        self.run = run
        self.processes: list[asyncio.subprocess.Process] = []
        self._readers: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        context = self.run.runner_context()
        world = self.run.launch.world_size
        for first in range(0, world, RANKS_PER_PROCESS):
            count = min(RANKS_PER_PROCESS, world - first)
            process = await asyncio.create_subprocess_exec(
                sys.executable, str(RANKS_SCRIPT),
                "--first", str(first), "--count", str(count), "--world-size", str(world),
                "--rate", str(self.run.rate), "--stop-file", str(self.run.workdir / "stop"),
                "--result", str(self.run.workdir / f"sent-{first}.json"),
                "--", context.socket, context.token, context.run_key,  # a token may begin with "-"
                stdout=asyncio.subprocess.PIPE, limit=1 << 20)
            self.processes.append(process)
            self._readers.append(asyncio.create_task(self._read(process)))

    async def _read(self, process: asyncio.subprocess.Process) -> None:
        assert process.stdout is not None
        while line := await process.stdout.readline():
            printed = json.loads(line)
            self.run._on_node_lines(self.node, [OutputLine(printed["rank"], "stdout", printed["text"],
                                                           printed["t"])])

    async def wait(self) -> int:
        codes = [await process.wait() for process in self.processes]
        await asyncio.gather(*self._readers)
        return next((code for code in codes if code), 0)

    async def stop(self, grace: float, force: bool = False) -> None:
        for process in self.processes:
            if process.returncode is None:
                process.kill()

    @property
    def pids(self) -> list[int]:
        return [process.pid for process in self.processes]


class ScaleRun(Run):
    """The real ``Run``; its node and NVML are fake (see the module)."""

    def __init__(self, prepared: PreparedLaunch, rate: float, workdir: Path, stragglers: bool = True) -> None:
        super().__init__(prepared)
        self.rate = rate
        self.workdir = workdir
        self.stragglers = stragglers
        """False: the straggler monitor is left out (to measure what the rest of the runner costs)."""

    def _start_monitors(self) -> None:
        super()._start_monitors()
        if not self.stragglers:
            self.monitors = [monitor for monitor in self.monitors if not isinstance(monitor, StragglerMonitor)]

    def _create_nodes(self) -> list[NodeHandle]:
        return [FakeRanksNode(self)]

    def _start_samplers(self) -> None:
        """The runner's own samplers, with NVML answering for the fake GPUs."""
        interval = self.spec.telemetry.sample_interval
        self._samplers = [
            ProcessSampler(interval, pids=self._local_pids, emit=self._thread_safe(self._on_process_rows)),
            GpuSampler(interval, emit=self._thread_safe(self._on_gpu_report), nvml=FakeNvml(self.launch.world_size)),
        ]
        for sampler in self._samplers:
            sampler.start()


def prepare(ranks: int, workdir: Path) -> PreparedLaunch:
    """A CPU launch of ``ranks`` processes on one node, prepared as ``rankwatch run`` prepares one."""
    script = workdir / "fake_train.py"
    script.write_text('"""Never run: scale_ranks.py stands in for it."""\n', encoding="utf-8")
    machine = MachineFacts(cpu_count=max(2, ranks), gpus=GpuReport(available=False, reason="no NVIDIA driver"))
    return prepare_launch(Profile("scale", None, fake_spec(script, ranks, None)), machine, probe_interpreter=False,
                          check_ports=False)


async def until_running(run: Run, task: asyncio.Task[int]) -> None:
    """Wait until every rank said hello and the run is running (``LiveRun.until_running``, whose 30 s
    are too short for 1,024 ranks on a busy hub: here ``READY_TIMEOUT_S``).

    Raises:
        RuntimeError: the run ended before that.
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
            raise TimeoutError(f"{len(run.hub.model.ranks)} of {run.launch.world_size} ranks said hello "
                               f"in {READY_TIMEOUT_S:.0f} s")
        await asyncio.sleep(0.05)


async def serve(ranks: int, rate: float, workdir: Path, stragglers: bool) -> int:
    run = ScaleRun(prepare(ranks, workdir), rate, workdir, stragglers)
    started = time.monotonic()
    task = asyncio.create_task(run.execute())
    await until_running(run, task)
    info: dict[str, Any] = {"run_id": run.run_id, "socket": str(run.socket_path), "pid": os.getpid(),
                            "ready": time.time(), "hellos_s": time.monotonic() - started}
    print(json.dumps(info), flush=True)
    return await task


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, required=True)
    parser.add_argument("--rate", type=float, default=2.0, help="steps per second per rank")
    parser.add_argument("--workdir", type=Path, required=True, help="stop file and the ranks' sent counts")
    parser.add_argument("--without-stragglers", dest="stragglers", action="store_false",
                        help="leave the straggler monitor out")
    parser.add_argument("--profile", type=Path, default=None,
                        help="write a cProfile of the runner's event loop thread here (pstats format)")
    args = parser.parse_args()
    if args.profile is None:
        return asyncio.run(serve(args.ranks, args.rate, args.workdir, args.stragglers))
    import cProfile

    profiler = cProfile.Profile()
    try:
        return profiler.runcall(asyncio.run, serve(args.ranks, args.rate, args.workdir, args.stragglers))
    finally:
        profiler.dump_stats(args.profile)


if __name__ == "__main__":
    sys.exit(main())
