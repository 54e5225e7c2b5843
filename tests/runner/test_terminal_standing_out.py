"""The terminal's rank table at 1,024 ranks: within the screen, the ranks that stand out, and
one line that counts them all."""

from __future__ import annotations

import io

from rich.console import Console

from runner.runstate.messages import RankInfo, RunInfo, SnapshotMessage
from runner.view.terminal import TerminalView

RANKS = 1024


def rank_row(rank: int) -> RankInfo:
    state = {513: "failed", 7: "stalled"}.get(rank, "running")
    step_time = 0.9 if rank == 100 else 0.1 + (rank % 10) * 0.001
    step = 20 if rank == 900 else 48 if rank % 50 == 3 else 50  # 900: 3 s behind; every 50th: reported late
    return RankInfo(rank=rank, state=state, step=step, loss=0.5, step_time=step_time)


def snapshot(ranks: int) -> dict:
    return SnapshotMessage(RunInfo(id=3, profile="p", status="running", started=1000.0),
                           tuple(rank_row(rank) for rank in range(ranks)), spec={"args": []}).to_wire()


def test_a_thousand_ranks_show_the_ones_that_stand_out_and_a_count_of_all_within_24_lines():
    view = TerminalView(live=False, out=io.StringIO(), err=io.StringIO(), status_every=0)
    view.handle(snapshot(RANKS))
    console = Console(file=io.StringIO(), width=120, height=24)
    view._console = console
    console.print(view._table(120))
    lines = console.file.getvalue().splitlines()
    table_ranks = [int(line.split()[0]) for line in lines if line.split() and line.split()[0].isdigit()]
    assert len(lines) <= 24 // 2 + 4
    assert {7, 100, 513, 900} <= set(table_ranks) and len(table_ranks) == 24 // 2 - 4
    assert table_ranks == sorted(table_ranks)
    text = "\n".join(lines)
    assert "1,024 ranks: 1,022 running, 1 stalled, 1 failed · step time median 104 ms, p90 109 ms" in text
    assert "ranks 7, 100, 513, 900 stand out (failed or stalled, slower than the median or behind it); 1,016 more not shown" in text


def test_eight_ranks_all_show_without_a_count_line():
    view = TerminalView(live=False, out=io.StringIO(), err=io.StringIO(), status_every=0)
    view.handle(snapshot(8))
    console = Console(file=io.StringIO(), width=120, height=24)
    view._console = console
    console.print(view._table(120))
    text = console.file.getvalue()
    assert "more not shown" not in text and "8 ranks:" not in text
    assert [int(line.split()[0]) for line in text.splitlines() if line.strip()[:1].isdigit()] == list(range(8))


def test_with_no_rank_standing_out_the_table_leads_with_the_fastest_median_and_slowest():
    healthy = [RankInfo(rank=rank, state="running", step=50, loss=0.5, step_time=0.100 + (rank * 37 % 64) / 10_000)
               for rank in range(64)]  # 100.0-106.3 ms: nobody 1.2 times the median
    view = TerminalView(live=False, out=io.StringIO(), err=io.StringIO(), status_every=0)
    view.handle(SnapshotMessage(RunInfo(id=3, profile="p", status="running", started=1000.0), tuple(healthy),
                                spec={"args": []}).to_wire())
    console = Console(file=io.StringIO(), width=140, height=24)
    view._console = console
    console.print(view._table(140))
    text = console.file.getvalue()
    by_time = sorted(range(64), key=lambda rank: healthy[rank].step_time)
    fastest, median, slowest = by_time[0], by_time[32], by_time[-1]
    table_ranks = [int(line.split()[0]) for line in text.splitlines() if line.split() and line.split()[0].isdigit()]
    assert {fastest, median, slowest} <= set(table_ranks)
    assert (f"no rank stands out; by step time: fastest rank {fastest}, median rank {median}, slowest rank "
            f"{slowest}; ") in text.replace("\n", " ")
