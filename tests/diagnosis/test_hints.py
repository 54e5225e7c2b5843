"""Each hint of the catalogue fires on the real output of a real failing job, and only there.

Texts in ``data/`` were captured on this machine from real runs (torchrun on CPU,
torch 2.14); the GPU-only failures (CUDA OOM, NCCL errors, two ranks on one GPU,
the NCCL watchdog) are quoted from public bug reports, with their source.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from runner.diagnosis.findings import LauncherFinding
from runner.diagnosis.hints import Evidence, GpuMemory, RunPortHolder, find_hints
from runner.diagnosis.triage import RankFailure, exception_line_from_tail

DATA = Path(__file__).parent / "data"

# pytorch/pytorch#16417 (comment of 2024-03-13)
CUDA_OOM = """Traceback (most recent call last):
  File "train.py", line 88, in <module>
    loss = model(batch).loss
torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 22.00 MiB. GPU 0 has a total capacity of 23.65 GiB of which 11.06 MiB is free. Including non-PyTorch memory, this process has 23.60 GiB memory in use. Of the allocated memory 22.90 GiB is allocated by PyTorch, and 194.87 MiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"""
# Peterande/D-FINE#289
DUPLICATE_GPU = """torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1691, invalid usage (run with NCCL_DEBUG=WARN for details), NCCL version 2.19.3
ncclInvalidUsage: This usually reflects invalid usage of NCCL library.
Last error:
Duplicate GPU detected : rank 0 and rank 1 both on CUDA device 2000"""
# zai-org/CogVLM2#178
NCCL_SYSTEM_ERROR = """torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1691, unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.19.3
ncclSystemError: System call (e.g. socket, malloc) or external library call failed or device error."""
# XPixelGroup/BasicSR#737
NCCL_WATCHDOG = """[rank1]:[E626 06:24:44.903881913 ProcessGroupNCCL.cpp:616] [Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=808, OpType=ALLREDUCE, NumelIn=9801523, NumelOut=9801523, Timeout(ms)=600000) ran for 600020 milliseconds before timing out.
[rank1]:[E626 06:24:44.906457629 ProcessGroupNCCL.cpp:1785] [PG ID 0 PG GUID 0(default_pg) Rank 1] Exception (either an error or timeout) detected by watchdog at work: 808, last enqueued NCCL work: 811, last completed NCCL work: 807."""


def text(name: str) -> str:
    return (DATA / name).read_text()


def rank_evidence(output: str, rank: int = 0, **settings) -> Evidence:
    """The evidence when ``rank`` failed first and ``output`` is its stderr."""
    lines = output.splitlines()
    first = RankFailure(rank=rank, exit_code=1, exception_line=exception_line_from_tail(lines))
    return Evidence(first=first, stderr_tails={rank: lines}, **settings)


def launcher_evidence(output: str, **settings) -> Evidence:
    """The evidence when no rank reported: only torchrun's own lines."""
    return Evidence(first=None, launcher_lines=output.splitlines(), **settings)


def keys(evidence: Evidence) -> list[str]:
    return [hint.key for hint in find_hints(evidence)]


def test_address_in_use_from_a_rank_names_the_port_and_who_holds_it():
    evidence = rank_evidence(text("torchrun_init_tcp.txt"), port_holder=lambda port: f"pid 42 (held {port})")
    [hint] = find_hints(evidence)
    assert hint.key == "address_in_use"
    assert hint.cause.startswith("port 29611 is already in use by pid 42 (held 29611)")


def test_address_in_use_in_torchrun_itself_before_any_rank_started():
    hints = find_hints(launcher_evidence(text("torchrun_agent_port.txt")))
    assert [h.key for h in hints] == ["address_in_use"]
    assert "port 29611" in hints[0].cause


def test_no_nvidia_driver_when_a_script_calls_set_device():
    hints = find_hints(rank_evidence(text("torchrun_setdev.txt"), backend="nccl"))
    assert [h.key for h in hints] == ["cuda_unavailable"]
    assert "no NVIDIA GPU or driver" in hints[0].cause and "--backend gloo" in hints[0].advice


def test_nccl_without_gpus_says_cuda_is_unavailable_with_nccl():
    hints = find_hints(rank_evidence(text("torchrun_nccl_cpu.txt"), backend="nccl"))
    assert [h.key for h in hints] == ["cuda_unavailable"]
    assert hints[0].cause.endswith("with the nccl backend") and "--gpus cpu --backend gloo" in hints[0].advice


@pytest.mark.parametrize(("output", "asks", "advice"), [
    ("torchrun_nccl_cpu.txt", 'the nccl backend itself (nccl_cpu.py:2: dist.init_process_group("nccl"))',
     "RANKWATCH_BACKEND"),
    # nanoGPT under torchrun takes cuda:{LOCAL_RANK} whatever its --device says
    ("torchrun_setdev.txt", 'a CUDA device itself (setdev.py:2: torch.cuda.set_device(int(os.environ["LOCAL_RANK"])))',
     "torch.cuda.is_available()"),
])
def test_cuda_asked_for_by_the_script_in_a_cpu_mode_run_names_its_line_not_the_flags_it_already_has(
        output, asks, advice):
    [hint] = find_hints(rank_evidence(text(output), backend="gloo", cpu_mode=True))
    assert hint.key == "cuda_unavailable"
    assert hint.cause == f"this run is in CPU mode (no GPU for the ranks), but the script asks for {asks}"
    assert advice in hint.advice and "--gpus cpu" not in hint.advice


def test_cuda_out_of_memory_names_the_size_and_gpu():
    [hint] = find_hints(rank_evidence(CUDA_OOM))
    assert hint.key == "cuda_out_of_memory"
    assert hint.cause == "CUDA ran out of memory allocating 22.00 MiB on GPU 0"
    assert "batch size" in hint.advice


def test_cuda_out_of_memory_adds_the_gpus_free_memory_and_the_ranks_own_peak_where_measured():
    # the pytorch#16417 OOM: NVML's last sample of the rank's GPU, and its allocator's newest peak
    memory = GpuMemory(0, used=23_600 << 20, total=24_220 << 20, t=100.0)
    [hint] = find_hints(rank_evidence(CUDA_OOM, rank_gpu_memory={0: memory}, gpu_mem_peaks={0: 23_450 << 20}))
    assert hint.cause == ("CUDA ran out of memory allocating 22.00 MiB on GPU 0; GPU 0 had 620 MiB free of 23.7 GiB "
                          "(NVML, at the last sample); rank 0's own peak: 22.9 GiB (torch's allocator)")
    # torch numbers the GPUs the rank was given (CUDA_VISIBLE_DEVICES=3: its "GPU 0"), NVML the machine's
    [hint] = find_hints(rank_evidence(CUDA_OOM, rank_gpu_memory={0: GpuMemory(3, 23_600 << 20, 24_220 << 20, 1.0)}))
    assert hint.cause.endswith("; its GPU (GPU 3 to nvidia-smi) had 620 MiB free of 23.7 GiB (NVML, at the last sample)")
    # another rank's figures are not this one's; a GPU whose memory NVML did not give is left out
    other = rank_evidence(CUDA_OOM, rank_gpu_memory={1: memory, 0: GpuMemory(0, None, None, 1.0)},
                          gpu_mem_peaks={1: 1 << 30})
    assert find_hints(other)[0].cause == "CUDA ran out of memory allocating 22.00 MiB on GPU 0"


def test_two_ranks_on_one_gpu_from_nccls_duplicate_gpu_error():
    hints = find_hints(rank_evidence(DUPLICATE_GPU))
    assert [h.key for h in hints] == ["two_ranks_one_gpu"]  # not also the generic NCCL hint
    assert hints[0].cause.startswith("ranks 0 and 1 use the same GPU")
    assert "set_device" in hints[0].advice


def test_two_ranks_on_one_gpu_from_the_sampled_gpu_of_each_rank():
    evidence = rank_evidence(CUDA_OOM, rank_gpus={0: ("node-a", 0), 1: ("node-a", 0), 2: ("node-a", 1)})
    assert keys(evidence) == ["cuda_out_of_memory", "two_ranks_one_gpu"]
    assert "ranks 0, 1 ran on the same GPU 0 of node-a" in find_hints(evidence)[1].cause
    other_hosts = rank_evidence(CUDA_OOM, rank_gpus={0: ("node-a", 0), 1: ("node-b", 0)})
    assert keys(other_hosts) == ["cuda_out_of_memory"]


def test_nccl_errors_suggest_nccl_debug_info():
    [hint] = find_hints(rank_evidence(NCCL_SYSTEM_ERROR))
    assert hint.key == "nccl_error" and hint.cause == "NCCL failed (unhandled system error)"
    assert "NCCL_DEBUG=INFO" in hint.advice


@pytest.mark.parametrize("output", [NCCL_WATCHDOG, text("torchrun_gloo_timeout.txt")])
def test_a_collective_timeout_points_at_the_hung_rank(output):
    assert keys(rank_evidence(output)) == ["collective_timeout"]


@pytest.mark.parametrize("name, joined", [
    ("torchrun_c10d_timeout.txt", ""),                       # c10d: RendezvousTimeoutError in torchrun
    ("torchrun_static_timeout.txt", " (1 of 2 joined)"),     # static: the other node never came
    ("torchrun_notjoin.txt", " (2 of 3 joined)"),            # a rank never joined init_process_group
])
def test_rendezvous_timeouts_and_peers_that_never_joined(name, joined):
    hints = find_hints(launcher_evidence(text(name)))
    assert [h.key for h in hints] == ["rendezvous_timeout"]
    assert hints[0].cause == f"the rendezvous timed out: not every node or rank joined{joined}"


def test_a_legacy_script_without_the_toggle_gets_the_legacy_hint():
    hints = find_hints(rank_evidence(text("torchrun_legacy.txt")))
    assert [h.key for h in hints] == ["legacy_local_rank"]
    assert keys(rank_evidence(text("torchrun_legacy.txt"), legacy_local_rank=True)) == []


def test_the_toggle_on_a_script_that_does_not_take_local_rank():
    output = text("python_unrecognized_local_rank.txt")
    assert keys(rank_evidence(output, legacy_local_rank=True)) == ["unexpected_local_rank"]
    assert keys(rank_evidence(output, legacy_local_rank=False)) == ["legacy_local_rank"]


def test_the_toggle_on_a_script_that_takes_the_other_spelling_names_the_spelling_from_its_usage():
    [hint] = find_hints(rank_evidence(text("python_local_rank_dash.txt"), legacy_local_rank=True))
    assert hint.key == "local_rank_spelling"
    assert hint.cause.startswith("the script takes --local-rank, but the legacy option passed --local_rank")
    assert "turn the legacy" not in hint.advice.split(";")[0]  # not "turn it off": pass both spellings


def test_a_required_local_rank_in_the_dash_spelling_is_named_as_it_is_written():
    output = "usage: t.py [-h] --local-rank LOCAL_RANK\nt.py: error: the following arguments are required: --local-rank"
    [hint] = find_hints(rank_evidence(output))
    assert hint.key == "legacy_local_rank" and "expects --local-rank" in hint.cause
    assert "--local-rank=<its LOCAL_RANK>" in hint.advice


DUPLICATE_ARGS = ["--rank", "0", "--world_size", "2", "--init_method", "tcp://127.0.0.1:29544"]


def test_duplicate_rank_arguments_name_both_ranks_and_the_holder_in_this_run():
    evidence = rank_evidence(text("python_duplicate_rank.txt"), rank=1, script_args=DUPLICATE_ARGS,
                             port_holders={29544: RunPortHolder(pid=18683, command="python", rank=0)}, world_size=2,
                             port_holder=lambda port: None)
    [hint] = find_hints(evidence)
    assert hint.key == "duplicate_rank"
    assert hint.cause.startswith("ranks 0 and 1 both claimed rank 0: torchrun passes the same arguments to every "
                                 "process, so each got --rank 0 --world_size 2 --init_method tcp://127.0.0.1:29544")
    assert "port 29544 is held by rank 0 of this very run (pid 18683), not by a leftover" in hint.cause
    assert "int(os.environ['RANK'])" in hint.advice


def test_duplicate_rank_arguments_find_the_holder_by_elimination_when_it_was_not_seen():
    evidence = rank_evidence(text("python_duplicate_rank.txt"), rank=1, script_args=["--rank=0", "--world_size=2"],
                             world_size=2, others=[RankFailure(rank=0, signal="SIGTERM")])
    [hint] = find_hints(evidence)
    assert "ranks 0 and 1 both claimed rank 0" in hint.cause
    assert "held by rank 0 of this very run (the only rank that did not fail to listen)" in hint.cause


def test_a_port_held_by_a_rank_of_this_run_is_not_blamed_on_a_leftover():
    evidence = rank_evidence(text("python_duplicate_rank.txt"), rank=1,
                             port_holders={29544: RunPortHolder(pid=18683, command="python", rank=0)})
    [hint] = find_hints(evidence)  # no --rank argument: the script hard-codes something; still, name the holder
    assert hint.key == "address_in_use" and hint.cause == "port 29544 is held by rank 0 of this very run (pid 18683)"


def test_launcher_mismatches_seen_while_running_become_hints_first():
    spawn = LauncherFinding(key="self_spawn", level="warning", ranks=[0], title="rank 0 starts its own processes",
                            cause="rank 0 starts its own processes", advice="run it directly")
    evidence = rank_evidence(text("torchrun_gloo_timeout.txt"), launcher=[spawn])
    assert keys(evidence)[0] == "self_spawn"


def test_a_module_missing_from_the_chosen_interpreter():
    [hint] = find_hints(rank_evidence(text("python_missing_module.txt"), interpreter="/opt/envs/a/bin/python"))
    assert hint.key == "missing_module"
    assert hint.cause == "module 'transformers_not_installed_here' is not installed in /opt/envs/a/bin/python"


def killed(signal: str, pid: int | None = 4806, kernel_line: str | None = None) -> RankFailure:
    return RankFailure(rank=1, exit_code=-9, signal=signal, pid=pid, kernel_log=kernel_line)


def test_sigkill_confirmed_by_the_kernel_log_is_the_oom_killer():
    line = "Out of memory: Killed process 4806 (python) total-vm:9000000kB, anon-rss:8000000kB"
    [hint] = find_hints(Evidence(first=killed("SIGKILL", kernel_line=line), kernel_log=[line]))
    assert hint.key == "oom_killer" and "4806" in hint.cause


@pytest.mark.parametrize("kernel_log, says", [
    (None, "the kernel log is not readable here to confirm it"),
    (["usb 1-1: new device"], "the kernel log has no OOM record for pid 4806"),
])
def test_sigkill_without_confirmation_still_names_the_usual_cause(kernel_log, says):
    [hint] = find_hints(Evidence(first=killed("SIGKILL"), kernel_log=kernel_log))
    assert hint.key == "killed"
    assert "killed from outside (SIGKILL); the kernel's OOM killer is the usual cause" in hint.cause
    assert says in hint.cause


def test_sigkill_on_another_node_points_at_that_nodes_kernel_log():
    first = RankFailure(rank=3, host="node2", exit_code=-9, signal="SIGKILL", pid=4806)
    [hint] = find_hints(Evidence(first=first, kernel_log=None, first_is_remote=True))
    assert hint.key == "killed" and "it ran on node2: that machine's kernel log (dmesg) can confirm it" in hint.cause


def test_a_native_crash_suggests_faulthandler():
    [hint] = find_hints(Evidence(first=RankFailure(rank=2, exit_code=-11, signal="SIGSEGV")))
    assert hint.key == "native_crash" and "PYTHONFAULTHANDLER=1" in hint.advice


def test_a_plain_python_exception_gets_no_hint():
    output = 'Traceback (most recent call last):\n  File "t.py", line 1, in <module>\nValueError: bad batch'
    assert keys(rank_evidence(output)) == []


def test_the_first_failure_decides_not_the_survivors_noise():
    """The survivor's NCCL abort after rank 1 ran out of memory is a consequence, not a cause."""
    first = RankFailure(rank=1, exit_code=1, exception_line="torch.OutOfMemoryError: CUDA out of memory.")
    evidence = Evidence(first=first, stderr_tails={1: CUDA_OOM.splitlines(), 0: NCCL_SYSTEM_ERROR.splitlines()})
    assert keys(evidence) == ["cuda_out_of_memory"]


def test_a_remote_rank_that_vanished_is_worded_from_its_evidence():
    from runner.diagnosis.hints import Evidence, find_hints
    from runner.diagnosis.triage import RankFailure
    from runner.exit_status import describe_end_of

    lost = RankFailure(rank=1, host="node2", evidence="connection lost", when=1.0)
    assert describe_end_of(None, None, lost.evidence) == "its connection dropped without an exit: killed, or its node went away"
    keys = [hint.key for hint in find_hints(Evidence(first=lost, first_is_remote=True))]
    assert keys == ["node_lost"]
    assert describe_end_of(None, None, "exception") == "an uncaught exception"


def barrier_failure(traceback: str, when: float = 104.1) -> RankFailure:
    """Rank 0 of ``tests/scripts/diag_barrier_rank0.py`` (captured): gloo's error in ``dist.barrier()``."""
    line = exception_line_from_tail(traceback.splitlines())
    return RankFailure(rank=0, exit_code=1, exception_line=line, traceback=traceback, when=when,
                       evidence="exception")


def test_a_collective_a_peer_never_entered_because_it_finished_is_named_with_its_op_and_line():
    """The tutorial's ``if rank == 0: dist.barrier()``: gloo says "a remote worker crashing"; rank 1 exited 0."""
    captured = text("python_barrier_rank0.txt")
    [hint] = find_hints(Evidence(first=barrier_failure(captured), finished={1: 100.0}))
    assert hint.key == "mismatched_collective"
    assert hint.cause == ("mismatched collectives: rank 0 waited in barrier at diag_barrier_rank0.py:21, which "
                          "rank 1 never entered: it had already finished its script (exit code 0)")
    assert "same collectives in the same order" in hint.advice and "if rank == 0:" in hint.advice
    several = find_hints(Evidence(first=barrier_failure(captured), finished={3: 99.0, 1: 100.0}))
    assert "which ranks 1, 3 never entered: they had already finished their scripts" in several[0].cause


def test_a_peers_connection_error_without_a_finished_peer_or_outside_a_collective_is_no_mismatch():
    captured = text("python_barrier_rank0.txt")
    assert keys(Evidence(first=barrier_failure(captured))) == []  # the peer crashed: an echo, not a mismatch
    assert keys(Evidence(first=barrier_failure(captured), finished={1: 110.0})) == []  # it ended after rank 0 failed
    in_user_code = captured.replace('distributed_c10d.py", line 6371, in barrier', 'my_sockets.py", line 3, in send')
    in_user_code = in_user_code.replace("/work/main/.venv/lib/python3.11/site-packages/torch/distributed/", "/home/a/")
    assert keys(Evidence(first=barrier_failure(in_user_code), finished={1: 100.0})) == []
    no_traceback = RankFailure(rank=0, exit_code=1, when=104.1, exception_line=barrier_failure(captured).exception_line)
    [hint] = find_hints(Evidence(first=no_traceback, finished={1: 100.0}))
    assert hint.cause.startswith("mismatched collectives: rank 0 waited in a collective, which rank 1 never entered")


def test_ddp_device_ids_on_a_cpu_model_is_named_with_the_line_and_the_cpu_form():
    """A GPU recipe, ``DDP(model, device_ids=[local_rank])``, with the model on the CPU (gloo, CPU mode)."""
    [hint] = find_hints(rank_evidence(text("python_ddp_device_ids_cpu.txt"), cpu_mode=True))
    assert hint.key == "ddp_device_ids_on_cpu"
    assert hint.cause.startswith("DistributedDataParallel was given device_ids=[0] for a model whose parameters are "
                                 "on the CPU (ddp_cpu_ids.py:6: model = torch.nn.parallel.DistributedDataParallel(")
    assert hint.cause.endswith("; this run is in CPU mode (no GPU for the ranks)")
    assert "DDP(model)" in hint.advice and "if torch.cuda.is_available() else None" in hint.advice


def test_a_hint_is_one_type_with_one_enum_of_keys_from_the_rules_to_the_gui():
    from gui.models import diagnosis as gui_diagnosis
    from runner.diagnosis.hints import Hint, HintKey

    assert gui_diagnosis.Hint is Hint  # no twin in the GUI
    [hint] = find_hints(Evidence(first=RankFailure(rank=2, exit_code=-11, signal="SIGSEGV")))
    assert hint.key is HintKey.NATIVE_CRASH
    wire = hint.to_json()
    assert wire["key"] == "native_crash" and type(wire["key"]) is str  # the stored summary holds plain text
    assert Hint.from_json(wire) == hint
    assert Hint.from_json({"key": "from_a_newer_runner", "cause": "c"}) == Hint(HintKey.OTHER, "c", "")
    assert Hint(HintKey.KILLED, "cause", "advice").text == "cause → advice"
