"""Triage: the first failure, its traceback from wherever it can be found, the kernel log, findings."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

from rankwatch.protocol import Bottleneck
from runner.diagnosis.bottleneck_record import BottleneckRecord, BottleneckVerdict
from runner.diagnosis.error_files import find_error_files, read_error_file
from runner.diagnosis.findings import Findings, StallFinding, StoredDiagnostics
from runner.diagnosis.kernel_log import find_oom_kill, read_kernel_log
from runner.diagnosis.progress import RankProgress
from runner.diagnosis.report import format_diagnostics
from runner.diagnosis.stacks import CaptureFiles, analyse
from runner.diagnosis.straggler_record import StragglerCause, StragglerRecord
from runner.diagnosis.torchrun_report import parse_torchrun_report
from runner.diagnosis.triage import TriageInput, triage, usage_error_from_tail
from runner.view.terminal import render_summary
from tests.diagnosis.test_stacks import BARRIER, HELPER, SCRIPT, main_frames, marked

DATA = Path(__file__).parent / "data"

KILLED_REPORT = """Failures:
[1]:
  time      : 2026-11-22_00:36:49
  host      : node-a
  rank      : 0 (local_rank: 0)
  exitcode  : -15 (pid: 4805)  (SIGTERM)
  error_file: <N/A>
  traceback : Signal 15 (SIGTERM) received by PID 4805
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-11-22_00:36:48
  host      : node-a
  rank      : 1 (local_rank: 1)
  exitcode  : -9 (pid: 4806)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 4806
============================================================"""


def killed_input(kernel_log) -> TriageInput:
    data = TriageInput(kernel_log_reader=lambda: kernel_log)
    data.lost = {1: 100.0, 0: 100.4}
    data.hosts = {0: "node-a", 1: "node-a"}
    data.report = parse_torchrun_report(KILLED_REPORT.splitlines())
    return data


def test_a_sigkilled_rank_is_first_and_the_kernel_log_confirms_the_oom_killer():
    line = "[ 8123.4] Out of memory: Killed process 4806 (python) total-vm:31457280kB, anon-rss:30000000kB"
    summary = triage(killed_input(["some other line", line]), 1, stopped=False)
    first = summary["first_failure"]
    assert first["rank"] == 1 and first["signal"] == "SIGKILL" and first["pid"] == 4806
    assert first["kernel_log"] == line.strip()
    assert summary["headline"] == ("rank 1 on node-a failed first (signal SIGKILL): killed by the kernel's OOM "
                                   "killer (see the kernel log line)")
    assert summary["hints"][0]["key"] == "oom_killer"


def test_a_survivors_connection_error_is_an_echo_of_the_killed_rank_even_when_it_arrives_first():
    """Under load the hub may notice rank 1's death after rank 0 already reported its echo."""
    data = killed_input([])
    data.lost = {1: 100.8}
    data.exceptions = {0: {"t": 100.1, "exc_type": "RuntimeError", "traceback": "Traceback ...",
                           "message": "[../gloo/transport/tcp/pair.cc:561] Connection closed by peer [127.0.0.1]:22952"}}
    data.report = parse_torchrun_report(KILLED_REPORT.replace("Root Cause", "Root").splitlines())  # no root cause
    summary = triage(data, 1, stopped=False)
    assert summary["first_failure"]["rank"] == 1
    assert [o["rank"] for o in summary["other_failures"]] == [0]


def test_torchrun_naming_a_stopped_survivor_as_root_cause_does_not_beat_the_killed_rank():
    """torchrun's "first observed failure" can be a survivor: its error file (the echo) is
    timestamped before torchrun polled the killed rank; it then SIGTERMs the survivor."""
    data = killed_input([])
    data.lost = {1: 100.3}
    data.exceptions = {0: {"t": 100.1, "exc_type": "RuntimeError", "traceback": "Traceback ...",
                           "message": "[pair.cc:561] Connection closed by peer. This is typically caused by a "
                                      "remote worker crashing."}}
    swapped = (KILLED_REPORT.replace("rank      : 0 (local_rank: 0)", "rank      : X")
               .replace("rank      : 1 (local_rank: 1)", "rank      : 0 (local_rank: 0)")
               .replace("rank      : X", "rank      : 1 (local_rank: 1)")
               .replace("-15 (pid: 4805)", "-9 (pid: 4806)", 1).replace("-9 (pid: 4806)\n", "-15 (pid: 4805)\n"))
    data.report = parse_torchrun_report(swapped.splitlines())
    assert data.report.root_cause.rank == 0 and data.report.root_cause.exit_code == -15
    summary = triage(data, 1, stopped=False)
    assert summary["first_failure"]["rank"] == 1
    assert summary["headline"].startswith("rank 1 on node-a failed first (signal SIGKILL)")


def test_without_a_readable_kernel_log_the_hint_says_so_and_never_fails():
    summary = triage(killed_input(None), 1, stopped=False)
    assert summary["first_failure"]["kernel_log"] is None
    assert summary["headline"].endswith("killed from outside (the kernel's OOM killer is the usual cause)")
    assert "not readable here" in summary["hints"][0]["cause"]


def test_kernel_log_lines_of_every_known_shape_are_found_by_pid():
    lines = ["Memory cgroup out of memory: Killed process 777 (python) total-vm:1kB",
             "oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),task=python,pid=888,uid=1000",
             "Out of memory: Killed process 999 (python)"]
    assert find_oom_kill(lines, 777) == lines[0]
    assert find_oom_kill(lines, 888) == lines[1]
    assert find_oom_kill(lines, 99) is None
    assert find_oom_kill(lines, 9999) is None


def test_reading_the_kernel_log_never_raises():
    lines = read_kernel_log()
    assert lines is None or isinstance(lines, list)


def test_the_error_file_is_a_traceback_source_when_the_bootstrap_reported_nothing(tmp_path):
    """A rank that exited without telling the hub (telemetry off, hub unreachable, @record's file)."""
    folder = tmp_path / "torchrun" / "abc_123" / "attempt_0" / "1"
    folder.mkdir(parents=True)
    shutil.copy(DATA / "error_file_rank1.json", folder / "error.json")
    older = tmp_path / "torchrun" / "old_1" / "attempt_0" / "1"
    older.mkdir(parents=True)
    assert find_error_files(tmp_path / "torchrun") == {1: folder / "error.json"}
    data = TriageInput(log_dir=str(tmp_path / "torchrun"))
    data.exits = {1: (1, 50.0)}
    summary = triage(data, 1, stopped=False)
    first = summary["first_failure"]
    assert first["rank"] == 1 and first["traceback_source"] == "error file"
    assert 'diag_exception.py", line 10, in check_batch' in first["traceback"]
    assert first["exception_line"] == "ValueError: batch 3 on rank 1 has 7 features, expected 8"
    out = io.StringIO()
    render_summary({"id": 7, "status": "failed", "exit_code": 1, "summary": summary}, out)
    assert "traceback (last lines, from error file):" in out.getvalue()


def test_an_error_file_with_a_plain_message_or_garbage(tmp_path):
    plain = tmp_path / "plain.json"
    plain.write_text(json.dumps({"message": "RuntimeError: boom"}))
    assert read_error_file(plain).message == "RuntimeError: boom"
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    assert read_error_file(broken) is None
    assert read_error_file(tmp_path / "missing.json") is None


def test_an_argparse_error_is_the_exception_line_of_an_exit_code_2():
    tail = ["usage: train.py [-h] --local_rank LOCAL_RANK",
            "train.py: error: the following arguments are required: --local_rank"]
    assert usage_error_from_tail(tail) == tail[1]
    data = TriageInput()
    data.exits = {0: (2, 10.0), 1: (2, 10.1)}
    for rank in (0, 1):
        for line in tail:
            data.add_stderr(rank, line)
    summary = triage(data, 1, stopped=False)
    assert summary["headline"] == ("rank 0 failed first (exit code 2): train.py: error: the following arguments "
                                   "are required: --local_rank")
    assert [h["key"] for h in summary["hints"]] == ["legacy_local_rank"]


def hang_findings() -> Findings:
    """Both ranks of diag_hang stalled at step 7; the stall's capture of their real dumps."""
    findings = Findings()
    for rank in range(2):
        findings.add_stall(StallFinding(rank=rank, step=7, since=1.0, seconds=5.2, threshold=5.0))
    stalled = RankProgress(step=7, idle_seconds=5.2, stalled=True, progressing=False)
    result = analyse({0: main_frames(BARRIER), 1: main_frames(HELPER)}, "stalled", 2.0,
                     progress={0: stalled, 1: stalled})
    result.files = CaptureFiles(path=None, text_path="/runs/3/stacks/capture-1.txt")
    findings.set_stacks(result)
    return findings


def test_a_stopped_hang_says_who_stalled_and_who_holds_them_up_in_the_headline_and_the_block():
    summary = triage(TriageInput(findings=hang_findings()), 130, stopped=True)
    helper_line, helper_text = marked("WAIT")
    assert summary["outcome"] == "stopped"
    assert summary["headline"] == (
        "stopped on request; ranks 0, 1 were stalled at step 7 (no progress for at least 5 s); stacks: rank 1 is the "
        "culprit: rank 0 waits in barrier, rank 1 is in no collective "
        f"(at diag_hang.py:{helper_line} in wait_for_checkpoint)")
    lines = format_diagnostics(StoredDiagnostics.from_wire(summary["diagnostics"]), 3)
    assert lines[0] == "  stalled:       ranks 0, 1 at step 7 (no progress for 5 s, threshold 5 s; never resumed)"
    assert lines[1].startswith("  stacks:        rank 1 is the culprit: rank 0 waits in barrier")
    assert lines[1].endswith("(taken when ranks stalled)")
    assert lines[2].strip() == (f"rank 1 is at {SCRIPT}:{helper_line} in wait_for_checkpoint "
                                f"(<module> → wait_for_checkpoint): {helper_text}")
    assert lines[3].strip().startswith("rank 0 waits in barrier, called at ")
    assert "rankwatch stacks 3" in lines[4]


def test_a_successful_run_keeps_its_findings():
    findings = Findings()
    findings.stragglers[1] = StragglerRecord(rank=1, cause=StragglerCause.DATA, excess=0.2,
                                             message="rank 1 is a straggler: x")
    findings.consistency_checks = 4
    summary = triage(TriageInput(findings=findings), 0, stopped=False)
    assert summary["outcome"] == "succeeded"
    assert format_diagnostics(StoredDiagnostics.from_wire(summary["diagnostics"])) == ["  straggler:     rank 1 is a straggler: x",
                                                          "  parameters:    identical on every rank at all 4 checks"]
    assert "diagnostics" not in triage(TriageInput(), 0, stopped=False)


def test_failure_and_hang_summaries_do_not_repeat_a_straggler():
    """A straggler found while the job trained does not explain how it ended: only a finished run's
    summary says it (the events keep it)."""
    straggler = StragglerRecord(rank=1, cause=StragglerCause.COMPUTE, excess=0.02, message="rank 1 is a straggler: x")
    verdict = BottleneckRecord(BottleneckVerdict(Bottleneck.STRAGGLER, "rank 1 is a straggler: x", "look at rank 1",
                                                 rank=1, phase="forward"), "rank 1 is a straggler: x")
    hung = hang_findings()
    hung.stragglers[1], hung.bottleneck = straggler, verdict
    hang = format_diagnostics(StoredDiagnostics.from_wire(triage(TriageInput(findings=hung), 130, stopped=True)["diagnostics"]), 3)
    assert hang[0].startswith("  stalled:") and not any("a straggler" in line for line in hang)
    failing = Findings()
    failing.stragglers[1], failing.bottleneck = straggler, verdict
    failing.consistency_checks = 2
    data = TriageInput(findings=failing, seen={0, 1}, exits={1: (1, 10.0)})
    failed = triage(data, 1, stopped=False)
    assert failed["outcome"] == "failed"
    assert format_diagnostics(StoredDiagnostics.from_wire(failed["diagnostics"])) == ["  parameters:    identical on every rank at all 2 checks"]
    alone = Findings()
    alone.stragglers[1] = straggler
    assert "diagnostics" not in triage(TriageInput(findings=alone, seen={0, 1}), 1, stopped=False)


def test_a_failed_runs_summary_leaves_out_a_bottleneck_that_was_not_determined():
    """Five steps, then a failure: "not determined: 1 step(s) had their phases timed" explains nothing there."""
    undetermined = BottleneckRecord(
        BottleneckVerdict(None, "not measured: 1 step(s) had their phases timed, 5 are needed"), None)
    failing = Findings()
    failing.bottleneck = undetermined
    assert "diagnostics" not in triage(TriageInput(findings=failing, seen={0, 1}, exits={1: (1, 10.0)}), 1,
                                       stopped=False)
    finished = Findings()
    finished.bottleneck = undetermined
    summary = triage(TriageInput(findings=finished, seen={0, 1}, measured={0, 1}, instrumented=True), 0,
                     stopped=False)
    assert summary["diagnostics"]["bottleneck"]["verdict"] is None  # a finished run still says why not


def test_a_job_that_exits_0_without_a_rank_is_not_called_finished():
    """Seen: the DDP tutorial series' multigpu.py spawns torch.cuda.device_count() = 0 ranks in CPU mode."""
    summary = triage(TriageInput(seen={0, 1}, measured={0, 1}, instrumented=True), 0, stopped=False)
    assert (summary["outcome"], summary["headline"]) == ("succeeded", "all ranks finished")
    assert "hints" not in summary
    spawned_none = triage(TriageInput(cpu_mode=True, self_spawn=True,
                                      spawn_call="mp.spawn(...) on line 104"),
                          0, stopped=False)
    assert spawned_none["outcome"] == "succeeded"  # the process did exit 0: not turned into a failure
    assert spawned_none["headline"] == "the job exited 0, but no rank ever reported: nothing was measured"
    [hint] = spawned_none["hints"]
    assert hint["key"] == "no_rank_reported"
    assert hint["cause"].startswith("the script started no rank: its mp.spawn(...) on line 104 started no process")
    assert "torch.cuda.device_count() is 0 in CPU mode" in hint["cause"] and "nprocs=" in hint["advice"]
    under_torchrun = triage(TriageInput(), 0, stopped=False)
    assert under_torchrun["hints"][0]["cause"].startswith("every process ended before its rank reported")
    assert triage(TriageInput(), 143, stopped=True)["headline"] == "stopped on request"  # a stop says so, ranks or not


def test_a_job_whose_ranks_exit_0_without_a_step_is_not_called_finished():
    """Seen: PyTorch's FSDP2 example prints "Unable to locate sufficient 2 gpus" and exits 0 in CPU mode."""
    nothing = triage(TriageInput(seen={0, 1}, instrumented=True), 0, stopped=False)
    assert nothing["outcome"] == "succeeded"
    assert nothing["headline"] == "all ranks finished, but none made a training step: nothing was measured"
    [hint] = nothing["hints"]
    assert hint["key"] == "no_step_measured" and "rankwatch runs logs" in hint["advice"]
    one_measured = triage(TriageInput(seen={0, 1}, measured={1}, instrumented=True), 0, stopped=False)
    assert (one_measured["headline"], one_measured.get("hints")) == ("all ranks finished", None)
    uninstrumented = triage(TriageInput(seen={0, 1}, instrumented=False), 0, stopped=False)
    assert uninstrumented["headline"] == "all ranks finished"  # --no-instrument measures nothing by choice
    stopped = triage(TriageInput(seen={0, 1}, instrumented=True), 143, stopped=True)
    assert stopped["headline"] == "stopped on request"


def test_a_stall_whose_rank_then_exited_0_is_not_reported_as_never_resumed():
    """Seen: PyTorch's word language model example evaluates for a minute after its last step and ends."""
    findings = Findings()
    findings.add_stall(StallFinding(rank=0, step=310, since=1000.0, seconds=30.5, threshold=30.0))
    findings.add_stall(StallFinding(rank=1, step=310, since=1000.0, seconds=30.5, threshold=30.0))
    data = TriageInput(findings=findings, seen={0, 1}, measured={0, 1}, instrumented=True,
                       exits={0: (0, 1076.0), 1: (-15, 1080.0)})
    summary = triage(data, 1, stopped=True)
    stalls = summary["diagnostics"]["stalls"]
    assert stalls[0]["finished_after"] == 76.0 and "finished_after" not in stalls[1]
    lines = format_diagnostics(StoredDiagnostics.from_wire(summary["diagnostics"]))
    assert lines == [
        "  stalled:       rank 0 at step 310 (no progress for 30 s, threshold 30 s; then it finished by itself "
        "76 s after its last progress (exit code 0): not a hang)",
        "  stalled:       rank 1 at step 310 (no progress for 30 s, threshold 30 s; never resumed)"]


def test_a_rank_torchrun_sigtermed_is_not_first_even_when_its_exit_was_stamped_first():
    """Seen in CI: both ranks' exits reaped in the same instant, rank 1 (SIGTERMed by torchrun once
    rank 0 exited 2) stamped 0.2 ms earlier; the rank that failed on its own is the first."""
    usage = "diag_legacy.py: error: the following arguments are required: --local_rank"
    data = TriageInput(exits={0: (2, 100.0002), 1: (-15, 100.0)}, hosts={0: "localhost", 1: "localhost"})
    for rank in (0, 1):
        data.add_stderr(rank, usage)
    summary = triage(data, 1, stopped=False)
    assert summary["first_failure"]["rank"] == 0
    assert summary["headline"] == f"rank 0 on localhost failed first (exit code 2): {usage}"
    assert [(o["rank"], o["signal"]) for o in summary["other_failures"]] == [(1, "SIGTERM")]
    alone = TriageInput(exits={1: (-15, 100.0)}, hosts={1: "localhost"})  # a SIGTERM with nothing else: first
    assert triage(alone, 1, stopped=False)["first_failure"]["rank"] == 1


ABORTED_AT_EXIT_REPORT = """Root Cause (first observed failure):
[0]:
  time      : 2026-11-22_21:12:03
  host      : localhost
  rank      : 0 (local_rank: 0)
  exitcode  : -6 (pid: 3520)
  error_file: <N/A>
  traceback : Signal 6 (SIGABRT) received by PID 3520
============================================================"""


def test_a_rank_that_aborts_after_its_script_returned_is_named_as_such_not_as_a_crash_in_training():
    """Seen in CI, ~1 gloo job in 50 (plain torchrun too): all steps stored, then "terminate called without
    an active exception" and SIGABRT while the interpreter exits."""
    data = TriageInput(exits={0: (0, 100.0)}, hosts={0: "localhost"}, seen={0}, measured={0}, instrumented=True)
    data.add_stderr(0, "terminate called without an active exception")
    data.report = parse_torchrun_report(ABORTED_AT_EXIT_REPORT.splitlines())
    summary = triage(data, 1, stopped=False)
    assert summary["headline"] == ("rank 0 on localhost failed first (signal SIGABRT): rank 0's script ran to its "
                                   "end (exit code 0), then the process died of SIGABRT while Python shut down: "
                                   "the failure is in the shutdown, after the script's last line")
    [hint] = summary["hints"]
    assert hint["key"] == "crash_after_the_script_returned" and "os._exit(0)" in hint["advice"]
    during = TriageInput(hosts={0: "localhost"}, seen={0})  # no exit 0 from the script: a crash in it
    during.report = parse_torchrun_report(ABORTED_AT_EXIT_REPORT.splitlines())
    assert [h["key"] for h in triage(during, 1, stopped=False)["hints"]] == ["native_crash"]


def test_a_barrier_only_rank_0_called_is_named_a_mismatched_collective_and_the_finished_rank_is_listed():
    """``tests/scripts/diag_barrier_rank0.py`` as triage got it: rank 0's barrier failed with gloo's "Connection
    closed by peer ... a remote worker crashing" 4.12 s after rank 1's script ended with exit code 0."""
    traceback = (DATA / "python_barrier_rank0.txt").read_text()
    exception = traceback.strip().splitlines()[-1]
    exc_type, _, message = exception.partition(": ")
    data = TriageInput(exceptions={0: {"t": 104.12, "exc_type": exc_type, "message": message,
                                       "traceback": traceback}},
                       exits={0: (1, 104.2), 1: (0, 100.0)}, hosts={0: "localhost", 1: "localhost"},
                       seen={0, 1}, measured={0, 1}, instrumented=True)
    summary = triage(data, 1, stopped=False)
    assert summary["headline"] == (
        "rank 0 on localhost failed first (exit code 1): mismatched collectives: rank 0 waited in barrier at "
        "diag_barrier_rank0.py:21, which rank 1 never entered: it had already finished its script (exit code 0)")
    assert summary["first_failure"]["exception_line"] == exception  # gloo's own words stay, below the headline
    assert summary["finished"] == [{"rank": 1, "before": 4.12}] and summary["other_failures"] == []
    assert summary["hints"][0]["key"] == "mismatched_collective"
    out = io.StringIO()
    render_summary({"id": 64, "status": "failed", "exit_code": 1, "summary": summary}, out)
    assert "  finished:      rank 1 (exit code 0, 4.12 s before rank 0 failed)\n" in out.getvalue()


def test_hints_name_the_run_by_its_id():
    """Seen: "check the script's own output (`rankwatch runs logs RUN`)" printed at the end of run 64."""
    summary = triage(TriageInput(run_id=64), 0, stopped=False)
    assert "`rankwatch runs logs 64`" in summary["hints"][0]["advice"]
    stepless = triage(TriageInput(seen={0}, instrumented=True, run_id=64), 0, stopped=False)
    assert "`rankwatch runs logs 64`" in stepless["hints"][0]["advice"]
    spawned = triage(TriageInput(self_spawn=True, run_id=64), 0, stopped=False)
    assert "`rankwatch runs logs 64`" in spawned["hints"][0]["advice"]
    data = TriageInput(exits={0: (1, 100.0)}, run_id=64)
    data.add_stderr(0, "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=808, OpType=ALLREDUCE)")
    [timeout] = triage(data, 1, stopped=False)["hints"]
    assert timeout["key"] == "collective_timeout" and "`rankwatch stacks 64`" in timeout["advice"]
    for hint in [*summary["hints"], *stepless["hints"], *spawned["hints"], timeout]:
        assert " RUN`" not in hint["advice"]


def test_concluding_a_run_is_one_pure_function_returning_the_whole_typed_summary():
    """Who stopped the run, how, and a store that could not hold everything are in the headline
    that conclude returns: nothing edits the summary afterwards (it is frozen)."""
    import dataclasses

    import pytest

    from runner.diagnosis.summary import RunSummary, StopRequest
    from runner.diagnosis.triage import conclude
    from runner.state import Outcome

    stop = StopRequest("Ctrl-C", killed=False)
    losses = {"losses": [{"rank": 1, "dropped": 3, "rejected": 0, "not_received": 0}], "store_incomplete": "disk full"}
    summary = conclude(TriageInput(seen={0}), 143, stopped=True, stop=stop, losses=losses)
    assert summary.outcome is Outcome.STOPPED and summary.stopped_by == "Ctrl-C"
    assert summary.headline == "stopped on request (Ctrl-C): the job was ended with SIGTERM (store incomplete: disk full)"
    assert summary == conclude(TriageInput(seen={0}), 143, stopped=True, stop=stop, losses=losses)
    with pytest.raises(dataclasses.FrozenInstanceError):
        summary.headline = "edited"  # type: ignore[misc]
    wire = summary.to_wire()
    assert wire == {"outcome": "stopped", "headline": summary.headline, "exit_code": 143, "stopped_by": "Ctrl-C",
                    "losses": losses["losses"], "store_incomplete": "disk full"}
    assert RunSummary.from_wire(wire) == summary
    killed = conclude(TriageInput(seen={0}), 137, stopped=True, stop=StopRequest("SIGTERM sent to the runner", True))
    assert killed.headline == "stopped on request (SIGTERM sent to the runner): the job was killed (SIGKILL)"


def test_a_failed_runs_summary_reads_back_whole_and_keeps_what_others_added():
    from runner.diagnosis.summary import RunSummary
    from runner.state import Outcome

    wire = triage(killed_input(["[ 1.0] Out of memory: Killed process 4806 (python)"]), 1, stopped=False)
    wire["slurm"] = {"job_id": "12", "state": "COMPLETED"}  # Slurm's record, added by runner.slurm.outcome
    summary = RunSummary.from_wire(wire)
    assert summary.outcome is Outcome.FAILED and summary.first_failure.rank == 1
    assert [hint.key.value for hint in summary.hints] == [hint["key"] for hint in wire["hints"]]
    assert summary.to_wire() == wire
    assert RunSummary.from_wire({"outcome": "from the future", "headline": "h"}).outcome is Outcome.STOPPED
