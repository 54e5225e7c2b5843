"""Every way the tutorials start a job: per-rank argument templates and self-spawning scripts.

Eight real runs (2 ranks each, gloo on CPU), each serving several assertions: a seed-tutorial
script given ``--init_method {init_method} --rank {rank} --world_size {world_size}`` with a
tcp:// and with a file:// init method; the DDP tutorial's ``mp.spawn`` script run to the end
(its spawn indices joining the group in reverse), with rank 1 failing, and without a process
group, detached, its stacks dumped, then stopped with ``rankwatch stop``; the DDP tutorial
series' ``multigpu.py`` (``init_process_group`` imported by name); the "Writing Distributed
Applications" tutorial's ``mp.Process`` harness, with the spawn and the fork start method.
About 70 s on an idle 2-core machine.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path

import psutil
import pytest

from runner.rows import StoredRun
from runner.store.store import RunStore
from tests.jobs import SCRIPTS, processes_with_marker, rankwatch, wait_for

pytestmark = pytest.mark.torchrun

TEMPLATES = ("--init_method", "{init_method}", "--rank", "{rank}", "--world_size", "{world_size}")
STEPS = 3


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    folder = tmp_path_factory.mktemp("launch-modes-home")
    return dict(os.environ, RANKWATCH_HOME=str(folder), RANKWATCH_SOCKET_DIR=tempfile.mkdtemp(prefix="rw-", dir="/tmp"))


def run_once(env: dict, *args: str) -> tuple[object, StoredRun, dict]:
    """Run to the end; returns (the completed process, the stored run, everything stored about it)."""
    result = rankwatch("run", "--plain", *args, env=env)
    with RunStore(Path(env["RANKWATCH_HOME"]) / "data" / "runs.db", readonly=True) as store:
        run = store.stored_run(store.resolve_run_id("last"))
        stored = {"ranks": {row.rank: row for row in store.ranks(run.id)},
                  "loss_steps": {}, "logs": store.log_lines(run.id), "events": store.stored_events(run.id)}
        for rank, _t, step, _name, _value, _source in store.metrics(run.id, name="loss"):
            stored["loss_steps"].setdefault(rank, set()).add(step)
    return result, run, stored


def lines_of(stored: dict, rank: int | None) -> list[str]:
    return [row.line for row in stored["logs"] if row.rank == rank]


@pytest.fixture(scope="module")
def tcp_run(home):
    return run_once(home, "--nproc-per-node", "2", str(SCRIPTS / "seed_tutorial.py"), *TEMPLATES,
                    "--steps", str(STEPS))


@pytest.fixture(scope="module")
def file_run(home):
    templates = tuple("{init_method:file}" if word == "{init_method}" else word for word in TEMPLATES)
    return run_once(home, "--nproc-per-node", "2", str(SCRIPTS / "seed_tutorial.py"), *templates)


@pytest.fixture(scope="module")
def spawn_run(home):
    return run_once(home, str(SCRIPTS / "spawn_tutorial.py"), "--steps", str(STEPS), "--reverse-ranks")


def test_a_seed_tutorial_script_gets_its_own_rank_and_a_tcp_init_method_per_process(tcp_run):
    result, run, stored = tcp_run
    assert result.returncode == 0, result.stderr
    assert run.status == "succeeded"
    assert {rank: row.state for rank, row in stored["ranks"].items()} == {0: "exited", 1: "exited"}
    assert stored["loss_steps"] == {0: set(range(STEPS)), 1: set(range(STEPS))}  # one per optimizer step
    for rank in (0, 1):
        [line] = [text for text in lines_of(stored, rank) if " joins " in text]
        assert line.startswith(f"rank {rank} of 2 joins tcp://localhost:")


def test_a_file_init_method_is_a_fresh_file_that_is_gone_after_the_run(file_run):
    result, run, stored = file_run
    assert result.returncode == 0, result.stderr
    assert set(stored["loss_steps"]) == {0, 1}
    [line] = [text for text in lines_of(stored, 1) if " joins " in text]
    path = Path(line.split(" joins file://", 1)[1])
    assert path.name == "store" and path.parent.name == "init-method"
    assert not path.exists() and not path.parent.exists()
    assert f" RANKWATCH_INIT_FILE={path} " in run.command  # the command recorded names the file the run used


def test_the_preview_shows_each_ranks_expanded_line_and_an_unknown_placeholder_is_named(home):
    shown = rankwatch("command", "--nproc-per-node", "2", str(SCRIPTS / "seed_tutorial.py"), *TEMPLATES, env=home)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert any(line.startswith("#   rank 1: ") and line.endswith("--rank 1 --world_size 2") for line in lines)
    assert "launch mode: torchrun (the arguments hold per-rank placeholders)" in shown.stderr
    wrong = rankwatch("command", str(SCRIPTS / "seed_tutorial.py"), "--rank", "{rnak}", env=home)
    assert wrong.returncode == 2
    assert "args[1]: unknown placeholder {rnak}" in wrong.stderr and "'{{' and '}}' for literal braces" in wrong.stderr


def test_a_script_that_spawns_its_ranks_runs_once_and_its_children_are_the_ranks(spawn_run):
    result, run, stored = spawn_run
    assert result.returncode == 0, result.stderr
    [mode] = [event for event in stored["events"] if event.kind == "launch_mode"]
    assert mode.fields["mode"] == "self-spawn" and mode.fields["chosen_by"] == "auto"
    assert "mp.spawn(...) on line" in mode.message
    assert "[rankwatch] launch mode: self-spawn (the script starts its own ranks: mp.spawn(...) on line" in result.stderr
    assert {rank: row.state for rank, row in stored["ranks"].items()} == {0: "exited", 1: "exited"}
    assert stored["loss_steps"] == {0: set(range(STEPS)), 1: set(range(STEPS))}
    for rank in (0, 1):  # ranks by their process group (index i joined as 1 - i), lines from before it too
        assert f"Running basic DDP example: spawn index {1 - rank} is rank {rank}." in lines_of(stored, rank)
        assert stored["ranks"][rank].pid != stored["ranks"][1 - rank].pid
    assert "torch.distributed.run" not in run.command


def test_a_failure_in_spawned_rank_1_is_named_as_rank_1(home):
    result, run, stored = run_once(home, str(SCRIPTS / "spawn_tutorial.py"), "--steps", "50", "--fail-rank", "1")
    assert result.returncode != 0
    assert run.status == "failed" and run.summary["first_failure"]["rank"] == 1
    assert "RuntimeError: rank 1 gives up" in result.stderr[result.stderr.rindex("── Rankwatch"):]
    assert stored["ranks"][1].state == "failed"
    assert len(stored["loss_steps"][1]) == 2  # it raised after its second step
    # the script's own process started the ranks: its lines (torch's report of the failure) are the launcher's
    assert any("ProcessRaisedException" in line for line in lines_of(stored, None))
    assert not any("ProcessRaisedException" in line for rank in (0, 1) for line in lines_of(stored, rank))
    assert "[script] torch.multiprocessing.spawn.ProcessRaisedException" in result.stdout + result.stderr


def test_stop_of_a_self_spawning_run_leaves_no_process_and_ranks_without_a_group_go_by_spawn_index(home):
    started = rankwatch("run", "--detach", "--json", str(SCRIPTS / "spawn_tutorial.py"), "--steps", "100000",
                        "--sleep", "0.05", "--no-process-group", env=home)
    assert started.returncode == 0, started.stderr
    info = json.loads(started.stdout)
    store_path = Path(home["RANKWATCH_HOME"]) / "data" / "runs.db"

    def both_stepping() -> bool:
        with RunStore(store_path, readonly=True) as store:
            return {rank for rank, *_ in store.metrics(info["run_id"], name="loss")} == {0, 1}

    try:
        wait_for(both_stepping, 90, what="both spawned ranks (by spawn index) to step")
        with RunStore(store_path, readonly=True) as store:
            run_key = store.stored_run(info["run_id"]).run_key
        assert len(processes_with_marker(run_key)) >= 3  # the script's process and its two ranks
        stacks = rankwatch("stacks", str(info["run_id"]), "--json", env=home, timeout=60)
        assert stacks.returncode == 0, stacks.stderr
        capture = json.loads(stacks.stdout)  # the stacks event: its fields at the top
        assert capture["ranks"] == [0, 1] and capture["missing"] == []
        assert "spawn_tutorial.py" in Path(capture["text_path"]).read_text()  # each spawned rank's own stack
        asked = time.monotonic()
        stopped = rankwatch("stop", str(info["run_id"]), env=home)
        assert stopped.returncode == 0, stopped.stderr
        assert processes_with_marker(run_key) == []
        assert time.monotonic() - asked < 10
        with RunStore(store_path, readonly=True) as store:
            assert store.stored_run(info["run_id"]).status == "stopped"
            assert {rank.state for rank in store.ranks(info["run_id"])} == {"stopped"}
    finally:
        if psutil.pid_exists(info["pid"]):
            rankwatch("stop", str(info["run_id"]), "--force", env=home)


def stored_losses(env: dict, run_id: int) -> dict[int, list[float]]:
    """Each rank's stored losses in step order."""
    with RunStore(Path(env["RANKWATCH_HOME"]) / "data" / "runs.db", readonly=True) as store:
        rows = sorted((rank, step, value) for rank, _t, step, _name, value, _source
                      in store.metrics(run_id, name="loss"))
    losses: dict[int, list[float]] = {}
    for rank, _step, value in rows:
        losses.setdefault(rank, []).append(value)
    return losses


def printed_losses(folder: Path) -> dict[int, list[float]]:
    """What each rank's script computed, one ``loss.item()`` per optimizer step (its ``--losses`` files)."""
    return {int(path.stem.split("-")[1]): [float(line) for line in path.read_text().split()]
            for path in folder.glob("rank-*.txt")}


def test_a_spawned_script_that_imports_init_process_group_by_name_counts_each_optimizer_step(home, tmp_path):
    """The DDP tutorial series' multigpu.py: its children bind the unwrapped function when they
    re-import the script; each rank must still be measured from its first step, one step per
    optimizer step (before: 2 per step, or steps lost to a 3 s wait for the rank)."""
    epochs, steps_per_epoch = 10, 2048 // 2 // 32
    result, run, stored = run_once(home, str(SCRIPTS / "ddp_series_multigpu.py"), "--", str(epochs), "1",
                                   "--losses", str(tmp_path))
    assert result.returncode == 0, result.stderr
    [mode] = [event for event in stored["events"] if event.kind == "launch_mode"]
    assert mode.fields["mode"] == "self-spawn" and mode.fields["chosen_by"] == "auto"
    printed = printed_losses(tmp_path)
    assert {rank: len(values) for rank, values in printed.items()} == {0: epochs * steps_per_epoch,
                                                                      1: epochs * steps_per_epoch}
    assert stored_losses(home, run.id) == printed  # every step, each the loss the script computed
    for rank in (0, 1):
        assert stored["ranks"][rank].state == "exited"
        assert f"[GPU{rank}] Epoch 9 | Batchsize: 32 | Steps: {steps_per_epoch}" in lines_of(stored, rank)


@pytest.mark.parametrize("start_method", ["spawn", "fork"])
def test_the_tutorials_process_harness_runs_once_and_its_processes_are_the_ranks(home, tmp_path, start_method):
    """``Process(target=init_process, ...)`` per rank, MASTER_PORT set by hand: auto picks self-spawn
    (under torchrun each rank would start two more, which hang), and the children are the ranks."""
    steps = 50
    result, run, stored = run_once(home, str(SCRIPTS / "process_harness.py"), "--", "--steps", str(steps),
                                   "--losses", str(tmp_path), *(["--fork"] if start_method == "fork" else []))
    assert result.returncode == 0, result.stderr
    [mode] = [event for event in stored["events"] if event.kind == "launch_mode"]
    assert mode.fields["mode"] == "self-spawn" and mode.fields["chosen_by"] == "auto"
    assert "Process(target=init_process) on line" in mode.message
    assert stored_losses(home, run.id) == printed_losses(tmp_path)
    assert stored["loss_steps"] == {0: set(range(steps)), 1: set(range(steps))}
    for rank in (0, 1):
        assert stored["ranks"][rank].state == "exited"
        assert lines_of(stored, rank) == [f"Rank {rank} done after {steps} steps"]  # each rank's own line
