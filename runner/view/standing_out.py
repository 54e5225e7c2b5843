"""Which ranks the terminal's table shows when they do not all fit: the ones that stand out.

Eight ranks fit any terminal; 1,024 do not fit any. Past the rows the screen has room for,
the table keeps the ranks a person must see -- failed, stalled, stopped or lost first, then the
slowest by step time (the stragglers' suspects), then the ones furthest behind in steps -- in
rank order, and a caption line counts every rank by state with the step time's median and
p90, so the whole job still reads in one line (TraceML and W&B users compare the median rank
with the worst).
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Mapping
from typing import Any

from runner.format import format_amount, ranks_text
from runner.state import RankState

MIN_TABLE_ROWS = 4
ATTENTION_STATES = (RankState.FAILED.value, RankState.STALLED.value, RankState.LOST.value,
                    RankState.STOPPED.value)
"""States that always earn a row, in this order."""


def rows_that_fit(rows: list[dict[str, str]], ranks: Mapping[int, Any], limit: int,
                  now: float) -> tuple[list[dict[str, str]], list[str]]:
    """``rows`` (one per rank, in rank order) cut to ``limit`` rows that stand out, and the
    caption lines that say what was left out (none when everything fits)."""
    if len(rows) <= limit:
        return rows, []
    by_rank = {int(row["rank"]): row for row in rows}
    infos = {rank: ranks[rank] for rank in by_rank if rank in ranks}
    step_times = {rank: info.step_time for rank, info in infos.items() if getattr(info, "step_time", None)}
    steps = {rank: info.step for rank, info in infos.items() if getattr(info, "step", None) is not None}
    standing = _standing({rank: getattr(info, "state", None) for rank, info in infos.items()}, step_times, steps)
    spread = {} if standing else _spread(step_times)  # none stands out: the spread leads the rows
    shown = list(dict.fromkeys([*standing, *spread.values(), *sorted(by_rank)]))[:limit]
    picked = [rank for rank in shown if rank in standing]
    why = (f"{ranks_text(picked)} stand out (failed or stalled, slower than the median or behind it)"
           if picked else "no rank stands out" + _spread_words(spread, "step time"))
    return [by_rank[rank] for rank in sorted(shown)], [
        summary_line(ranks, step_times), f"{why}; {len(rows) - len(shown):,} more not shown"]


def _standing(states: Mapping[int, str | None], step_times: Mapping[int, float], steps: Mapping[int, int],
              *more: list[int]) -> list[int]:
    """The ranks that stand out, the most pressing first: those in an ``ATTENTION_STATES`` state,
    then in turn the slowest by step time, the furthest behind in steps and each of ``more``
    (ranks already in the order they stand out), one of each kind at a time."""
    chosen = [rank for state in ATTENTION_STATES for rank, seen in states.items() if seen == state]
    kinds = [_beyond(step_times, SLOWER_THAN_MEDIAN, reverse=True),
             _beyond({rank: -step for rank, step in steps.items()}, None, reverse=True,
                     margin=_steps_in(BEHIND_SECONDS, step_times)),
             *more]
    for turn in range(max(map(len, kinds))):
        chosen += [kind[turn] for kind in kinds if turn < len(kind)]
    return list(dict.fromkeys(chosen))


def _spread(step_times: Mapping[int, float]) -> dict[str, int]:
    """The fastest, the median and the slowest rank by step time (none without step times): what
    a table shows of a job in which no rank stands out."""
    ordered = sorted(step_times, key=lambda rank: step_times[rank])
    if not ordered:
        return {}
    return {"fastest": ordered[0], "median": ordered[len(ordered) // 2], "slowest": ordered[-1]}


def _spread_words(spread: Mapping[str, int], by: str) -> str:
    """``; by step time: fastest rank 3, median rank 17, slowest rank 9`` (empty without a spread)."""
    return f"; by {by}: " + ", ".join(f"{word} rank {rank}" for word, rank in spread.items()) if spread else ""


SLOWER_THAN_MEDIAN = 1.2
"""A step time this many times the median's stands out."""
BEHIND_SECONDS = 2.0
"""A rank stands out as behind when it is more than this many seconds of steps behind the median:
the rows of 1,024 ranks reach a view in different flushes, up to ~2 s apart, so at 2 steps a
second a margin of one step named 20 ranks "behind" that were only reported later."""


def _steps_in(seconds: float, step_times: Mapping[int, float]) -> float:
    """How many steps the median rank makes in ``seconds`` (at least one)."""
    if not step_times:
        return 1.0
    return max(1.0, seconds / statistics.median(step_times.values()))


def _beyond(values: Mapping[int, float], factor: float | None, reverse: bool, margin: float = 0.0) -> list[int]:
    """Ranks whose value is beyond the median (``factor`` times it, or by ``margin``), the furthest first."""
    if len(values) < 2:
        return []
    median = statistics.median(values.values())
    limit = median * factor if factor is not None else median + margin
    beyond = [rank for rank, value in values.items() if value > limit]
    return sorted(beyond, key=lambda rank: values[rank], reverse=reverse)


def summary_line(ranks: Mapping[int, Any], step_times: Mapping[int, float]) -> str:
    """``1,024 ranks: 1,020 running, 3 stalled, 1 failed · step time median 123 ms, p90 150 ms``."""
    states = Counter(str(getattr(info, "state", "?")) for info in ranks.values())
    order = [state.value for state in RankState]
    counts = ", ".join(f"{count:,} {state}" for state, count in
                       sorted(states.items(), key=lambda item: order.index(item[0]) if item[0] in order else 99))
    line = f"{len(ranks):,} ranks: {counts}"
    times = sorted(step_times.values())
    if len(times) >= 2:
        p90 = times[min(len(times) - 1, int(round(0.9 * (len(times) - 1))))]
        line += (f" · step time median {format_amount(statistics.median(times), 1000)} ms, "
                 f"p90 {format_amount(p90, 1000)} ms")
    return line


EVERY_RANK_UP_TO = 32
"""`runs show` and the plain status and end lines list every rank up to this many; past it, the
ranks that stand out (`runs show --ranks all` lists them all)."""
STANDING_OUT_ROWS = 16
"""At most this many ranks stand out in `runs show`: the worst of each kind first."""
SHARE_MARGIN = 0.05
"""A rank's data or comm wait stands out 5 points of its step above the median rank's."""


def stored_ranks_that_stand_out(stats: list[Any], limit: int = STANDING_OUT_ROWS) -> tuple[list[Any], list[str]]:
    """For a run's per-rank statistics (``runner.store.rank_stats.RankStats``, in rank order): the
    ranks `runs show` lists, and the caption lines that say what it left out (none when every
    rank is listed). Past ``EVERY_RANK_UP_TO``: ranks that failed, stalled, stopped or were lost,
    then in turn the slowest by median step, the furthest behind in steps (more than
    ``BEHIND_SECONDS`` of the median rank's steps: ranks stopped a few steps apart are alike), the most waiting for
    data or in collectives, and those with dropped records; with none of those, the fastest, the
    median and the slowest rank, so that the table still shows the spread."""
    if len(stats) <= EVERY_RANK_UP_TO:
        return stats, []
    by_rank = {entry.rank: entry for entry in stats}
    times = {entry.rank: entry.median_step_time for entry in stats if entry.median_step_time}
    standing = _standing(
        {entry.rank: entry.state for entry in stats}, times,
        {entry.rank: entry.steps for entry in stats if entry.steps is not None},
        _beyond({entry.rank: entry.data_wait_share for entry in stats if entry.data_wait_share is not None},
                None, reverse=True, margin=SHARE_MARGIN),
        _beyond({entry.rank: entry.comm_wait_share for entry in stats if entry.comm_wait_share is not None},
                None, reverse=True, margin=SHARE_MARGIN),
        [entry.rank for entry in stats if entry.dropped])[:limit]
    why = f"{ranks_text(standing)} stand out (failed or stalled, slower, behind, waiting more or dropping records)"
    if not standing:
        spread = _spread(times)
        why = "no rank stands out" + _spread_words(spread, "median step")
        # no step measured: the first ranks, so that the table still shows what there is
        standing = list(dict.fromkeys(spread.values())) or [entry.rank for entry in stats[:3]]
    return [by_rank[rank] for rank in sorted(standing)], [
        summary_line(by_rank, times), f"{why}; {len(stats) - len(standing):,} more not shown"]
