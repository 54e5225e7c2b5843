"""The diagnosis monitors of one job, wired to its hub: what ``Run._start_monitors`` starts.

* ``RankFacts``: copies what triage needs from the live model (pids for the
  kernel log, local ranks for error files, GPUs for "two ranks on one GPU", the
  allocator's peaks for "CUDA out of memory");
* ``StackCapture``: every rank's stacks on demand (``Run.dump_stacks``, the
  GUI's button, ``rankwatch stacks``) and on a stall;
* ``StallMonitor``: hang detection (needs the step telemetry of instrumentation);
  it also tells each capture, and the Flight Recorder comparison after it, which ranks
  progress (``progress_of``);
* ``LaunchChecks``: scripts that do not fit torchrun (``notice`` messages, the
  holder of a port a rank could not listen on);
* ``IndependentRanks``: ranks that train without a process group, as copies of one
  training or each on its own (their ``no_process_group`` notices and first losses);
* ``FlightRecorderMonitor``: the ranks' Flight Recorders, read after each stack
  capture, compared when ranks are stuck: the rank whose collectives are out of step;
* ``StepWindows``: every rank's recent measured steps and whole-run phase totals, read by
* ``StragglerMonitor``: the rank that slows every step beyond the machine's noise, and in
  which phase (named once it held, withdrawn by an event), and
* ``BottleneckMonitor``: what limits each rank and the run (input, communication, launch,
  compute, a straggler), live and at the end (``conclude``);
* ``ConsistencyMonitor``: parameter fingerprints across replicas (``hash_every > 0``).

Each has ``tick(now)``, called by the run every ``MONITOR_INTERVAL_SECONDS`` on the event loop
(less often when its tick is costly: ``pacing``), and may have ``conclude()``, called once
when the job has ended, before the summary is made; the ones that read worker messages are
also hub observers.
Everything they find is kept in ``triage_input.findings`` for the summary.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from runner.diagnosis.bottleneck import BottleneckMonitor
from runner.diagnosis.consistency import ConsistencyMonitor
from runner.diagnosis.flight_records import FlightRecorderMonitor
from runner.diagnosis.independent_ranks import IndependentRanks
from runner.diagnosis.launcher import LaunchChecks
from runner.diagnosis.stack_capture import StackCapture
from runner.diagnosis.stalls import StallMonitor
from runner.diagnosis.step_windows import StepWindows
from runner.diagnosis.stragglers import StragglerMonitor
from runner.diagnosis.triage import TriageInput
from runner.launch.process_tree import carries_marker


class RankFacts:
    """Keeps ``TriageInput``'s per-rank facts current from the hub's live model."""

    def __init__(self, hub, triage_input: TriageInput, local_node_ranks: set[int]):
        self.hub = hub
        self.triage_input = triage_input
        self.local_node_ranks = local_node_ranks

    def tick(self, now: float) -> None:
        data = self.triage_input
        for row in self.hub.model.ranks.values():
            if row.gpu_mem_peak is not None:  # the rank's own records: known wherever it ran
                data.gpu_mem_peaks[row.rank] = row.gpu_mem_peak
            if (row.node_rank or 0) not in self.local_node_ranks:
                data.remote_ranks.add(row.rank)  # its pid and files belong to another machine
                continue
            if row.pid:
                data.pids[row.rank] = row.pid
            if row.local_rank is not None:
                data.local_ranks[row.rank] = row.local_rank
            if row.gpu_index is not None:
                data.rank_gpus[row.rank] = (row.host, row.gpu_index)
        sizes = [row.world_size for row in self.hub.model.ranks.values() if row.world_size]
        if sizes:
            data.world_size = max(sizes)

    def conclude(self) -> None:
        """The facts as the job ended (the last records came after the last tick)."""
        self.tick(0.0)


def start_monitors(hub, launch, run_dir: Path, triage_input: TriageInput, run_key: str | None = None,
                   remote_capture: Callable[[list[Any]], list[int]] | None = None) -> list:
    """Create and hook up the monitors for a run (see the module docstring); ``run_key``: only
    processes carrying the run's marker are ever signalled for their stacks; ``remote_capture``:
    asks other nodes' agents for their ranks' stacks (``RemoteNodes.request_stacks``)."""
    telemetry = launch.spec.telemetry
    local_node_ranks = {node.node_rank for node in launch.nodes if node.is_local}
    triage_input.log_dir = str(run_dir / "torchrun")
    triage_input.single_node = len(launch.nodes) == 1
    triage_input.script_args = list(launch.spec.args)
    triage_input.self_spawn = launch.self_spawn
    triage_input.spawn_call = launch.launch_mode.spawn_call
    findings = triage_input.findings

    def is_local(row) -> bool:
        return (row.node_rank or 0) in local_node_ranks

    facts = RankFacts(hub, triage_input, local_node_ranks)
    is_ours = (lambda pid: carries_marker(pid, run_key)) if run_key else None
    capture = StackCapture(hub, run_dir / "stacks", is_local=is_local, on_result=findings.set_stacks,
                           is_ours=is_ours, remote_capture=remote_capture, proven_pid=hub.proven_pid)
    hub.add_observer(capture)
    launch_checks = LaunchChecks(hub, findings, triage_input, is_local=is_local)
    hub.add_observer(launch_checks)
    flight_records = FlightRecorderMonitor(hub, run_dir / "stacks", findings)
    hub.add_observer(flight_records)
    independent_ranks = IndependentRanks(hub, findings)
    hub.add_observer(independent_ranks)
    monitors: list = [facts, capture, launch_checks, independent_ranks, flight_records]
    if telemetry.instrument:
        stalls = StallMonitor(hub, telemetry.stall_timeout, capture=capture, findings=findings)
        capture.progress_of = flight_records.progress_of = stalls.progress_of
        monitors.append(stalls)
        windows = StepWindows()
        hub.add_observer(windows)
        stragglers = StragglerMonitor(hub, windows, findings)
        # in this order: the stragglers' conclude keeps the run's stragglers the bottleneck's end verdict reads
        monitors += [stragglers, BottleneckMonitor(hub, windows, stragglers, findings)]
    if telemetry.hash_every > 0:
        consistency = ConsistencyMonitor(hub, findings)
        hub.add_observer(consistency)
        monitors.append(consistency)
    facts.tick(0.0)
    return monitors
