"""The Slurm target without a cluster: the ``[slurm]`` table, the flags, the sbatch script,
what Slurm's tools print, and how an ending is put into words."""

from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace

import pytest

from runner.diagnosis.summary import RunSummary
from runner.profile.parse import SpecErrors, spec_from_dict, spec_to_dict
from runner.profile.resolve import MachineFacts, resolve
from runner.profile.spec import SlurmSpec
from runner.remote.launch_message import LaunchMessageError
from runner.sampling.gpu_report import GpuReport
from runner.slurm import outcome
from runner.slurm.agent import launch_from_environment
from runner.slurm.hostlist import HostListError, expand
from runner.slurm.script import (
    RENDEZVOUS_PLACEHOLDER,
    node_command,
    render_by_hand,
    render_for_runner,
)
from runner.slurm.states import JobRecord, RunPhase, parse_scontrol, queue_position
from runner.state import Outcome, RunStatus
from tests.jobs import rankwatch

MACHINE = MachineFacts(cpu_count=2, gpus=GpuReport(available=False, reason="no NVIDIA driver"))


def errors_of(table: dict) -> list[tuple[str, str]]:
    with pytest.raises(SpecErrors) as caught:
        spec_from_dict({"script": "train.py", **table})
    return [(error.field, error.message) for error in caught.value.errors]


# ---- the [slurm] table -----------------------------------------------------------------------

def test_a_slurm_table_round_trips_and_defaults_to_one_cpu_node():
    spec = spec_from_dict({"script": "train.py", "slurm": {}})
    assert spec.slurm == SlurmSpec()
    full = {"nodes": 4, "gpus_per_node": 8, "cpus_per_node": 64, "partition": "gpu,gpu-long",
            "time_limit": "1-12:00:00", "account": "lab", "qos": "high", "job_name": "resnet",
            "sbatch_options": ["--mem=0", "--constraint=a100"], "login_host": "login.cluster",
            "login_user": "me", "login_port": 2222, "telemetry_route": "login"}
    spec = spec_from_dict({"script": "train.py", "slurm": full})
    assert spec_from_dict(spec_to_dict(spec)) == spec
    assert spec_to_dict(spec)["slurm"] == full
    assert "nodes" not in spec_to_dict(spec) and "rendezvous" not in spec_to_dict(spec)


@pytest.mark.parametrize("time_limit", ["30", "30:00", "1:00:00", "2-12", "2-12:30", "2-12:30:00", "UNLIMITED"])
def test_slurms_time_formats_are_accepted(time_limit):
    assert spec_from_dict({"script": "t.py", "slurm": {"time_limit": time_limit}}).slurm.time_limit == time_limit


@pytest.mark.parametrize(("table", "field", "words"), [
    ({"slurm": {"time_limit": "1h"}}, "slurm.time_limit", 'is not a Slurm time limit; use minutes ("30")'),
    ({"slurm": {"time_limit": "0:00"}}, "slurm.time_limit", 'write "UNLIMITED" if that is meant'),
    ({"slurm": {"nodes": 0}}, "slurm.nodes", "0 is out of range"),
    ({"slurm": {"partition": "gpu; rm"}}, "slurm.partition", "is not a Slurm name"),
    ({"slurm": {"sbatch_options": ["--nodes=2"]}}, "slurm.sbatch_options[0]", "--nodes is set by Rankwatch; use slurm.nodes"),
    ({"slurm": {"sbatch_options": ["-o out.txt"]}}, "slurm.sbatch_options[0]", "-o is set by Rankwatch"),
    ({"slurm": {"sbatch_options": ["mem=1G"]}}, "slurm.sbatch_options[0]", "is not an sbatch option"),
    ({"slurm": {"telemetry_route": "carrier pigeon"}}, "slurm.telemetry_route", "is not one of auto, direct, login"),
    ({"slurm": {"walltime": 5}}, "slurm.walltime", "unknown key"),
    ({"slurm": {}, "nodes": [{"host": "a"}]}, "nodes", "Slurm allocates the nodes"),
    ({"slurm": {}, "rendezvous": {"mode": "c10d", "endpoint": "a:1"}}, "rendezvous", "c10d rendezvous on its first node"),
    ({"slurm": {}, "gpus": [0, 1]}, "gpus", "set slurm.gpus_per_node instead"),
    ({"slurm": {"gpus_per_node": 2}, "gpus": "cpu"}, "gpus", "but slurm.gpus_per_node is 2"),
])
def test_every_invalid_slurm_field_is_named_with_what_is_allowed(table, field, words):
    [(found_field, message)] = errors_of(table)
    assert found_field == field and words in message, message


def test_resolution_follows_slurm_not_this_machine():
    spec = spec_from_dict({"script": "train.py", "workdir": "/data/job", "slurm": {"nodes": 3, "gpus_per_node": 4}})
    launch = resolve(spec, MACHINE)
    assert [node.host for node in launch.nodes] == ["slurm node 0", "slurm node 1", "slurm node 2"]
    assert launch.world_size == 12 and launch.backend == "nccl" and not any(node.is_local for node in launch.nodes)
    cpu = resolve(spec_from_dict({"script": "t.py", "slurm": {"cpus_per_node": 8}}), MACHINE)
    assert cpu.cpu_mode and cpu.head.processes == 8 and cpu.backend == "gloo" and cpu.omp_num_threads == 1


# ---- the sbatch script -------------------------------------------------------------------------

def gpu_launch(**slurm):
    spec = spec_from_dict({"script": "train.py", "args": ["--lr", "1e-3", "--name", "it's"], "workdir": "/data/job",
                           "interpreter": "/opt/torch/bin/python", "env": {"NCCL_DEBUG": "WARN"},
                           "slurm": {"nodes": 2, "gpus_per_node": 4, "partition": "gpu", "time_limit": "2:00:00",
                                     "sbatch_options": ["--mem=0"], **slurm}})
    return resolve(spec, MACHINE)


def test_the_script_to_submit_by_hand_runs_plain_torchrun_with_the_same_flags_as_rankwatch_command():
    launch = gpu_launch()
    script = render_by_hand(launch)
    assert script.splitlines()[:3] == [
        "#!/bin/bash", "# Rankwatch: train.py on Slurm: 2 node(s) x 4 process(es) (4 GPU(s) each, nccl).",
        "# Submit it with `sbatch FILE`; `rankwatch run --slurm ...` submits the same job and watches it."]
    for line in ("#SBATCH --job-name=rankwatch-train", "#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=1",
                 "#SBATCH --cpus-per-task=4", "#SBATCH --no-requeue", "#SBATCH --gpus-per-node=4",
                 "#SBATCH --partition=gpu",
                 "#SBATCH --time=2:00:00", "#SBATCH --chdir=/data/job", "#SBATCH --mem=0",
                 "export NCCL_DEBUG=WARN", "export OMP_NUM_THREADS=1"):
        assert line in script.splitlines(), line
    assert "CUDA_VISIBLE_DEVICES" not in script  # Slurm gives each node its GPUs
    assert ('/opt/torch/bin/python -m torch.distributed.run --nnodes=2 --nproc-per-node=4 --rdzv-backend=c10d '
            '"--rdzv-endpoint=${head_address}:${rdzv_port}" "--rdzv-id=${SLURM_JOB_ID}" train.py --lr 1e-3 '
            "--name 'it'\"'\"'s'") in script
    assert RENDEZVOUS_PLACEHOLDER not in script


def test_both_scripts_are_valid_bash_and_ask_slurm_for_the_same_allocation():
    launch = gpu_launch()
    by_hand, for_runner = render_by_hand(launch), render_for_runner(launch)
    for script in (by_hand, for_runner):
        subprocess.run(["bash", "-n"], input=script, text=True, check=True)
    assert [line for line in by_hand.splitlines() if line.startswith("#SBATCH")] == \
        [line for line in for_runner.splitlines() if line.startswith("#SBATCH")]
    assert "srun --ntasks-per-node=1 --kill-on-bad-exit=1 --chdir=/ /opt/torch/bin/python -m runner.slurm.agent" \
        in for_runner
    assert "TOKEN" not in for_runner  # the token travels in the job's environment, never in the script


def test_rankwatch_command_slurm_prints_the_script(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("")
    result = rankwatch("command", "--slurm", "--nodes", "2", "--nproc-per-node", "2", "--time", "10",
                       "--sbatch-option=--mem=4G", "--interpreter", sys.executable, str(script), "--epochs", "3",
                       cwd=str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("#!/bin/bash\n")
    assert "#SBATCH --nodes=2\n" in result.stdout and "#SBATCH --mem=4G\n" in result.stdout
    assert "--nnodes=2 --nproc-per-node=2 --rdzv-backend=c10d" in result.stdout
    assert result.stdout.rstrip().endswith(f"{script} --epochs 3")


@pytest.mark.parametrize(("flags", "words"), [
    (["--partition", "gpu"], "slurm: --partition is a Slurm setting; add --slurm"),
    (["--slurm", "--hosts", "a,b"], "nodes: --hosts lists nodes, but Slurm allocates"),
    (["--slurm", "--time", "soon"], "rankwatch: --time: 'soon' is not a Slurm time limit"),  # as typed
])
def test_slurm_flags_that_cannot_apply_are_refused_naming_the_field(tmp_path, flags, words):
    script = tmp_path / "train.py"
    script.write_text("")
    result = rankwatch("command", *flags, str(script))
    assert result.returncode == 2 and words in result.stderr, result.stderr


def test_the_agent_builds_its_node_command_from_the_runners_template_and_slurms_variables():
    launch = resolve(spec_from_dict({"script": "/data/train.py", "slurm": {"nodes": 2}}), MACHINE)
    template = node_command(launch)
    from runner.remote.launch_message import LaunchMessage
    from runner.slurm.agent import launch_template
    message = LaunchMessage(token="", head_host="10.0.0.5", head_port=4000, run_key="k" * 24, run=7, node_rank=0,
                            host="", argv=template.argv, env=template.env, cwd="/data")
    environ = {"RANKWATCH_SLURM_LAUNCH": launch_template(message), "RANKWATCH_SLURM_TOKEN": "secret",
               "RANKWATCH_SLURM_RENDEZVOUS": "n07:21234", "SLURM_NODEID": "1", "SLURM_JOB_ID": "1234",
               "SLURMD_NODENAME": "n08"}
    launch_message = launch_from_environment(environ)
    assert (launch_message.node_rank, launch_message.host, launch_message.token) == (1, "n08", "secret")
    assert "--rdzv-endpoint=n07:21234" in launch_message.argv and "--rdzv-id=1234" in launch_message.argv
    assert launch_message.env["RANKWATCH_NODE_RANK"] == "1" and launch_message.env["RANKWATCH_NODE_HOST"] == "n08"
    with pytest.raises(LaunchMessageError, match="RANKWATCH_SLURM_TOKEN not set: this runs inside a job"):
        launch_from_environment({key: value for key, value in environ.items() if "TOKEN" not in key})


# ---- what Slurm says -------------------------------------------------------------------------

SCONTROL = ("JobId=42 JobName=rankwatch-train UserId=me(1000) JobState=PENDING Reason=Resources Dependency=(null) "
            "Requeue=1 TimeLimit=01:00:00 Partition=gpu NodeList= StartTime=Unknown EndTime=Unknown "
            "ExitCode=0:0 RunTime=00:00:00 TRES=cpu=8,node=2 Command=/home/me/my job/run.sh")


def test_scontrol_lines_become_records_with_the_queue_position():
    record = parse_scontrol(SCONTROL, "42")
    assert (record.state, record.reason, record.partition, record.start, record.nodes) == \
        ("PENDING", "Resources", "gpu", None, [])
    assert record.phase == RunPhase.PENDING
    position, total = queue_position(["40", "42", "43"], "42")
    assert record.with_position(position, total).describe() == \
        "pending: Resources (waiting for resources to free up), position 2 of 3 in the queue of partition gpu"
    assert parse_scontrol(SCONTROL, "41") is None


def test_final_states_and_exit_codes():
    assert JobRecord("1", "TIMEOUT", exit_code="0:15").exit_status == 143
    assert JobRecord("1", "FAILED", exit_code="2:0").exit_status == 2
    assert JobRecord("1", "COMPLETING").phase == RunPhase.COMPLETING
    assert JobRecord("1", "NODE_FAIL", reason="NodeDown", run_time="00:10:00").describe() == \
        "node failure (reason NodeDown, ran 00:10:00)"


def test_host_lists_expand_in_slurms_order():
    assert expand("gpu[01-03,07],login1") == ["gpu01", "gpu02", "gpu03", "gpu07", "login1"]
    assert expand("r[1-2]-n[8-9]") == ["r1-n8", "r1-n9", "r2-n8", "r2-n9"]
    with pytest.raises(HostListError):
        expand("n[1-")


def row(rank: int, state: str, step: int | None):
    return SimpleNamespace(rank=rank, state=state, step=step)


def test_an_ending_by_slurm_wins_over_a_rank_failure_and_lists_the_ranks():
    record = JobRecord("9", "TIMEOUT", time_limit="01:00:00", run_time="01:00:12", exit_code="0:15")
    given = RunSummary(Outcome.STOPPED, "stopped on request", 143)
    summary, status, code = outcome.conclude(given, RunStatus.FAILED, 143, record=record, job_id="9",
                                             cancel_requested=False, failure=None, output_tail=[],
                                             rank_rows=[row(0, "stopped", 120), row(1, "stopped", 121)])
    assert given.headline == "stopped on request"  # a new summary: the one given is left as it is
    summary = summary.to_wire()
    assert (status, code, summary["outcome"]) == (RunStatus.FAILED, 143, "timeout")
    assert summary["headline"] == ("Slurm job 9 reached its time limit (01:00:00) after 01:00:12; "
                                   "rank 0 stopped at step 120, rank 1 stopped at step 121")
    summary, status, code = outcome.conclude(RunSummary(Outcome.STOPPED, "stopped on request", 0), RunStatus.STOPPED,
                                             0, record=JobRecord("9", "CANCELLED"), job_id="9",
                                             cancel_requested=True, failure=None, output_tail=[], rank_rows=[])
    assert summary.headline == "stopped on request while pending in Slurm (Slurm job 9 cancelled before it started)"


def test_agents_that_never_connected_fail_the_run_with_the_reason_and_the_jobs_output():
    given = RunSummary(Outcome.FAILED, "the job failed (exit code 3) before any rank reported", 3)
    failure = "the agents of node(s) 0 did not connect back to 10.0.0.5:4100 before Slurm job 9 ended (failed)"
    summary, status, code = outcome.conclude(given, RunStatus.FAILED, 3,
                                             record=JobRecord("9", "FAILED", exit_code="3:0"),
                                             job_id="9", cancel_requested=False, failure=failure, rank_rows=[],
                                             output_tail=["rankwatch agent: cannot connect to the head runner at "
                                                          "10.0.0.5:4100 (timed out)"])
    summary = summary.to_wire()
    assert (status, code, summary["exit_code"]) == (RunStatus.FAILED, 3, 3)
    assert summary["headline"] == (failure + "; its output ends with: rankwatch agent: cannot connect to the head "
                                   "runner at 10.0.0.5:4100 (timed out)")
    assert summary["slurm"]["output_tail"][-1].startswith("rankwatch agent: cannot connect")
