"""Command building: the user-facing torchrun line and the runner's instrumented form agree."""

from __future__ import annotations

import dataclasses
import shlex

from runner.launch.command import RendezvousPlan, RunnerContext, build_commands, build_node_command
from runner.profile.resolve import MachineFacts, exported_omp_threads, resolve
from runner.profile.spec import LaunchSpec, NodeSpec, RendezvousSpec
from runner.sampling.gpu_report import GpuReport, GpuSnapshot

NO_GPU = MachineFacts(cpu_count=8, gpus=GpuReport(available=False, reason="no driver"))


def four_gpus() -> MachineFacts:
    gpus = tuple(GpuSnapshot(i, "GPU", None, 0, 1 << 34, 0.0, None, None, None) for i in range(4))
    return MachineFacts(cpu_count=32, gpus=GpuReport(available=True, gpus=gpus))


def test_cpu_mode_standalone(tmp_path):
    spec = LaunchSpec(script="train.py", args=("--epochs", "3"), workdir=str(tmp_path))
    launch = resolve(spec, NO_GPU)
    [command] = build_commands(launch, RendezvousPlan("standalone"))
    assert launch.cpu_mode and launch.backend == "gloo" and launch.head.processes == 8
    assert command.argv[1:] == ("-m", "torch.distributed.run", "--nnodes=1", "--nproc-per-node=8", "--standalone",
                                str(tmp_path / "train.py"), "--epochs", "3")
    assert command.env == {"CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1", "RANKWATCH_BACKEND": "gloo"}
    assert command.shell_text().startswith(f"cd {tmp_path} && CUDA_VISIBLE_DEVICES='' OMP_NUM_THREADS=1 ")


def test_picked_gpus_become_cuda_visible_devices_and_auto_nproc():
    spec = LaunchSpec(script="/w/t.py", gpus=(1, 3), omp_num_threads="auto")
    launch = resolve(spec, four_gpus())
    [command] = build_commands(launch, RendezvousPlan("standalone"))
    assert launch.backend == "nccl" and launch.head.processes == 2
    assert command.env["CUDA_VISIBLE_DEVICES"] == "1,3"
    assert command.env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    assert command.env["OMP_NUM_THREADS"] == "16"


def test_auto_threads_keep_what_the_shell_exported_and_a_profiles_number_wins():
    """As torchrun leaves an exported OMP_NUM_THREADS alone, and as ``rankwatch doctor`` judges it:
    before, "auto" replaced the shell's 1 with 16 (cores / processes) without a word."""
    shell = dataclasses.replace(four_gpus(), omp_num_threads=exported_omp_threads({"OMP_NUM_THREADS": "1"}))
    [auto] = build_commands(resolve(LaunchSpec(script="/w/t.py", gpus=(1, 3)), shell), RendezvousPlan("standalone"))
    assert auto.env["OMP_NUM_THREADS"] == "1"
    [chosen] = build_commands(resolve(LaunchSpec(script="/w/t.py", gpus=(1, 3), omp_num_threads=4), shell),
                              RendezvousPlan("standalone"))
    assert chosen.env["OMP_NUM_THREADS"] == "4"
    assert [exported_omp_threads({"OMP_NUM_THREADS": value}) for value in ("8", " 2 ", "0", "four", "")] == [
        8, 2, None, None, None]


def test_static_and_c10d_rendezvous_flags_per_node():
    nodes = (NodeSpec(host="localhost", processes=2), NodeSpec(host="node2", processes=2))
    spec = LaunchSpec(script="/w/t.py", gpus="cpu", nodes=nodes, rendezvous=RendezvousSpec(mode="static"))
    launch = resolve(spec, NO_GPU)
    commands = build_commands(launch, RendezvousPlan("static", master_addr="head", master_port=29500))
    assert [c.argv[5:8] for c in commands] == [
        ("--node-rank=0", "--master-addr=head", "--master-port=29500"),
        ("--node-rank=1", "--master-addr=head", "--master-port=29500")]
    c10d = build_commands(launch, RendezvousPlan("c10d", endpoint="head:29400", job_id="j"))
    assert c10d[1].argv[3:8] == ("--nnodes=2", "--nproc-per-node=2", "--rdzv-backend=c10d",
                                  "--rdzv-endpoint=head:29400", "--rdzv-id=j")


def test_legacy_local_rank_wraps_the_script_in_the_pasted_command():
    spec = LaunchSpec(script="/w/old train.py", args=("--x", "1"), legacy_local_rank=True, nproc_per_node=2)
    launch = resolve(spec, NO_GPU)
    [command] = build_commands(launch, RendezvousPlan("standalone"))
    assert "--no-python" in command.argv
    wrapper = command.argv[command.argv.index("-c") + 1]
    assert "--local_rank=\"$LOCAL_RANK\"" in wrapper and shlex.quote("/w/old train.py") in wrapper
    assert command.argv[-2:] == ("--x", "1")


def test_runner_form_adds_bootstrap_log_dir_and_contract_but_keeps_the_flags():
    spec = LaunchSpec(script="/w/t.py", args=("--a",), nproc_per_node=2, max_restarts=3)
    launch = resolve(spec, NO_GPU)
    plain = build_node_command(launch, launch.head, RendezvousPlan("standalone"))
    context = RunnerContext(socket="/s", token="tok", run_key="key", run_id=7, log_dir="/logs", stacks_dir="/st")
    runner = build_node_command(launch, launch.head, RendezvousPlan("standalone"), context)
    assert runner.argv[:7] == plain.argv[:7]
    assert "--log-dir=/logs" in runner.argv
    # no --tee: workers' output goes to the runner's socket, never through files on the data disk
    assert not any(word.startswith(("--tee", "--redirects")) for word in runner.argv)
    tail = runner.argv[runner.argv.index("-m", 3):]
    assert tail == ("-m", "rankwatch._bootstrap", "/w/t.py", "--a")
    assert runner.env["RANKWATCH_RUN_KEY"] == "key" and runner.env["RANKWATCH_TOKEN"] == "tok"
    assert runner.env["RANKWATCH_SOCKET"] == "/s" and runner.env["RANKWATCH_BACKEND"] == "gloo"
    assert "--max-restarts=3" in runner.argv and "--max-restarts=3" in plain.argv


# ---- per-rank argument templates and launch modes (issue 13) -------------------------------------

TEMPLATED = ("--init_method", "{init_method}", "--rank", "{rank}", "--name", "run-{node_rank}.{local_rank}",
             "--json", '{"lr": 0.1}', "--braces", "{{rank}}")


def test_the_pasted_command_expands_templates_in_each_workers_shell_as_the_bootstrap_does(tmp_path):
    import subprocess

    from rankwatch._templates import expand, values_from_environment

    spec = LaunchSpec(script="/w/t.py", args=TEMPLATED, nproc_per_node=2)
    [command] = build_commands(resolve(spec, NO_GPU), RendezvousPlan("standalone"))
    wrapper = command.argv[command.argv.index("-c") + 1]
    worker_env = {"RANK": "1", "LOCAL_RANK": "1", "WORLD_SIZE": "2", "GROUP_RANK": "0",
                  "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29511", "PATH": "/usr/bin:/bin"}
    # the shell's exec runs "python -u /w/t.py ..."; print that argv instead
    shown = subprocess.run(["sh", "-c", wrapper.replace("exec ", "exec printf '%s\\n' ", 1)], env=worker_env,
                           capture_output=True, text=True, check=True).stdout.splitlines()
    assert shown[3:] == expand(TEMPLATED, values_from_environment(worker_env))
    assert shown[3:] == ["--init_method", "tcp://127.0.0.1:29511", "--rank", "1", "--name", "run-0.1",
                         "--json", '{"lr": 0.1}', "--braces", "{rank}"]


def test_the_preview_lists_each_ranks_line_and_the_runner_form_asks_the_workers_to_expand(tmp_path):
    spec = LaunchSpec(script="/w/t.py", args=("--rank", "{rank}", "--im", "{init_method:file}"), nproc_per_node=2)
    launch = resolve(spec, NO_GPU)
    plan = RendezvousPlan("static", master_addr="head", master_port=29500)
    plain = build_node_command(launch, launch.head, plan)
    assert [line.split(": ", 1)[0] for line in plain.rank_lines] == ["rank 0", "rank 1"]
    assert plain.rank_lines[1].endswith("/w/t.py --rank 1 --im 'file://<a fresh file, removed after the run>'")
    # by hand: a fresh private folder the shell makes (mktemp -d: 0700), not a guessable name in /tmp
    assert "RANKWATCH_INIT_FILE" not in plain.env and "rankwatch-init" not in plain.shell_text()
    assert ' RANKWATCH_INIT_FILE="$(mktemp -d)"/store ' in plain.shell_text()
    recorded = build_node_command(launch, launch.head, plan, init_file="/runs/7/init-method/store")
    assert recorded.env["RANKWATCH_INIT_FILE"] == "/runs/7/init-method/store" and "mktemp" not in recorded.shell_text()
    context = RunnerContext(socket="/s", token="t", run_key="k", run_id=1, log_dir="/l", stacks_dir="/st",
                            init_file="/run/init-method/store")
    runner = build_node_command(launch, launch.head, plan, context)
    assert runner.argv[-4:] == ("--rank", "{rank}", "--im", "{init_method:file}")  # expanded by each worker
    assert runner.env["RANKWATCH_EXPAND_ARGS"] == "1"
    assert runner.env["RANKWATCH_INIT_FILE"] == "/run/init-method/store"
    untemplated = build_node_command(resolve(LaunchSpec(script="/w/t.py"), NO_GPU), launch.head, plan, context)
    assert untemplated.rank_lines == () and "RANKWATCH_EXPAND_ARGS" not in untemplated.env


def test_auto_launch_mode_starts_a_spawning_script_once_with_the_interpreter(tmp_path):
    script = tmp_path / "tutorial.py"
    script.write_text("import torch.multiprocessing as mp\n# mp.spawn(commented)\n\nmp.spawn(demo, nprocs=2)\n")
    launch = resolve(LaunchSpec(script=str(script), args=("--x",)), NO_GPU)
    assert (launch.launch_mode.mode, launch.launch_mode.chosen_by) == ("self-spawn", "auto")
    assert launch.launch_mode.reason == "the script starts its own ranks: mp.spawn(...) on line 4"
    assert launch.launch_mode.spawn_call == "mp.spawn(...) on line 4"  # the failure summary names it
    [plain] = build_commands(launch, RendezvousPlan("standalone"))
    assert plain.argv == (launch.head.python, "-u", str(script), "--x")
    context = RunnerContext(socket="/s", token="t", run_key="k", run_id=1, log_dir="/l", stacks_dir="/st")
    runner = build_node_command(launch, launch.head, RendezvousPlan("standalone"), context)
    assert runner.argv == (launch.head.python, "-u", "-m", "rankwatch._bootstrap", str(script), "--x")
    assert runner.env["RANKWATCH_LAUNCH_MODE"] == "self-spawn"
    script.write_text("import torch\n# mp.spawn(fn) only in a comment\nmultiprocessing.Process(target=f)\n")
    assert resolve(LaunchSpec(script=str(script)), NO_GPU).launch_mode.mode == "torchrun"
    chosen = resolve(LaunchSpec(script=str(script), launch_mode="self-spawn"), NO_GPU).launch_mode
    assert (chosen.mode, chosen.chosen_by) == ("self-spawn", "profile")



def test_auto_launch_mode_starts_a_process_harness_once_and_leaves_a_helper_process_to_torchrun(tmp_path):
    """PyTorch's "Writing Distributed Applications" harness starts its ranks with Process; a
    script whose Process serves data is torchrun's."""
    script = tmp_path / "run.py"
    script.write_text("import os\nimport torch.distributed as dist\nfrom torch.multiprocessing import Process\n\n"
                      "def init_process(rank, size):\n    dist.init_process_group('gloo', rank=rank, world_size=size)\n\n"
                      "if __name__ == '__main__':\n    for rank in range(2):\n"
                      "        Process(target=init_process, args=(rank, 2)).start()\n")
    launch = resolve(LaunchSpec(script=str(script)), NO_GPU)
    assert (launch.launch_mode.mode, launch.launch_mode.chosen_by) == ("self-spawn", "auto")
    assert launch.launch_mode.reason == "the script starts its own ranks: Process(target=init_process) on line 10"
    script.write_text(script.read_text().replace("target=init_process", "target=print"))
    helper = resolve(LaunchSpec(script=str(script)), NO_GPU).launch_mode
    assert helper.mode == "torchrun" and "no Process that calls init_process_group" in helper.reason

IMAGENET_STYLE = """import argparse
import torch.multiprocessing as mp
parser = argparse.ArgumentParser()
parser.add_argument('--multiprocessing-distributed', action='store_true')


def main():
    args = parser.parse_args()
    if args.multiprocessing_distributed:
        mp.spawn(main_worker, nprocs=2, args=(args,))
    else:
        main_worker(0, args)


if __name__ == "__main__":
    main()
"""
"""PyTorch's ImageNet example (and the trainers copied from it): torchrun's, or its own ranks with a flag."""


def test_a_script_that_spawns_only_with_its_own_flag_is_torchruns_without_that_flag(tmp_path):
    script = tmp_path / "main.py"
    script.write_text(IMAGENET_STYLE)
    plain = resolve(LaunchSpec(script=str(script), args=("--dist-url", "env://"), nproc_per_node=2), NO_GPU)
    assert plain.launch_mode.mode == "torchrun"
    assert plain.launch_mode.reason == ("the script's mp.spawn(...) on line 10 runs only with "
                                        "--multiprocessing-distributed, which its arguments do not give")
    spawning = resolve(LaunchSpec(script=str(script), args=("--multiprocessing-distributed",)), NO_GPU)
    assert spawning.launch_mode.mode == "self-spawn"
    assert spawning.launch_mode.reason.endswith("mp.spawn(...) on line 10, with --multiprocessing-distributed")


def test_a_spawn_under_another_condition_follows_an_explicit_nproc_per_node(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("import torch\nimport torch.multiprocessing as mp\n\nif __name__ == '__main__':\n"
                      "    if torch.cuda.device_count() > 1:\n        mp.spawn(run, nprocs=2)\n"
                      "    else:\n        run(0)\n")
    given = resolve(LaunchSpec(script=str(script), nproc_per_node=2), NO_GPU).launch_mode
    assert (given.mode, given.reason) == ("torchrun", "nproc_per_node is given, and the script's mp.spawn(...) "
                                                      "on line 6 runs only if torch.cuda.device_count() > 1")
    assert resolve(LaunchSpec(script=str(script)), NO_GPU).launch_mode.mode == "self-spawn"
    script.write_text("import torch.multiprocessing as mp\nif __name__ == '__main__':\n    mp.spawn(run, nprocs=2)\n")
    guarded = resolve(LaunchSpec(script=str(script), nproc_per_node=2), NO_GPU).launch_mode
    assert guarded.mode == "self-spawn"  # the main guard is no condition: refused by the check below, not guessed


def test_torchruns_own_settings_are_refused_for_a_self_spawning_script_not_ignored(tmp_path):
    from runner.profile.check import check_launch

    script = tmp_path / "tutorial.py"
    script.write_text("import torch.multiprocessing as mp\nmp.spawn(demo, nprocs=2)\n")
    spec = LaunchSpec(script=str(script), workdir=str(tmp_path), nproc_per_node=4, max_restarts=1)
    errors = {error.field: error.message for error in check_launch(resolve(spec, NO_GPU), NO_GPU,
                                                                    probe_interpreter=False)}
    assert set(errors) == {"nproc_per_node", "max_restarts"}
    assert errors["nproc_per_node"] == ("launch mode self-spawn (the script starts its own ranks: mp.spawn(...) on "
                                        "line 2): its spawn call decides how many; leave nproc_per_node auto, or "
                                        'choose launch_mode "torchrun" (--launch-mode torchrun)')
    assert check_launch(resolve(spec.with_changes(launch_mode="torchrun"), NO_GPU), NO_GPU,
                        probe_interpreter=False) == []
