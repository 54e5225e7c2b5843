"""The live table's columns at any width: chosen by priority, never cut, none that is all "–"."""

from __future__ import annotations

import re

import pytest

from runner.format import MISSING
from runner.runstate.messages import LogLine, MetricRecord, RankInfo, RunInfo, SnapshotMessage
from runner.view.columns import COLUMN_GAP, Column, choose_columns, format_rate, text_width
from runner.view.terminal import RANK_COLUMNS
from tests.hub_messages import update

RANKS = 8
ROW = {"rank": "7", "host": MISSING, "state": "running", "step": "1234", "loss": "3.509e-03", "exit": MISSING,
       "step_time": "12.3", "samples_per_s": "12.3k", "cpu_percent": "99", "rss": "1.2 GiB", "gpu_util": MISSING,
       "gpu_mem": MISSING, "gpu": MISSING, "data_wait": "3%", "comm_wait": "41%", "phases": "[dhFFFFBBBBcO]",
       "seen": "0 s"}
"""A CPU run of eight ranks as the example shows it: no host (one node), no exit yet, no GPU."""
CELLS = {key: [value] * RANKS for key, value in ROW.items()}
ALL_DASHES = {"host", "exit", "gpu_util", "gpu_mem", "gpu"}


def shown_keys(width: int) -> list[str]:
    return [column.key for column in choose_columns(RANK_COLUMNS, CELLS, width).shown]


@pytest.mark.parametrize(("width", "keys"), [
    # RSS ("1.2 GiB") does not fit at 60; the narrower data wait after it in priority does
    (60, ["rank", "state", "step", "loss", "step_time", "samples_per_s", "data_wait", "cpu_percent"]),
    (80, ["rank", "state", "step", "loss", "step_time", "samples_per_s", "data_wait", "comm_wait", "cpu_percent",
          "rss", "seen"]),
    (120, ["rank", "state", "step", "loss", "step_time", "samples_per_s", "data_wait", "comm_wait", "phases",
           "cpu_percent", "rss", "seen"]),
    (200, ["rank", "state", "step", "loss", "step_time", "samples_per_s", "data_wait", "comm_wait", "phases",
           "cpu_percent", "rss", "seen"]),
])
def test_the_columns_that_fit_are_the_most_important_in_the_tables_order(width, keys):
    assert shown_keys(width) == keys


@pytest.mark.parametrize("width", [60, 80, 120, 200])
def test_no_column_is_cut_and_the_table_fits_the_width(width):
    chosen = choose_columns(RANK_COLUMNS, CELLS, width)
    assert chosen.width <= width
    for column in chosen.shown:
        assert chosen.widths[column.key] >= max(text_width(cell) for cell in CELLS[column.key])
        assert chosen.widths[column.key] >= text_width(chosen.headers[column.key])


@pytest.mark.parametrize("width", [60, 80, 120, 200])
def test_a_column_whose_every_value_is_a_dash_takes_no_room(width):
    chosen = choose_columns(RANK_COLUMNS, CELLS, width)
    assert not ALL_DASHES & {column.key for column in chosen.shown}
    assert {column.key for column in chosen.empty} == ALL_DASHES


def test_a_narrow_terminal_uses_short_headers_before_it_drops_a_column():
    # 80 columns: the waits fit with "data" and "comm"; 200: the room is used for the full words
    assert choose_columns(RANK_COLUMNS, CELLS, 80).headers["data_wait"] == "data"
    assert choose_columns(RANK_COLUMNS, CELLS, 200).headers["data_wait"] == "data wait"
    assert choose_columns(RANK_COLUMNS, CELLS, 200).headers["phases"] == "where the step goes"


def test_the_columns_left_out_for_width_are_reported_by_priority():
    chosen = choose_columns(RANK_COLUMNS, CELLS, 60)
    assert [column.key for column in chosen.too_narrow] == ["rss", "comm_wait", "seen", "phases"]


def test_rank_and_state_stay_even_when_they_alone_overflow():
    chosen = choose_columns(RANK_COLUMNS, CELLS, 5)
    assert [column.key for column in chosen.shown] == ["rank", "state"]


def test_width_is_the_cells_plus_one_gap_between_columns():
    columns = [Column("a", "a", 0), Column("b", "bbbb", 1)]
    chosen = choose_columns(columns, {"a": ["123"], "b": ["1"]}, 100)
    assert chosen.widths == {"a": 3, "b": 4} and chosen.width == 3 + COLUMN_GAP + 4


@pytest.mark.parametrize(("value", "text"), [
    (950.0, "950"), (999.6, "1.00k"), (12_345.0, "12.3k"), (123_456.0, "123k"), (1_234_567.0, "1.23M"),
    (2.5e9, "2.50G"), (12.34, "12.3"), (0.25, "0.25"), (None, MISSING), (float("nan"), MISSING),
])
def test_a_throughput_has_three_digits_and_an_si_suffix(value, text):
    assert format_rate(value) == text
    assert len(format_rate(value)) <= 5


def test_the_live_header_drops_the_profiles_name_before_it_takes_a_second_line():
    import io

    from runner.view.terminal import TerminalView

    view = TerminalView(live=False, out=io.StringIO(), err=io.StringIO(), status_every=0)
    view.handle(SnapshotMessage(RunInfo(id=1, profile="example", status="running", started=1000.0),
                                (RankInfo(rank=0, state="running", step=107),),
                                spec={"args": ["--epochs", "10"]}).to_wire())
    view.handle(update(logs=[LogLine(0, 1000.0, "stdout", "16 steps per epoch", "h")],
                       metrics=[MetricRecord(0, 1000.0 + 0.4 * step, step, "loss", 1.0, "auto")
                                for step in range(108)]).to_wire())
    assert view.header(now=1043.0) == ("run 1 · example · running · epoch 7/10 · 108/160 steps (68%) · "
                                       "elapsed 0:43 · ETA 0:21")
    assert view.header(now=1043.0, width=80) == ("run 1 · running · epoch 7/10 · 108/160 steps (68%) · "
                                                 "elapsed 0:43 · ETA 0:21")


def test_a_wide_terminal_gets_the_finer_phase_bar():
    import io

    from rich.console import Console

    from runner.view.terminal import TerminalView

    view = TerminalView(live=False, out=io.StringIO(), err=io.StringIO(), status_every=0)
    shares = {"data": 0.0, "h2d": 0.0, "forward": 0.25, "backward": 0.5, "comm": 0.125, "optimizer": 0.125,
              "rest": 0.0}
    view.handle(SnapshotMessage(RunInfo(id=1, profile="p", status="running", started=1000.0),
                                tuple(RankInfo(rank=r, state="running", step=5, loss=0.5, phase_shares=shares)
                                      for r in range(2)), spec={"args": []}).to_wire())

    def bar(width: int) -> str:
        console = Console(file=io.StringIO(), width=width)
        console.print(view._table(width))
        return next(word for word in console.file.getvalue().split() if word.startswith("[F"))

    assert bar(200) == "[" + "F" * 6 + "B" * 12 + "ccc" + "OOO" + "]"
    assert len(bar(45)) == 2 + 12  # no room to spare: the 12-letter bar


def test_a_bar_that_begins_with_data_wait_is_drawn_not_read_as_markup():
    """Seen at 1,024 fake ranks: "[ddhFFFFFFBBBBBBBBBBccOO·]" looks like a Rich style tag, and the
    live table printed the column empty while every rank row carried its shares."""
    import io

    from rich.console import Console

    from runner.view.terminal import TerminalView

    view = TerminalView(live=False, out=io.StringIO(), err=io.StringIO(), status_every=0)
    shares = {"data": 0.08, "h2d": 0.03, "forward": 0.28, "backward": 0.41, "comm": 0.09, "optimizer": 0.07,
              "rest": 0.04}
    view.handle(SnapshotMessage(RunInfo(id=1, profile="p", status="running", started=1000.0),
                                (RankInfo(rank=0, state="running", step=5, loss=0.5, phase_shares=shares),),
                                spec={"args": []}).to_wire())
    console = Console(file=io.StringIO(), width=160)
    console.print(view._table(160))
    assert re.search(r"\[ddhF+B+c+O+·+\]", console.file.getvalue()), console.file.getvalue()
