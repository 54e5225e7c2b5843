"""What the window says, as plain Python: tick labels on degenerate data, the panel's share of
the height, run-end notices and titles, one wording for how a rank ended, progress of a
finished run, empty-chart notes, the hover readout's rows, the log prefix, the history's
script column, the cores warning and the name an edited launch is recorded under."""

from __future__ import annotations

import math

import pytest

from gui.charts import ticks
from gui.charts.axis import seconds_spacing
from gui.charts.readout import ReadoutRow, format_value, pick_rows
from gui.gateway.probe_output import unavailable_report
from gui.gateway.run_state import RankInfo, RunInfo, RunReading, SnapshotMessage
from gui.gateway.runner_rules import RunStatus
from gui.gateway.wording import RunWording
from gui.models import layout
from gui.models.charts import (
    BUILT_IN_CHARTS,
    chart_columns,
    empty_chart_note,
    logged_chart,
    logged_metric_names,
)
from gui.models.exits import ended_by, rank_ended_by, rank_exits
from gui.models.history import entry_of
from gui.models.launch_form import LaunchFormModel, cores_warning
from gui.models.monitor import LogEntry, MonitorModel, format_log_entry
from gui.models.notices import run_end_notice, window_title
from gui.widgets.monitor_panel import STATUS_COLORS
from rankwatch import protocol
from rankwatch.protocol import LogLine, MetricRecord
from runner.profile.resolve import MachineFacts, resolve, usable_cpus
from runner.profile.spec import LaunchSpec
from tests.hub_messages import rank_changes, run_changes, update

T0 = 1_700_000_000.0
CHART = {definition.series: definition for definition in BUILT_IN_CHARTS}


# ---- tick labels -------------------------------------------------------------------------

def test_one_step_reads_as_one_step_not_floating_point_noise():
    low, high = ticks.padded_range(1.0, 1.0, ticks.STEP)
    assert high - low >= ticks.MIN_STEP_SPAN and low <= 1.0 <= high
    assert ticks.step_labels([0.0, 1.0, 2.0], 1.0) == ["0", "1", "2"]
    assert ticks.step_labels([1.5], 0.5) == [""]  # no tick between two steps
    assert ticks.step_labels([10_000, 15_000, 20_000], 5000) == ["10k", "15k", "20k"]
    assert ticks.step_labels([1_000_000, 1_500_000], 500_000) == ["1.0M", "1.5M"]


def test_the_first_seconds_read_as_seconds_and_later_ones_as_a_clock():
    low, high = ticks.padded_range(3.0011010170, 3.0011010170, ticks.SECONDS)
    assert high - low >= ticks.MIN_SECONDS_SPAN
    assert ticks.seconds_labels([2.0, 3.0, 4.0], 1.0) == ["2 s", "3 s", "4 s"]
    assert ticks.seconds_labels([0.0, 2.5, 5.0], 2.5) == ["0.0 s", "2.5 s", "5.0 s"]
    assert ticks.seconds_labels([0, 30, 60, 90], 30) == ["0:00", "0:30", "1:00", "1:30"]
    assert ticks.seconds_labels([3600, 7200], 3600) == ["1:00:00", "2:00:00"]
    # Clock-sized spacings, not 50 s or 100 s.
    assert seconds_spacing(150, 400)[0][0] == 30.0
    assert seconds_spacing(3600, 400)[0][0] == 900.0


def test_a_loss_around_1e_9_gets_several_distinct_labels():
    labels = ticks.value_labels([1.00e-9, 1.05e-9, 1.10e-9], 5e-11)
    assert labels == ["1.00e-9", "1.05e-9", "1.10e-9"]
    assert ticks.value_labels([0.95e-9, 1.0e-9], 5e-11) == ["0.95e-9", "1.00e-9"]  # one exponent per axis
    assert ticks.value_labels([100_000, 200_000], 100_000) == ["1e5", "2e5"]
    assert ticks.value_labels([2.0, 2.5, 3.0], 0.5) == ["2.0", "2.5", "3.0"]
    assert ticks.value_labels([-0.0, 0.2], 0.2) == ["0.0", "0.2"]  # no "-0.0"
    for values, spacing in (([1.0, 1.0001, 1.0002], 1e-4), ([123450, 123460], 10), ([1e-12, 2e-12], 1e-12)):
        labels = ticks.value_labels(values, spacing)
        assert len(set(labels)) == len(values), labels


def test_flat_series_get_a_range_of_sensible_size():
    assert ticks.padded_range(0.0, 0.0, ticks.VALUE) == (-0.1, 1.0)  # not +-1e-9; the line clear of the axis
    assert ticks.padded_range(0.0, 0.0, ticks.VALUE, at_zero=False) == (-1.0, 1.0)
    low, high = ticks.padded_range(1e-9, 1e-9, ticks.VALUE)
    assert low == pytest.approx(0.95e-9) and high == pytest.approx(1.05e-9)
    assert ticks.padded_range(0.0, 10.0, ticks.VALUE) == (0.0, 10.5)  # no negative axis for >= 0 data
    assert ticks.padded_range(-1.0, 1.0, ticks.VALUE) == (-1.1, 1.1)


def test_log_axis_labels_name_the_decades():
    assert ticks.log_labels([-3, -2, -1, 0, 1, 2, 6], label_minor=False) == [
        "0.001", "0.01", "0.1", "1", "10", "100", "1e6"]
    assert ticks.log_labels([math.log10(2), math.log10(5)], label_minor=False) == ["", ""]
    assert ticks.log_labels([math.log10(0.5), 0], label_minor=True) == ["0.5", "1"]


# ---- the monitor's layout ------------------------------------------------------------------

def test_the_panel_share_is_clamped_so_charts_stay_readable():
    assert layout.clamp_share(0.97) == layout.MAX_PANEL_SHARE  # a saved layout that squashed the charts
    assert layout.clamp_share(0.0) == layout.MIN_PANEL_SHARE
    assert layout.clamp_share(None) == layout.DEFAULT_PANEL_SHARE
    assert layout.clamp_share(float("nan")) == layout.DEFAULT_PANEL_SHARE
    assert layout.share_of(600, 400) == pytest.approx(0.4)
    # 1280x720: the monitor's splitter is about 600 px; the charts never get less than their minimum.
    parts = layout.split(600, 0.55)
    assert parts.charts >= layout.MIN_CHARTS_PX and parts.charts + parts.panel == 600
    assert layout.split(1000, 0.3) == layout.Split(700, 300)
    assert layout.split(600, 0.3, layout.COLLAPSED, collapsed_panel_px=30) == layout.Split(570, 30)
    assert layout.split(600, 0.3, layout.MAXIMISED) == layout.Split(0, 600)


def test_charts_go_three_across_on_a_wide_window_and_one_on_a_narrow_one():
    assert chart_columns(1580) == 3 and chart_columns(1260) == 3
    assert chart_columns(900) == 2
    assert chart_columns(500) == 1


# ---- notices and the window title ------------------------------------------------------------

def test_a_run_that_ends_while_watched_live_is_notified_once():
    failed = run_end_notice("running", "failed", 12, "example", "rank 1 on node-a failed first (exit code 1)")
    assert failed.title == "Run 12 (example) failed" and failed.urgent
    assert failed.body == "rank 1 on node-a failed first (exit code 1)"
    done = run_end_notice("running", "succeeded", 12, None)
    assert done.title == "Run 12 finished" and not done.urgent
    assert run_end_notice("stopping", "stopped", 3, None).title == "Run 3 was stopped"
    assert run_end_notice("running", "running", 12, None) is None
    assert run_end_notice("starting", "running", 12, None) is None
    assert run_end_notice(None, "failed", 12, None) is None  # opened from the store: nothing happened now
    assert run_end_notice("failed", "failed", 12, None) is None
    # A Slurm run cancelled (or refused) while queued ended too.
    assert run_end_notice("pending", "stopped", 5, None).title == "Run 5 was stopped"
    assert run_end_notice("pending", "running", 5, None) is None


def test_every_run_status_has_its_colour():
    # The status badge, the run's tab and the runs list colour a run by its status; a Slurm
    # run waiting in the queue is "pending", coloured as waiting (not as running).
    assert set(STATUS_COLORS) == {status.value for status in RunStatus} | {RunReading.HUNG}  # running, a rank stalled
    assert STATUS_COLORS[RunReading.HUNG] != STATUS_COLORS[RunStatus.RUNNING.value]  # not the green of a healthy run
    assert STATUS_COLORS[RunStatus.PENDING.value] == STATUS_COLORS[RunStatus.STARTING.value]
    assert STATUS_COLORS[RunStatus.PENDING.value] != STATUS_COLORS[RunStatus.RUNNING.value]


def test_the_title_carries_an_unseen_outcome_then_the_profile():
    assert window_title("example", 12, "failed", unseen_end=True) == "✗ Run 12 failed — example[*] — Rankwatch"
    assert window_title("example", 12, "failed", unseen_end=False) == "example[*] — Rankwatch"
    assert window_title(None, 4, "succeeded", unseen_end=True) == "✓ Run 4 finished — Rankwatch"
    assert window_title(None, None, None, unseen_end=False) == "Rankwatch"


# ---- how a rank ended: one wording ----------------------------------------------------------

def test_how_a_rank_ended_is_one_wording():
    assert ended_by(0) == "exit code 0"
    assert ended_by(1) == "exit code 1"
    assert ended_by(-15) == "SIGTERM"
    assert ended_by(-9, "SIGKILL") == "SIGKILL"
    assert ended_by(None) == "–"
    assert ended_by(-99) == "signal 99"


def test_the_triage_verdict_wins_over_the_rank_row_in_every_panel():
    summary = {"first_failure": {"rank": 1, "exit_code": 1, "signal": None},
               "other_failures": [{"rank": 0, "exit_code": -15, "signal": "SIGTERM"}]}
    assert rank_exits(summary) == {1: (1, None, None), 0: (-15, "SIGTERM", None)}
    # The store's row for rank 0 says 1 (its own exit message); the triage says SIGTERM.
    assert rank_ended_by(RankInfo(rank=0, exit_code=1, state="stopped"), summary, finished=True) == "SIGTERM"
    # Triage found it was stopped because rank 1 failed: the rank table says so, as the terminal does.
    summary["other_failures"][0]["after"] = 1
    assert rank_ended_by(RankInfo(rank=0, exit_code=-15, state="stopped"), summary, finished=True) == (
        "SIGTERM, stopped after rank 1 failed")
    assert rank_ended_by(RankInfo(rank=1, exit_code=1), summary, finished=True) == "exit code 1"
    assert rank_ended_by(RankInfo(rank=2, exit_code=0), summary, finished=True) == "exit code 0"
    assert rank_ended_by(RankInfo(rank=3), None, finished=True) == "–"
    assert rank_ended_by(RankInfo(rank=3), None, finished=False) == ""  # still running: nothing to say


# ---- progress ---------------------------------------------------------------------------------

def finished_run(steps: int, epochs: int, status: str = "succeeded") -> MonitorModel:
    model = MonitorModel()
    model.apply(SnapshotMessage(RunInfo(id=1, status="running", started=T0),
                                spec={"args": ["--epochs", str(epochs)]}).to_wire())
    model.apply(update(logs=[LogLine(None, T0, "stdout", f"{steps // epochs} steps per epoch, batch size 32", None)],
                       metrics=[MetricRecord(0, T0 + step, step, "loss", 1.0, "auto") for step in range(steps)],
                       ranks=[rank_changes(0, step=steps - 1)]).to_wire())
    model.apply(update(run=run_changes(status=status, ended=T0 + steps)).to_wire())
    return model


def test_a_finished_run_reads_every_step_and_epoch_done():
    progress = finished_run(640, 10).progress()
    assert (progress.step, progress.steps_done, progress.total_steps) == (639, 640, 640)
    assert (progress.epoch, progress.total_epochs) == (10, 10)
    assert progress.fraction == 1.0
    position, timing = RunWording.progress(progress, "succeeded")
    assert position == "epoch 10/10 · 640/640 steps"
    assert timing == "elapsed 10:40" and "ETA" not in timing


def test_a_run_stopped_early_shows_where_it_stopped():
    progress = finished_run(64, 1).progress()
    assert RunWording.progress(progress, "stopped")[0] == "epoch 1/1 · 64/64 steps"
    stopped = finished_run(640, 10, "stopped")
    stopped.apply(update(ranks=[rank_changes(0, step=639)]).to_wire())
    assert stopped.progress().fraction == 1.0


def test_a_run_without_steps_says_none_yet_only_while_it_can_still_have_some():
    empty = MonitorModel().progress()
    assert RunWording.progress(empty, "running")[0] == "no steps yet"
    assert RunWording.progress(empty, "succeeded")[0] == "no steps"  # ended: none will come


# ---- charts: which ones, and what an empty one says ---------------------------------------------

def model_with(metrics: list[MetricRecord], spec: dict | None = None, status: str = "running") -> MonitorModel:
    model = MonitorModel()
    model.apply(SnapshotMessage(RunInfo(id=1, status=status, started=T0, world_size=2), spec=spec or {}).to_wire())
    if metrics:
        model.apply(update(metrics=metrics).to_wire())
    return model


def test_every_logged_key_gets_a_chart_in_the_order_it_appeared():
    model = model_with([MetricRecord(0, T0, 0, "loss", 1.0, "auto"), MetricRecord(0, T0, 0, "step_time", 0.1, "auto"),
                        MetricRecord(0, T0, 0, "data_wait", 0.01, "auto"),
                        MetricRecord(0, T0, 0, "steps_per_s", 10.0, "auto"),
                        MetricRecord(0, T0, 0, "lr", 0.1, "log"), MetricRecord(1, T0, 0, "grad_norm", 2.0, "log"),
                        MetricRecord(0, T0, 1, "val_loss", 1.2, "parsed")])
    assert logged_metric_names(model) == ["lr", "grad_norm", "val_loss"]
    chart = logged_chart("lr")
    assert chart.title == "lr" and chart.logged and chart.smoothable and not chart.time_only


def test_the_phases_their_clock_and_skipped_steps_get_no_chart_of_their_own():
    """They are drawn as the rank table's bars and said beside the step count, not as charts
    named like keys a script logged."""
    row = [T0, 3, 0.5, 0.1, 0.01, 32, None, True, ["cpu", 0.01, 0.002, 0.03, 0.04, 0.01, 0.005, 0.003]]
    model = model_with([MetricRecord(*record) for record in protocol.step_row_records(0, row)]
                       + [MetricRecord(0, T0, 3, "lr", 0.1, "log")])
    assert {*protocol.PHASE_METRICS, protocol.PHASE_CLOCK, protocol.SKIPPED_STEP} <= set(model.series_names())
    assert logged_metric_names(model) == ["lr"]


def test_the_allocators_memory_is_one_gpu_chart_in_gib_not_three_charts_of_logged_bytes():
    model = model_with([MetricRecord(0, T0, 3, name, 2 * 1024**3, "auto") for name in protocol.GPU_MEMORY_METRICS]
                       + [MetricRecord(0, T0, 3, "lr", 0.1, "log")])
    assert logged_metric_names(model) == ["lr"]
    chart = CHART[protocol.GPU_MEMORY_ALLOCATED]
    assert chart.group == "gpu" and chart.scale * 2 * 1024**3 == 2.0 and not chart.logged


def test_empty_charts_say_why():
    stepping = [MetricRecord(0, T0 + s, s, name, 0.1, "auto") for s in range(3) for name in ("loss", "step_time")]
    model = model_with(stepping)
    assert empty_chart_note(CHART["data_wait_share"], model, False) == "Not measured: no PyTorch DataLoader was seen"
    assert "batch size is unknown" in empty_chart_note(CHART["samples_per_s"], model, False)
    assert empty_chart_note(CHART["process/cpu_percent"], model, False) == "Waiting for the first sample…"
    assert empty_chart_note(CHART["loss"], model, True) is None
    assert empty_chart_note(CHART["loss"], model_with([]), False) == "Waiting for the first step…"
    assert empty_chart_note(CHART["loss"], model_with([], status="succeeded"), False) == (
        "Not measured: no optimizer step was seen")
    uninstrumented = model_with([], spec={"telemetry": {"instrument": False}})
    assert "instrumentation is off" in empty_chart_note(CHART["loss"], uninstrumented, False)
    nan_loss = model_with([MetricRecord(0, T0, 0, "loss", None, "auto")])
    assert "NaN" in empty_chart_note(CHART["loss"], nan_loss, False)
    assert empty_chart_note(CHART["loss"], MonitorModel(), False) == "No run yet"


# ---- the hover readout ------------------------------------------------------------------------

def test_the_readout_lists_the_ranks_nearest_the_cursor_highest_first():
    rows = [ReadoutRow(rank, f"rank {rank}", 10.0, float(rank)) for rank in range(64)]
    kept, left_out = pick_rows(rows, cursor_value=40.2, limit=5)
    assert [row.key for row in kept] == [42, 41, 40, 39, 38] and left_out == 59
    kept, left_out = pick_rows(rows[:4], cursor_value=None)
    assert [row.key for row in kept] == [3, 2, 1, 0] and left_out == 0
    assert [format_value(v) for v in (0.123456, 1234.5, 1e-9, float("nan"), 12.3456)] == [
        "0.1235", "1,234", "1.000e-9", "–", "12.35"]


# ---- logs, history, form ---------------------------------------------------------------------------

def test_log_lines_carry_the_rank_once():
    line = LogEntry(1, T0, "stderr", "[rank1]: Traceback (most recent call last):", "localhost")
    assert format_log_entry(line) == "[localhost r1] Traceback (most recent call last):"
    other = LogEntry(1, T0, "stderr", "[rank0]: from another rank", None)
    assert format_log_entry(other) == "[r1] [rank0]: from another rank"  # not ours to drop
    assert format_log_entry(LogEntry(None, T0, "stderr", "[rank1]: x", None)) == "[launcher] [rank1]: x"


def test_the_history_names_the_script_that_ran():
    assert entry_of('script = "/home/me/job/train.py"\nargs = ["--epochs", "3", "a b"]\n') == (
        "train.py --epochs 3 'a b'")
    assert entry_of('module = "pkg.train"\nargs = ["-x"]\n') == "-m pkg.train -x"
    assert entry_of("not toml [") == "" and entry_of(None) == ""


def test_more_processes_than_cores_in_cpu_mode_is_warned_about(tmp_path):
    (tmp_path / "train.py").write_text("")
    machine = MachineFacts(cpu_count=2, gpus=unavailable_report("no driver"))
    launch = resolve(LaunchSpec(script="train.py", nproc_per_node=8, gpus="cpu"), machine, tmp_path)
    field, message = cores_warning(launch, 2)
    assert field == "nproc_per_node"
    assert message.startswith("8 processes on 2 CPU cores") and "use at most 2" in message
    fits = resolve(LaunchSpec(script="train.py", nproc_per_node=2, gpus="cpu"), machine, tmp_path)
    assert cores_warning(fits, 2) is None
    # The form shows it as a warning, not an error: it can still launch.
    model = LaunchFormModel(base_dir=tmp_path)
    model.set_gpu_report(unavailable_report("no driver"))
    model.update(entry="train.py", nproc_per_node=usable_cpus() + 1)
    assert model.evaluation.warnings_for("nproc_per_node") and model.evaluation.can_launch


def test_an_edited_profile_is_recorded_as_edited(tmp_path):
    (tmp_path / "train.py").write_text("")
    model = LaunchFormModel(base_dir=tmp_path)
    model.load(LaunchSpec(script="train.py", gpus="cpu"), profile_name="mine", base_dir=tmp_path)
    assert model.run_profile_label == "mine"
    model.update(args_text="--lr 0.5")
    assert model.run_profile_label == "mine (edited)"
    model.load(LaunchSpec(script="train.py"), profile_name=None, base_dir=tmp_path)
    assert model.run_profile_label is None


def test_the_readout_finds_the_point_nearest_the_cursor():
    from gui.models.series import STEP, Series

    series = Series()
    series.append([0, 10, 20, 30], [0.0, 1.0, 2.0, 3.0], [1.0, 2.0, 3.0, 4.0])
    assert [series.nearest_index(STEP, x) for x in (-5, 4, 6, 14.9, 15.1, 99)] == [0, 0, 1, 1, 2, 3]
    restarted = Series()  # a restarted job counts steps from 0 again: found by a scan
    restarted.append([0, 10, 20, 0, 10], [0.0, 1.0, 2.0, 3.0, 4.0], [1.0, 2.0, 3.0, 4.0, 5.0])
    assert restarted.nearest_index(STEP, 19.0) == 2
    assert Series().nearest_index(STEP, 1.0) is None


def test_a_compute_straggler_is_worded_with_compute_times_not_the_equal_step_times():
    from gui.models.diagnosis import straggler_text

    event = {"rank": 5, "cause": "compute", "step": 5, "step_time": 0.695, "others_step_time": 0.695,
             "data_wait": 0.0, "compute_time": 0.600, "others_compute_time": 0.480}
    text = straggler_text(event)
    assert text.startswith("rank 5 is a straggler at step 5")
    assert "600 ms of its 695 ms step vs 480 ms on the other ranks" in text
    assert "695 ms per step against 695 ms" not in text  # the DDP-evened step times prove nothing
    del event["compute_time"]  # not measured (no process group): the step times are the evidence
    assert "695 ms per step against 695 ms on the other ranks" in straggler_text(event)


def test_a_stragglers_own_message_is_its_wording_with_the_step_and_its_phase_in_the_note():
    from gui.models.diagnosis import straggler_note, straggler_text

    message = ("rank 1 is a straggler: it computes longer (97 ms of its 111 ms step vs 67 ms on the other ranks, "
               "which wait for it in collectives, most in forward: 49 ms)")
    event = {"rank": 1, "message": message, "cause": "compute", "phase": "forward", "step": 10, "step_time": 0.111,
             "compute_time": 0.097, "others_compute_time": 0.067}
    assert straggler_text(event) == message.replace("is a straggler:", "is a straggler at step 10:")
    assert straggler_text(event, past=True).startswith("rank 1 was a straggler at step 10: it computes longer")
    assert straggler_note(event) == "straggler: computing (forward)"
    assert straggler_note({**event, "cause": "data", "phase": "data"}) == "straggler: waiting for data"
    assert straggler_text({**event, "message": "something else"}) == "something else"  # said as the runner says it



def test_the_allocator_chart_of_cpu_ranks_says_it_is_not_measured_not_waiting():
    """A CPU run on a machine with GPUs: NVML's GPU charts fill, and the allocator's chart said
    "Waiting for the first step…" 312 steps in (seen on the 1,024-rank screenshot)."""
    stepping = [MetricRecord(0, T0 + s, s, name, 0.1, "auto") for s in range(3) for name in ("loss", "step_time")]
    model = model_with(stepping)
    model.apply(update(ranks=[{"rank": 0, "state": "running", "gpu_index": None},
                              {"rank": 1, "state": "running", "gpu_index": None}]).to_wire())
    assert empty_chart_note(CHART[protocol.GPU_MEMORY_ALLOCATED], model, False) == (
        "Not measured: the ranks run on the CPU (torch's CUDA allocator has nothing to report)")
    model.apply(update(ranks=[{"rank": 1, "state": "running", "gpu_index": 1}]).to_wire())
    assert empty_chart_note(CHART[protocol.GPU_MEMORY_ALLOCATED], model, False) == "Waiting for the first step…"
