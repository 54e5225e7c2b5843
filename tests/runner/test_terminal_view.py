"""The terminal view: a quiet stop, the progress header, numbers with their digits, every logged key."""

from __future__ import annotations

import io
import time

import pytest
from rich.console import Console

from runner.runstate.messages import (
    Bye,
    Event,
    LogLine,
    MetricRecord,
    ProcessSample,
    RankInfo,
    RunInfo,
    SnapshotMessage,
)
from runner.view.terminal import TerminalView
from tests.hub_messages import rank_changes, run_changes, update


def snapshot(*ranks: RankInfo, args: tuple[str, ...] = (), **run) -> dict:
    """Run 7 of profile p, running, and its ranks (by default ranks 0 and 1 at step 10, loss 0.5)."""
    ranks = ranks or tuple(RankInfo(rank=r, state="running", step=10, loss=0.5) for r in (0, 1))
    return SnapshotMessage(RunInfo(**{"id": 7, "profile": "p", "status": "running", "started": 1000.0, **run}),
                           ranks, spec={"args": list(args)}).to_wire()


def plain_view(**kwargs) -> tuple[TerminalView, io.StringIO, io.StringIO]:
    out, err = io.StringIO(), io.StringIO()
    return TerminalView(live=False, out=out, err=err, status_every=0, **kwargs), out, err


def rendered(view: TerminalView, width: int = 120) -> str:
    console = Console(file=io.StringIO(), width=width)
    view._console = console  # measure and print at this width
    console.print(view._table(width))
    return console.file.getvalue()


TORCHRUN_ON_SIGTERM = [
    LogLine(None, 1.0, "stderr", "W1122 api.py:753] Received 15 death signal, shutting down workers", "h"),
    LogLine(None, 1.0, "stderr", "W1122 api.py:1028] Sending process 16132 closing signal SIGTERM", "h"),
    LogLine(None, 1.0, "stderr",
            "torch.distributed.elastic.multiprocessing.api.SignalException: Process 1 got signal: 15", "h"),
]


def test_a_stop_prints_stopping_and_stopped_and_keeps_torchruns_lines_off_the_terminal():
    view, out, err = plain_view(interrupt_kills=True)
    view.handle(snapshot())
    view.handle(update(logs=[LogLine(None, 0.5, "stderr", "W torchrun start-up warning", "h")]).to_wire())
    # the stop event and torchrun's reaction may arrive in one update: the stop is known first
    view.handle(update(events=[
        Event(1.0, "stopping", None, "stopping the job (Ctrl-C)", {"stopped_by": "Ctrl-C"}),
        Event(1.0, "connection_lost", 1, "rank 1 disconnected without an exit message")],
        logs=[*TORCHRUN_ON_SIGTERM, LogLine(0, 1.0, "stdout", "rank 0 saving a checkpoint", "h")],
        run=run_changes(id=7, status="stopping", started=1000.0)).to_wire())
    view.handle(update(events=[
        Event(1.1, "connection_lost", 0, "rank 0 disconnected without an exit message")]).to_wire())
    view.handle(Bye("stopped").to_wire())
    lines = err.getvalue().splitlines()
    assert lines[0] == "[torchrun] W torchrun start-up warning"  # before the stop: shown as always
    assert lines[1] == "[rankwatch] stopping… (Ctrl-C; Ctrl-C again kills at once)"
    assert lines[2].startswith("[rankwatch] stopped (") and "torchrun's 3 line(s) about it: " \
        "rankwatch runs logs 7 --launcher)" in lines[2]
    assert len(lines) == 3  # no SIGTERM notice, no SignalException, no "disconnected"
    assert out.getvalue() == "[rank 0] rank 0 saving a checkpoint\n"  # the ranks' own lines still show


def test_a_stop_asked_elsewhere_says_who_and_that_ctrl_c_kills():
    view, _out, err = plain_view(interrupt_kills=True)
    view.handle(snapshot(status="stopping"))  # attached while it was already stopping
    view.handle(update(logs=TORCHRUN_ON_SIGTERM[:1], events=[
        Event(1.0, "stopping", None, "", {"stopped_by": "the GUI's Stop or `rankwatch stop`"})]).to_wire())
    assert err.getvalue() == "[rankwatch] stopping… (the GUI's Stop or `rankwatch stop`; Ctrl-C kills at once)\n"


def test_failures_still_show_torchruns_lines():
    view, _out, err = plain_view()
    view.handle(snapshot())
    view.handle(update(logs=TORCHRUN_ON_SIGTERM[:1],
                       events=[Event(1.0, "connection_lost", None, "rank 1 disconnected without an exit message")]
                       ).to_wire())
    assert err.getvalue().splitlines() == ["[torchrun] " + TORCHRUN_ON_SIGTERM[0][3],
                                           "[rankwatch] rank 1 disconnected without an exit message"]


def test_the_header_shows_elapsed_epoch_step_and_eta_as_the_gui_does():
    view, _out, _err = plain_view()
    view.handle(snapshot(args=("--epochs", "2", "--lr", "0.1")))
    view.handle(update(logs=[LogLine(0, 1000.0, "stdout", "10 steps per epoch", "h")]).to_wire())
    view.handle(update(metrics=[MetricRecord(0, 1000.0 + 2 * step, step, "loss", 1.0, "auto") for step in range(11)],
                       ranks=[rank_changes(0, state="running", step=10)]).to_wire())
    assert view.header(now=1020.0) == "run 7 · p · running · epoch 2/2 · 11/20 steps (55%) · elapsed 0:20 · ETA 0:18"
    assert "run 7 · p · running · epoch 2/2 · 11/20 steps (55%)" in rendered(view)


def test_the_header_of_a_finished_run_has_no_eta():
    view, _out, _err = plain_view()
    view.handle(snapshot(args=("--max-steps", "20"), status="succeeded", ended=1030.0))
    assert view.header(now=5000.0) == "run 7 · p · succeeded · 11/20 steps (55%) · elapsed 0:30"


def test_small_values_keep_their_digits_and_missing_ones_read_as_a_dash():
    view, _out, _err = plain_view()
    view.handle(snapshot(
        RankInfo(rank=0, state="running", step=3, loss=1e-9, step_time=0.00004, data_wait_share=0.001,
                 samples_per_s=0.25),
        RankInfo(rank=1, state="running")))
    table = rendered(view)
    row0 = next(line for line in table.splitlines() if line.strip().startswith("0 "))
    row1 = next(line for line in table.splitlines() if line.strip().startswith("1 "))
    assert "1.000e-09" in row0 and "0.04" in row0 and "<1%" in row0 and "0.25" in row0
    assert "0.0000" not in table
    assert row1.split()[2:] == ["–"] * 5  # step, loss, ms/step, data wait, samples/s (CPU %: none measured)


def test_the_share_in_collectives_gets_a_column_once_a_rank_measured_it():
    view, _out, _err = plain_view()
    view.handle(snapshot())
    assert "comm wait" not in rendered(view)  # no process group: no column
    view.handle(snapshot(RankInfo(rank=0, state="running", step=3, step_time=0.1, comm_wait_share=0.62),
                         RankInfo(rank=1, state="running", step=3, step_time=0.1, comm_wait_share=0.04)))
    table = rendered(view)
    header = next(line for line in table.splitlines() if "rank" in line and "state" in line)
    row0 = next(line for line in table.splitlines() if line.strip().startswith("0 "))
    row1 = next(line for line in table.splitlines() if line.strip().startswith("1 "))
    assert header.split()[-2:] == ["comm", "wait"]  # data wait: measured by no rank, no column
    assert "62%" in row0 and "4%" in row1


LOGGED = update(metrics=[
    MetricRecord(0, 5.0, 5, "lr", 3e-4, "log"), MetricRecord(1, 5.0, 5, "lr", 3e-4, "log"),
    MetricRecord(0, 4.0, 4, "grad_norm", 7.0, "log"), MetricRecord(0, 5.0, 5, "grad_norm", 1.25, "log"),
    MetricRecord(1, 5.0, 5, "grad_norm", 0.5, "log"), MetricRecord(0, 5.0, 5, "val_loss", 2e-9, "parsed"),
    MetricRecord(0, 5.0, 5, "epoch", 3, "log"), MetricRecord(1, 5.0, 5, "loss", 0.75, "auto")])
LATE = update(metrics=[MetricRecord(0, 3.0, 3, "grad_norm", 9.0, "log")])  # older, in a later batch: does not win


def test_every_logged_key_gets_a_column_when_they_fit():
    view, _out, _err = plain_view()
    view.handle(snapshot())
    view.handle(LOGGED.to_wire())
    view.handle(LATE.to_wire())
    table = rendered(view, width=160)
    header = next(line for line in table.splitlines() if "rank" in line and "state" in line)
    assert header.split()[-3:] == ["lr", "grad_norm", "val_loss"]  # epoch goes to the header line
    row0 = next(line for line in table.splitlines() if line.strip().startswith("0 "))
    assert row0.split()[-3:] == ["3.000e-04", "1.2500", "2.000e-09"]
    assert "epoch 3" in table.splitlines()[0]


def test_logged_keys_that_do_not_fit_a_narrow_terminal_are_named_under_the_table():
    view, _out, _err = plain_view()
    view.handle(snapshot())
    view.handle(LOGGED.to_wire())
    view.handle(LATE.to_wire())
    narrow = rendered(view, width=40)
    header = next(line for line in narrow.splitlines() if "rank" in line and "state" in line)
    assert header.split() == ["rank", "state", "step", "loss", "lr"]
    assert "too narrow for: grad_norm, val_loss" in narrow
    assert all(len(line.rstrip()) <= 40 for line in narrow.splitlines()[1:])  # the header line may fold


def test_plain_status_lines_carry_the_header_and_the_logged_keys():
    view, out, _err = plain_view()
    view.handle(snapshot())
    view.handle(LOGGED.to_wire())
    view.handle(LATE.to_wire())
    view.print_status()
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("[rankwatch] run 7 · p · running · epoch 3 · 11 steps")
    assert lines[1].startswith("[rankwatch] rank 0 running: step 11, loss 0.5000, ")
    assert lines[1].endswith(", lr 3.000e-04, grad_norm 1.2500, val_loss 2.000e-09")
    assert lines[2].endswith(", lr 3.000e-04, grad_norm 0.5000, val_loss –")


def test_a_rank_working_without_steps_is_named_under_the_table_and_in_its_status_line():
    view, out, _err = plain_view()
    since = time.time() - 42
    view.handle(snapshot(RankInfo(rank=0, state="running", step=310, working_since=since),
                         RankInfo(rank=1, state="running", step=310)))
    view.print_status()
    lines = out.getvalue().splitlines()
    assert lines[1].startswith("[rankwatch] rank 0 running, working without steps for 42 s (since step 311): step 311, ")
    assert lines[2].startswith("[rankwatch] rank 1 running: step 311, ")  # its 311th step: index 310
    table = rendered(view)
    assert "rank 0 working without steps for 42 s (since step 311)" in table and "rank 1 working" not in table


@pytest.mark.parametrize(("value", "text"), [
    (1e-9, "1.000e-09"), (0.5, "0.5000"), (0.0, "0.0000"), (0.0012345, "1.234e-03"), (0.05, "0.0500"), (123456.0, "1.235e+05"), (-2e-5, "-2.000e-05"),
    (None, "–"), (float("nan"), "nan"), (float("inf"), "inf"), (3, "3.0000"),
])
def test_format_number(value, text):
    from runner.format import format_number

    assert format_number(value) == text


@pytest.mark.parametrize(("value", "text"), [
    (1234.5, "1234"), (12.34, "12.3"), (1.234, "1.23"), (0.01234, "0.0123"), (0.00004, "4.0e-05"), (0, "0"),
    (None, "–"),
])
def test_format_amount(value, text):
    from runner.format import format_amount

    assert format_amount(value) == text


def test_once_a_rank_has_ended_the_table_shows_exit_codes_with_the_signal_name():
    view, _out, _err = plain_view()
    view.handle(snapshot(RankInfo(rank=0, state="failed", exit_code=-15),
                         RankInfo(rank=1, state="failed", exit_code=1), status="failed"))
    table = rendered(view)
    assert "exit" in table
    assert next(line for line in table.splitlines() if line.strip().startswith("0 ")).rstrip().endswith("SIGTERM (-15)")
    assert next(line for line in table.splitlines() if line.strip().startswith("1 ")).rstrip().endswith(" 1")


class FakeTerminal(io.StringIO):
    """A StringIO that says it is a terminal, so rich's Live refreshes from its own thread."""

    def isatty(self) -> bool:
        return True


def test_the_live_table_refreshes_on_its_thread_while_lines_print_without_deadlock(monkeypatch):
    import threading
    import time

    monkeypatch.setenv("TERM", "xterm-256color")
    monkeypatch.setenv("COLUMNS", "160")
    screen = FakeTerminal()
    view = TerminalView(out=screen, err=screen)
    assert view.live_mode
    view.start()

    def feed():
        view.handle(snapshot())
        deadline = time.monotonic() + 1.5  # several of the Live's refreshes (4 a second)
        step = 0
        while time.monotonic() < deadline:
            step += 1
            view.handle(update(logs=[LogLine(0, 1.0, "stdout", f"line {step}", "h")],
                               metrics=[MetricRecord(0, 1000.0 + step, step, "lr", 1e-3, "log")],
                               ranks=[rank_changes(0, state="running", step=step, last_seen=None)]).to_wire())
        view.stop()

    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    feeder.join(timeout=20)
    assert not feeder.is_alive(), "printing lines and refreshing the table deadlocked"
    text = screen.getvalue()
    assert "line 1" in text and "run 7 · p · running" in text and "1.000e-03" in text  # the lr column


def test_a_stopped_ranks_cpu_and_memory_are_its_last_known_figures_not_zeros():
    """After Ctrl-C or `stop` the table showed `CPU % 0` and `RSS 0 B`: the sample taken
    after the process was gone (nothing read) counted as a measurement. An older runner still sends
    it (and the rank row it set); the view keeps the last sample that measured the process."""
    view, _out, _err = plain_view()
    view.handle(snapshot())
    view.handle(update(
        procs=[ProcessSample(1001.0, 0, 42, 97.0, 300 << 20, 9), ProcessSample(1001.0, 1, 43, 95.0, 310 << 20, 9)],
        ranks=[rank_changes(0, state="running", step=10, cpu_percent=97.0, rss_bytes=300 << 20)]).to_wire())
    view.handle(update(procs=[ProcessSample(1002.0, 0, 42, 0.0, 0, 0)],
                       ranks=[rank_changes(0, state="stopped", step=10, cpu_percent=0.0, rss_bytes=0)]).to_wire())
    table = rendered(view)
    row = next(line for line in table.splitlines() if line.strip().startswith("0 "))
    assert "300 MiB" in row and " 97 " in row
    assert "0 B" not in table


def test_a_run_with_a_stalled_rank_is_hung_in_the_header():
    """A hang is one condition of the run, named alike in the terminal, the GUI and History."""
    view, _out, _err = plain_view()
    view.handle(snapshot())
    assert " · running · " in view.header(now=1010.0)
    view.handle(update(ranks=[rank_changes(1, state="stalled", step=10)]).to_wire())
    assert " · hung · " in view.header(now=1010.0)
    view.handle(update(ranks=[rank_changes(1, state="running", step=11)]).to_wire())
    assert " · running · " in view.header(now=1010.0)


def test_lines_printed_above_the_live_table_draw_it_once_per_update_not_once_per_line(monkeypatch):
    """Each print above a Live table draws the table again (~30 ms at 256 ranks). Printed one by
    one, 256 ranks' lines made an attached terminal fall so far behind that the hub dropped it."""
    monkeypatch.setenv("TERM", "xterm-256color")
    monkeypatch.setenv("COLUMNS", "160")
    screen = FakeTerminal()
    view = TerminalView(out=screen, err=screen)
    view.start()
    try:
        view.handle(snapshot())
        view._live.refresh()  # the table as the Live keeps it, drawn again under each print
        before = screen.getvalue().count("run 7 · p")  # its header line, once per drawing
        view.handle(update(logs=[LogLine(rank % 2, 1.0, "stdout", f"line {rank}", "h") for rank in range(200)],
                           ranks=[rank_changes(0, state="running", step=11, last_seen=None)]).to_wire())
        drawn = screen.getvalue().count("run 7 · p") - before
        assert drawn <= 3, f"the table was drawn {drawn} times for one update's 200 lines"
    finally:
        view.stop()
    text = screen.getvalue()
    assert all(f"line {rank}" in text for rank in range(200))
    assert text.index("line 0") < text.index("line 1") < text.index("line 199")


def test_plain_status_lines_of_many_ranks_are_those_that_stand_out_and_a_count():
    view, out, _err = plain_view()
    ranks = [RankInfo(rank=r, state="running", step=100 if r != 9 else 40, loss=0.5,
                      step_time=0.1 if r != 33 else 0.5) for r in range(64)]
    view.handle(snapshot(*ranks))
    view.print_status()
    lines = out.getvalue().splitlines()
    shown = [int(line.split()[2].rstrip(":")) for line in lines[1:-2]]
    assert len(shown) == 16 and {9, 33} <= set(shown)  # behind, slower; then others in rank order
    assert lines[-2] == "[rankwatch] 64 ranks: 64 running · step time median 100 ms, p90 100 ms"
    assert lines[-1].startswith("[rankwatch] ranks 9, 33 stand out") and lines[-1].endswith("; 48 more not shown")
