"""GPU use in a run's record: `runs show` / `--json` / `list`, the CSV export (``steps.csv``,
``rank_summary.csv``), `rankwatch gpus` naming the run and rank of each process, and the
out-of-memory hint with the GPU's free memory and the rank's own peak.

Real parts: the run store (SQLite), the CLI, the real runner (``runner.run.Run`` with its hub,
GPU sampler and triage) whose ranks are the fake workers of ``tests/gui/live_run.py``; NVML is
the fake of ``tests/fakes/fake_pynvml.py`` (the gpu-reference H200)."""

from __future__ import annotations

import csv
import dataclasses
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from rankwatch import protocol
from rankwatch.protocol import GpuSample, MetricRecord
from runner.cli.main import main
from runner.profile.spec import TelemetrySpec
from runner.sampling import nvml
from runner.sampling.nvml import Nvml
from runner.sampling.process_names import (
    INITIAL_PID_NAMESPACE,
    local_process_name,
    with_local_names,
)
from runner.sampling.samplers import GpuSampler
from runner.store.rank_stats import RANK_SUMMARY_COLUMNS, run_statistics
from runner.store.store import STEP_TABLE_COLUMNS, RecordBatch, RunStore
from tests.fakes.fake_pynvml import (
    H200_MEMORY_TOTAL,
    FakeNvml,
    a100,
    gpu_reference_nvml,
    h200_training,
)
from tests.gui.live_run import LiveRun, fake_spec
from tests.jobs import REPO, rankwatch, wait_for

GIB = 1 << 30
GPU_TOTAL = 80 * GIB
UTILISATION = {0: [60.0, 80.0, 90.0, 70.0], 1: [10.0, 20.0, 30.0, 40.0]}
"""Each GPU's samples while the ranks made steps (t 100.5 .. 103.5): medians 75 and 25."""
PHASES = [0.001, 0.002, 0.010, 0.020, 0.004, 0.003, 0.001]
"""One step's phases in ``PHASES`` order (data, h2d, forward, backward, comm, optimizer, rest)."""


def step_rows(rank: int, clock: str) -> list:
    """Five measured steps (t 100 .. 104) as the hub stores a worker's step rows; step 2 skipped by
    GradScaler; no DataLoader (data wait not measured)."""
    records = []
    for step in range(5):
        row = [100.0 + step, step, 2.0 - 0.1 * step, 0.041, None, 32, 0.0005 if clock == "cpu" else None,
               step == 2, [clock, *PHASES]]
        records += protocol.step_row_records(rank, row)
    return records


@pytest.fixture
def gpu_run():
    """Rank 0 on GPU 0 with the allocator's readings; rank 1 on GPU 1 without them; rank 2 seen on no
    GPU (another node's, or a CPU rank): its GPU figures are not measured."""
    metrics = step_rows(0, "gpu") + step_rows(1, "gpu") + step_rows(2, "cpu")
    for t, allocated, reserved, peak in ((101.2, 1 * GIB, 1.5 * GIB, 2.5 * GIB), (103.2, 2 * GIB, 2.5 * GIB, 3 * GIB),
                                         (104.2, 2 * GIB, 2.5 * GIB, 2.75 * GIB)):  # the script reset its peak
        step = int(t) - 100
        metrics += [MetricRecord(0, t, step, protocol.GPU_MEMORY_ALLOCATED, allocated, "auto"),
                    MetricRecord(0, t, step, protocol.GPU_MEMORY_RESERVED, reserved, "auto"),
                    MetricRecord(0, t, step, protocol.GPU_MEMORY_PEAK, peak, "auto")]
    samples = []
    for index, values in UTILISATION.items():
        samples.append(GpuSample(98.0, index, 0.0, GIB, GPU_TOTAL, 80.0, 35.0, 345.0))  # loading: before any step
        samples += [GpuSample(100.5 + i, index, value, 5 * GIB, GPU_TOTAL, 300.0, 60.0, 1980.0)
                    for i, value in enumerate(values)]
        samples.append(GpuSample(105.5, index, 0.0, GIB, GPU_TOTAL, 80.0, 40.0, 345.0))  # after the last step
    with RunStore() as store:
        run_id = store.create_run(run_key="g" * 24, profile="gpu_train", spec_toml="", command="", host="h",
                                  workdir="/", runner_pid=1, socket=None, world_size=3, status="succeeded")
        store.update_run(run_id, started=97.0, ended=106.0, exit_code=0)
        for rank, gpu_index, used in ((0, 0, 3_902_799_872), (1, 1, 2 * GIB), (2, None, None)):
            store.upsert_rank(run_id, rank, state="exited", exit_code=0, host="h", pid=100 + rank, first_seen=97.5,
                              last_seen=105.0, gpu_index=gpu_index, gpu_mem_used_peak=used)
        store.write_batch(run_id, RecordBatch(metrics=metrics, gpu_samples=samples))
        cpu_run = store.create_run(run_key="c" * 24, profile="cpu_train", spec_toml="", command="", host="h",
                                   workdir="/", runner_pid=1, socket=None, world_size=1, status="succeeded")
        store.update_run(cpu_run, started=107.0, ended=109.0, exit_code=0)
        store.upsert_rank(cpu_run, 0, state="exited", exit_code=0, host="h", pid=200)
        store.write_batch(cpu_run, RecordBatch(metrics=step_rows(0, "cpu")))
    return run_id


def test_rank_statistics_give_each_ranks_gpu_from_the_samples_and_the_allocators_records(gpu_run):
    with RunStore(readonly=True) as store:
        first, second, third = run_statistics(store, gpu_run)[0]
    # the median over the samples taken while the rank made steps: not the loading, not the end
    assert (first.gpu_index, first.gpu_util, second.gpu_util) == (0, 75.0, 25.0)
    assert (first.gpu_mem_used_peak, first.gpu_mem_total) == (3_902_799_872, GPU_TOTAL)
    # allocated and reserved at the newest reading; the peak is the largest reading
    assert (first.gpu_mem_allocated, first.gpu_mem_reserved, first.gpu_mem_peak) == (2 * GIB, int(2.5 * GIB), 3 * GIB)
    assert second.gpu_mem_allocated is second.gpu_mem_reserved is second.gpu_mem_peak is None
    assert (third.gpu_index, third.gpu_util, third.gpu_mem_used_peak, third.gpu_mem_total, third.gpu_mem_peak) == (
        None, None, None, None, None)


def test_runs_show_has_gpu_columns_when_a_rank_has_them_and_says_what_they_mean(gpu_run, capsys):
    assert main(["runs", "show", str(gpu_run)]) == 0
    lines = capsys.readouterr().out.splitlines()
    header = next(line for line in lines if line.strip().startswith("rank  state"))
    assert re.search(r"samples/s\s+GPU\s+GPU %\s+GPU mem\s+torch mem\s+last seen", header), header
    cells = {row.split()[0]: re.split(r"\s{2,}", row.strip()) for row in lines
             if re.match(r"\s+\d\s+exited", row)}
    assert cells["0"][-5:-1] == ["0", "75%", "3.6/80.0 GiB", "2.0/2.5 GiB, peak 3.0 GiB"]
    assert cells["1"][-5:-1] == ["1", "25%", "2.0/80.0 GiB", "–"]
    assert cells["2"][-5:-1] == ["–", "–", "–", "–"]  # no GPU seen: not measured, never 0
    legend = [line.strip() for line in lines if line.strip().startswith(("GPU %:", "GPU mem:", "torch mem:"))]
    assert len(legend) == 3 and "median utilisation" in legend[0] and "NVML" in legend[1]


def test_runs_show_json_has_each_ranks_gpu_figures(gpu_run, capsys):
    assert main(["runs", "show", str(gpu_run), "--json"]) == 0
    ranks = {row["rank"]: row for row in json.loads(capsys.readouterr().out)["ranks"]}
    assert {key: ranks[0][key] for key in ("gpu_index", "gpu_util", "gpu_mem_used_peak", "gpu_mem_total",
                                           "gpu_mem_allocated", "gpu_mem_reserved", "gpu_mem_peak")} == {
        "gpu_index": 0, "gpu_util": 75.0, "gpu_mem_used_peak": 3_902_799_872, "gpu_mem_total": GPU_TOTAL,
        "gpu_mem_allocated": 2 * GIB, "gpu_mem_reserved": int(2.5 * GIB), "gpu_mem_peak": 3 * GIB}
    assert ranks[2]["gpu_util"] is None and ranks[2]["gpu_mem_peak"] is None


def test_the_end_of_a_run_shows_each_ranks_gpu_over_the_run_not_its_last_sample(gpu_run):
    """The live row holds the newest sample (the GPU idle once training ended); the end of
    `rankwatch run` shows the median and the most, from the store."""
    import io

    from rich.console import Console

    from runner.runstate.messages import Bye, RankInfo, RunInfo, SnapshotMessage
    from runner.view.terminal import TerminalView
    from tests.hub_messages import run_changes, update

    snapshot = SnapshotMessage(RunInfo(id=gpu_run, profile="gpu_train", status="running", started=97.0),
                               (RankInfo(rank=0, state="running", step=4, loss=1.6, gpu_index=0, gpu_util=3.0,
                                         gpu_mem_used=GIB),), spec={"args": []}).to_wire()
    ended = update(run=run_changes(id=gpu_run, profile="gpu_train", status="succeeded", started=97.0,
                                   ended=106.0)).to_wire()
    with RunStore(readonly=True) as store:
        stats = run_statistics(store, gpu_run)[0]
    plain_out = io.StringIO()
    plain = TerminalView(live=False, out=plain_out, err=io.StringIO(), status_every=30)
    for message in (snapshot, ended, Bye().to_wire()):
        plain.handle(message)
    plain.show_results(stats)
    lines = plain_out.getvalue().splitlines()
    assert next(line for line in lines if line.startswith("[rankwatch] rank 0 ")).endswith(
        ", GPU 0 75% (median), 3.6 GiB at most")
    assert not next(line for line in lines if line.startswith("[rankwatch] rank 2 ")).count("GPU")
    live = TerminalView(live=True, out=io.StringIO(), err=io.StringIO())
    for message in (snapshot, ended, Bye().to_wire()):
        live.handle(message)
    live.show_results(stats)
    screen = Console(file=io.StringIO(), width=200, color_system=None)
    screen.print(live._render())
    row = next(line for line in screen.file.getvalue().splitlines() if line.strip().startswith("0 "))
    assert " 75 " in row and "3.6 GiB" in row and "1.0 GiB" not in row, row


def test_runs_list_gives_one_gpu_figure_per_run(gpu_run, capsys):
    assert main(["runs", "list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[-3:] == ["GPU", "%", "profile"]
    by_profile = {line.split()[-1]: line.split() for line in lines[1:]}
    assert by_profile["gpu_train"][-2] == "50%"  # the median of its ranks' 75 % and 25 %
    assert by_profile["cpu_train"][-2] == "–"
    assert main(["runs", "list", "--json"]) == 0
    listed = {run["profile"]: run for run in json.loads(capsys.readouterr().out)}
    assert (listed["gpu_train"]["gpu_util"], listed["cpu_train"]["gpu_util"]) == (50.0, None)


def test_export_writes_every_step_side_by_side_and_each_ranks_summary(gpu_run, tmp_path, capsys):
    assert main(["runs", "export", str(gpu_run), "--csv", str(tmp_path / "csv")]) == 0
    written = {Path(line).name for line in capsys.readouterr().out.split()}
    assert {"steps.csv", "rank_summary.csv", "ranks.csv", "metrics.csv", "gpu_samples.csv"} <= written
    with (tmp_path / "csv" / "steps.csv").open() as handle:
        steps = list(csv.DictReader(handle))
    assert list(steps[0]) == list(STEP_TABLE_COLUMNS) == [
        "rank", "step", "t", "loss", "step_time", "data_wait", "samples_per_s", "cpu_wait", "skipped_step",
        "phase_clock", "phase_data", "phase_h2d", "phase_forward", "phase_backward", "phase_comm", "phase_optimizer",
        "phase_rest", "compute_time"]
    assert [(row["rank"], row["step"]) for row in steps] == [(str(r), str(s)) for r in range(3) for s in range(5)]
    first = steps[0]
    assert (float(first["loss"]), float(first["step_time"]), float(first["samples_per_s"])) == pytest.approx(
        (2.0, 0.041, 32 / 0.041))
    assert (first["data_wait"], first["cpu_wait"], first["phase_clock"], first["skipped_step"]) == ("", "", "gpu", "0")
    assert [float(first[f"phase_{phase}"]) for phase in protocol.PHASES] == pytest.approx(PHASES)
    assert float(first["compute_time"]) == pytest.approx(sum(PHASES) - PHASES[0] - PHASES[4])
    assert [row["skipped_step"] for row in steps[:5]] == ["0", "0", "1", "0", "0"]
    assert (steps[10]["phase_clock"], float(steps[10]["cpu_wait"])) == ("cpu", 0.0005)
    with (tmp_path / "csv" / "rank_summary.csv").open() as handle:
        summary = list(csv.DictReader(handle))
    assert list(summary[0]) == list(RANK_SUMMARY_COLUMNS)
    zero, _one, two = summary
    assert (zero["steps"], zero["skipped_steps"], zero["gpu_index"], zero["gpu_util"], zero["gpu_mem_peak"]) == (
        "5", "1", "0", "75.0", str(3 * GIB))
    assert float(zero["phase_forward_share"]) == pytest.approx(PHASES[2] / sum(PHASES))
    assert (zero["phase_clock"], two["phase_clock"]) == ("gpu", "cpu")
    assert two["gpu_util"] == two["gpu_mem_used_peak"] == two["gpu_mem_peak"] == ""  # not measured: empty


def fake_nvml_environment(tmp_path: Path, gpus: str) -> dict[str, str]:
    """The environment of a `rankwatch` whose ``import pynvml`` gets a fake with ``gpus`` (Python)."""
    shim = tmp_path / "nvml" / "pynvml.py"
    shim.parent.mkdir()
    shim.write_text("from tests.fakes.fake_pynvml import FakeNvml, a100\n"
                    f"_fake = FakeNvml({gpus})\n"
                    "globals().update(vars(_fake.module))\n")
    return dict(os.environ, PYTHONPATH=os.pathsep.join([str(shim.parent), str(REPO), str(REPO / "runner" / "worker_path")]))


def sleeper(run_key: str | None = None) -> subprocess.Popen:
    """A process of the run ``run_key`` (carrying its marker, as every process a run starts does), or of none."""
    env = dict(os.environ)
    env.pop("RANKWATCH_RUN_KEY", None)
    if run_key is not None:
        env["RANKWATCH_RUN_KEY"] = run_key
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], env=env)


def test_gpus_names_the_run_and_rank_of_each_process_a_live_run_started(tmp_path):
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    rank, helper, stranger, of_lost_run = sleeper("k" * 24), sleeper("k" * 24), sleeper(), sleeper("l" * 24)
    try:
        with RunStore() as store:  # a live run (its runner: this process) and a lost one (its runner is gone)
            live = store.create_run(run_key="k" * 24, profile="train", spec_toml="", command="", host="h",
                                    workdir="/", runner_pid=os.getpid(), socket=None, world_size=2, status="running")
            store.upsert_rank(live, 0, pid=rank.pid, state="running")
            store.upsert_rank(live, 1, pid=4_000_000, state="running")  # a rank on another node: its pid is not here
            lost = store.create_run(run_key="l" * 24, profile="old", spec_toml="", command="", host="h",
                                    workdir="/", runner_pid=gone.pid, socket=None, world_size=1, status="running")
            store.upsert_rank(lost, 0, pid=of_lost_run.pid, state="running")
        processes = [(rank.pid, 3 * GIB, "/opt/venv/bin/python3"), (helper.pid, GIB), (stranger.pid, 2 * GIB),
                     (of_lost_run.pid, GIB)]
        env = fake_nvml_environment(tmp_path, f"[a100(util=97, processes={processes!r}), a100(util=0)]")
        text = rankwatch("gpus", env=env)
        assert text.returncode == 0, text.stderr
        lines = [line.strip() for line in text.stdout.splitlines()]
        assert f"pid {rank.pid} python3 (3.0 GiB) — rank 0 of run {live} (train)" in lines
        assert any(re.fullmatch(rf"pid {helper.pid}( \S+)? \(1\.0 GiB\) — a process of run {live} \(train\)", line)
                   for line in lines), lines
        for pid, used in ((stranger.pid, "2.0"), (of_lost_run.pid, "1.0")):  # not ours, or of a run that is gone
            assert any(re.fullmatch(rf"pid {pid}( \S+)? \({used} GiB\)", line) for line in lines), lines
        assert any(line.startswith("GPU 1") and line.endswith("idle") for line in lines)
        listed = json.loads(rankwatch("gpus", "--json", env=env).stdout)
        owners = {p["pid"]: (p["run"], p["rank"], p["profile"]) for p in listed[0]["processes"]}
        assert owners == {rank.pid: (live, 0, "train"), helper.pid: (live, None, "train"),
                          stranger.pid: (None, None, None), of_lost_run.pid: (None, None, None)}
        assert listed[0]["processes"][0]["name"] == "/opt/venv/bin/python3"  # NVML's name, when it gives one
    finally:
        for process in (rank, helper, stranger, of_lost_run):
            process.kill()
            process.wait()


def test_nvml_is_asked_for_process_names_except_by_the_sampler():
    fake = FakeNvml([a100(processes=[(4242, GIB, "python3"), (4343, GIB)])])
    report = Nvml(module=fake.module).report()
    assert [(p.pid, p.name) for p in report.gpus[0].processes] == [(4242, "python3"), (4343, None)]
    fake.calls.clear()
    reports = []
    sampler = GpuSampler(0.25, emit=reports.append, nvml=Nvml(module=fake.module))
    sampler.sample()
    assert reports and "nvmlSystemGetProcessName" not in fake.calls  # it matches pids, once a second


def test_a_process_nvml_does_not_name_is_named_from_proc_only_where_its_pid_is_surely_the_same(tmp_path):
    process = sleeper()
    try:
        wait_for(lambda: b"time.sleep" in Path(f"/proc/{process.pid}/cmdline").read_bytes(), 10, 0.01,
                 what="the process to run its program")
        # this machine's own pids: the program the process runs, as nvidia-smi shows it
        assert local_process_name(process.pid, same_pids=True) == sys.executable
    finally:
        process.kill()
        process.wait()
    assert local_process_name(process.pid, same_pids=True) is None  # gone
    # a container's pids (another namespace): only a process with an NVIDIA device open is named
    proc = tmp_path / "proc"
    for pid, device in ((10, "/dev/nvidia0"), (11, "/dev/null")):
        (proc / str(pid) / "fd").mkdir(parents=True)
        (proc / str(pid) / "fd" / "3").symlink_to(device)
        (proc / str(pid) / "cmdline").write_bytes(b"/usr/bin/python3\0train.py\0")
    (proc / "self" / "ns").mkdir(parents=True)
    (proc / "self" / "ns" / "pid").symlink_to("pid:[4026532000]")
    assert local_process_name(10, proc) == "/usr/bin/python3"
    assert local_process_name(11, proc) is None
    (proc / "self" / "ns" / "pid").unlink()
    (proc / "self" / "ns" / "pid").symlink_to(INITIAL_PID_NAMESPACE)
    assert local_process_name(11, proc) == "/usr/bin/python3"
    report = Nvml(module=FakeNvml([a100(processes=[(10, GIB), (12, GIB, "trainer")])]).module).report()
    named = with_local_names(report, proc)
    assert [(p.pid, p.name) for p in named.gpus[0].processes] == [(10, "/usr/bin/python3"), (12, "trainer")]
def test_a_gpu_run_records_its_use_and_an_out_of_memory_names_the_free_memory_and_the_ranks_peak(
        tmp_path, monkeypatch, capsys):
    """The real runner samples the fake H200 (its process list holds the rank's pid, as NVML's
    does), the rank sends the allocator's readings, then fails with CUDA out of memory."""
    monkeypatch.setattr(nvml, "_shared", Nvml(module=gpu_reference_nvml(h200_training(pid=os.getpid())).module))
    script = tmp_path / "train.py"
    script.write_text("")
    spec = dataclasses.replace(fake_spec(script, 1, None), telemetry=TelemetrySpec(sample_interval=0.25))
    live = LiveRun(ranks=1, rate_hz=20.0, slow_rank=None, profile="gpu_train", spec=spec).start()
    try:
        run = live.run
        assert run is not None
        thread = live._thread  # the runner's loop: the fake workers write there
        assert thread is not None
        worker = live._nodes()[0].workers[0]

        def allocator(allocated: int, reserved: int, peak: int) -> None:
            now = __import__("time").time()
            items = [[now, live.step, name, float(value), "auto"] for name, value in (
                (protocol.GPU_MEMORY_ALLOCATED, allocated), (protocol.GPU_MEMORY_RESERVED, reserved),
                (protocol.GPU_MEMORY_PEAK, peak))]
            thread.call(lambda: worker.send_step(items, live.step, now))

        allocator(1 * GIB, 2 * GIB, 3 * GIB)
        allocator(5 * GIB, 6 * GIB, 7 * GIB)
        wait_for(lambda: thread.call(lambda: (row := run.hub.model.ranks[0]).gpu_index == 0
                                     and row.gpu_mem_peak == 7 * GIB and live.step >= 10), 15,
                 what="the rank on GPU 0 and its allocator's peak")
        wait_for(lambda: thread.call(lambda: 0 in run.triage_input.rank_gpu_memory), 5, what="a GPU sample")
        live.fail_rank(0)  # its stderr: "RuntimeError: CUDA out of memory (simulated)"
        live.wait_ended()
    finally:
        live.close()
    with RunStore(readonly=True) as store:
        summary = store.stored_run(live.run_id).summary
    [hint] = [hint for hint in summary["hints"] if hint["key"] == "cuda_out_of_memory"]
    free = H200_MEMORY_TOTAL - 4_556_980_224  # what NVML said of the GPU while the rank was on it
    assert hint["cause"] == (f"CUDA ran out of memory; GPU 0 had {free / GIB:.0f} GiB free of "
                             f"{H200_MEMORY_TOTAL / GIB:.0f} GiB (NVML, at the last sample); "
                             "rank 0's own peak: 7.0 GiB (torch's allocator)")
    assert main(["runs", "show", str(live.run_id), "--json"]) == 0
    [rank] = json.loads(capsys.readouterr().out)["ranks"]
    assert (rank["gpu_index"], rank["gpu_util"], rank["gpu_mem_used_peak"], rank["gpu_mem_total"]) == (
        0, 51.0, 3_902_799_872, H200_MEMORY_TOTAL)
    assert (rank["gpu_mem_allocated"], rank["gpu_mem_reserved"], rank["gpu_mem_peak"]) == (5 * GIB, 6 * GIB, 7 * GIB)


def test_a_ranks_gpu_use_is_not_read_from_samples_taken_before_its_steps_or_after_them():
    """Seen on an H200: the example's 128 steps took 0.8 s between two NVML readings and
    ``runs show`` said "GPU % 0%", the readings of the GPU loading the model and idle after the
    end. A rank that made no step Rankwatch could see is still judged over its whole life."""
    quick = step_rows(0, "gpu")  # steps at t 100 .. 104
    around = [GpuSample(t, 0, 0.0, GIB, GPU_TOTAL, 80.0, 35.0, 345.0) for t in (98.0, 99.0, 106.0)]
    during_life = [GpuSample(t, 1, value, GIB, GPU_TOTAL, 80.0, 35.0, 345.0)
                   for t, value in ((98.0, 40.0), (99.0, 60.0), (106.0, 50.0))]
    with RunStore() as store:
        run_id = store.create_run(run_key="q" * 24, profile="quick", spec_toml="", command="", host="h",
                                  workdir="/", runner_pid=1, socket=None, world_size=2, status="succeeded")
        store.update_run(run_id, started=97.0, ended=107.0, exit_code=0)
        for rank in (0, 1):  # rank 1: no step records at all (steps Rankwatch did not see)
            store.upsert_rank(run_id, rank, state="exited", exit_code=0, host="h", pid=100 + rank,
                              first_seen=97.5, last_seen=106.5, gpu_index=rank)
        store.write_batch(run_id, RecordBatch(metrics=quick, gpu_samples=around + during_life))
    with RunStore(readonly=True) as store:
        stepped, unstepped = run_statistics(store, run_id)[0]
    assert stepped.gpu_util is None, "no reading was taken while the steps ran: not measured, never 0%"
    assert unstepped.gpu_util == 50.0
