"""`rankwatch runs list | show | logs | export` and `rankwatch attach`: runs from the store."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import datetime
import json
import signal
import sys
from pathlib import Path

from rankwatch import protocol
from runner.cli import prune_command
from runner.cli.output import EXIT_FAILED, fail
from runner.cli.run_choice import chosen_run
from runner.diagnosis.summary import RunSummary
from runner.exit_status import describe_exit_code
from runner.format import (
    MISSING,
    format_amount,
    format_bytes,
    format_fixed,
    format_memory_pair,
    format_number,
    format_percent,
    parse_rank_ranges,
    ranks_text,
)
from runner.hub.client import HubClient
from runner.rows import StoredRun
from runner.runstate.messages import Bye, RunInfo
from runner.runstate.state import shown_status
from runner.state import RunStatus
from runner.store.liveness import effective_status, runner_alive
from runner.store.rank_stats import (
    BUILT_IN_METRICS,
    LoggedKey,
    RankStats,
    live_statistics,
    run_gpu_utilisation,
    run_statistics,
)
from runner.store.run_figures import LIVE_STATISTICS_SECONDS
from runner.store.store import RunNotFound, RunStore, stored_rank_json
from runner.view.log_lines import prefixed_line
from runner.view.phase_bars import phase_lines
from runner.view.standing_out import EVERY_RANK_UP_TO, stored_ranks_that_stand_out
from runner.view.terminal import TerminalView, render_summary


def add_parsers(commands) -> None:
    runs = commands.add_parser("runs", help="past and live runs from the run store",
                               description="Runs recorded in the run store. RUN is a run id, 'last' or 'last-N'.")
    actions = runs.add_subparsers(dest="action", metavar="ACTION")
    listing = actions.add_parser("list", help="recent runs",
                                 description="Recent runs, newest first; GPU %: the median utilisation of the "
                                             "run's ranks' GPUs while they made steps (NVML).")
    listing.add_argument("--live", action="store_true", help="only runs still going")
    listing.add_argument("--limit", type=int, default=20, metavar="N", help="at most N runs (default 20)")
    listing.add_argument("--json", action="store_true", help="a JSON list of the runs' records")
    listing.set_defaults(handler=list_main)
    show = actions.add_parser("show", help="one run: status, ranks and their statistics, outcome",
                              description="One run: status, command, every rank's steps, last loss, median step "
                                          "time, data wait, samples/s and last sighting, the keys the script logged, "
                                          "and the outcome.")
    show.add_argument("run", metavar="RUN", help="a run id, 'last' or 'last-N'")
    show.add_argument("--json", action="store_true", help="everything as one JSON object")
    show.add_argument("--ranks", metavar="RANKS",
                      help="list these ranks: 'all', or ranks and ranges such as '512-519,3' (default: every "
                           f"rank up to {EVERY_RANK_UP_TO}, past that the ranks that stand out)")
    show.set_defaults(handler=show_main)
    logs = actions.add_parser("logs", help="a run's captured output, prefixed with the rank",
                              description="A run's captured output (every rank's stdout and stderr, and the "
                                          "launcher's own lines), prefixed with where it came from.")
    logs.add_argument("run", metavar="RUN", help="a run id, 'last' or 'last-N'")
    logs.add_argument("--rank", type=int, metavar="N", help="only rank N's lines")
    logs.add_argument("--launcher", action="store_true", help="only the launcher's (torchrun's) own lines")
    logs.add_argument("--grep", metavar="TEXT", help="only lines containing TEXT")
    logs.add_argument("--tail", type=int, metavar="N", help="only the last N lines")
    logs.set_defaults(handler=logs_main)
    export = actions.add_parser("export", help="write a run's tables as CSV files")
    export.add_argument("run", metavar="RUN", help="a run id, 'last' or 'last-N'")
    export.add_argument("--csv", required=True, metavar="DIR", help="folder for one CSV per table")
    export.set_defaults(handler=export_main)
    prune_command.add_parser(actions)
    runs.set_defaults(handler=lambda args: (runs.print_help(), 2)[1])

    attach = commands.add_parser(
        "attach", help="watch a run started elsewhere (live view from its runner)",
        description="Watch a running job started elsewhere (the GUI, `run --detach`, another terminal): its "
                    "history, then live. Ctrl-C detaches and leaves the run going (`rankwatch stop RUN` stops it). "
                    "A run that has ended is shown as stored.")
    attach.add_argument("run", metavar="RUN", nargs="?", default=None,
                        help="a run id, 'last' or 'last-N' (default: the live run when exactly one is live, "
                             "else the last run)")
    attach.add_argument("--plain", action="store_true",
                        help="plain prefixed lines, no live table (the default when stdout is not a terminal)")
    attach.add_argument("--status-every", type=float, default=30.0, metavar="SECONDS",
                        help="in plain mode, a status line per rank this often (0: never; default 30)")
    attach.set_defaults(handler=attach_main)


def _open_store() -> RunStore:
    return RunStore(readonly=True)


def _when(t: float | None) -> str:
    return datetime.datetime.fromtimestamp(t).strftime("%Y-%m-%d %H:%M:%S") if t else MISSING


def _duration(run: RunInfo) -> str:
    start, end = run.started or run.created, run.ended
    if not start:
        return MISSING
    seconds = (end or datetime.datetime.now().timestamp()) - start
    return f"{seconds:.0f}s" if seconds < 120 else f"{seconds / 60:.1f}m"


def list_main(args: argparse.Namespace) -> int:
    if args.limit < 1:
        return fail("--limit: must be 1 or more")
    try:
        with _open_store() as store:
            runs = store.runs(limit=args.limit, live_only=args.live)
            gpu_util = {run.id: run_gpu_utilisation(store, run.id) for run in runs}
            stalled = store.stalled_runs([run.id for run in runs if run.ended is None])
    except RunNotFound as error:
        if args.json:
            print("[]")
            return 0
        return fail(str(error), code=EXIT_FAILED)
    runs = [dataclasses.replace(run, status=shown_status(effective_status(run), ["stalled"] if run.id in stalled else []))
            for run in runs]
    if args.live:
        runs = [r for r in runs if r.status != RunStatus.LOST.value]
    if args.json:
        print(json.dumps([{**run.to_wire(), "gpu_util": gpu_util[run.id]} for run in runs], default=str))
        return 0
    if not runs:
        print("no live runs" if args.live else "no runs recorded yet", file=sys.stderr)
        return 0
    # GPU %: a column once a listed run has the figure (a run on GPUs sampled here)
    show_gpu = any(gpu_util[run.id] is not None for run in runs)
    gpu_header = f"  {'GPU %':>5}" if show_gpu else ""
    print(f"{'id':>5}  {'status':<10} {'exit':>4}  {'started':<19}  {'time':>6}  {'ranks':>5}{gpu_header}  profile")
    for info in runs:
        exit_code = MISSING if info.exit_code is None else str(info.exit_code)
        gpu = f"  {format_fixed(gpu_util[info.id], '{:.0f}%'):>5}" if show_gpu else ""
        print(f"{info.id:>5}  {info.status:<10} {exit_code:>4}  {_when(info.started or info.created):<19}  "
              f"{_duration(info):>6}  {info.world_size or MISSING:>5}{gpu}  {info.profile or MISSING}")
    return 0


SOURCE_NAMES = {protocol.SOURCE_AUTO: "measured", protocol.SOURCE_LOG: "rankwatch.log",
                protocol.SOURCE_PARSED: "--parse-stdout"}


def show_main(args: argparse.Namespace) -> int:
    try:
        with _open_store() as store:
            stored = store.stored_run(store.resolve_run_id(args.run))
            rows = {row.rank: row for row in store.ranks(stored.id)}
            nodes = store.stored_nodes(stored.id)
            metric_names = store.metric_names(stored.id)
            stats, logged = run_statistics(store, stored.id)
            live = live_statistics(store, stored.id) if stored.ended is None else None
    except RunNotFound as error:
        return fail(str(error), code=EXIT_FAILED, as_json=args.json)
    try:
        listed, caption = _listed_ranks(stats, args.ranks)
    except ValueError as error:
        return fail(f"--ranks: {error}", as_json=args.json)
    # a live run with a stalled rank is hung, as `runs list`, the terminal and the GUI say
    info = dataclasses.replace(stored, status=shown_status(effective_status(stored),
                                                           [row.state for row in rows.values()]))
    if args.json:
        ranks = [{**(stored_rank_json(rows[entry.rank]) if entry.rank in rows else {}), **entry.to_json()}
                 for entry in stats]
        print(json.dumps({"run": info.to_wire(), "ranks": ranks, "nodes": [node.to_wire() for node in nodes],
                          "metrics": metric_names, "logged": [key.to_json() for key in logged]}, default=str))
        return 0
    print(f"run {info.id}  {info.status}  exit code {MISSING if info.exit_code is None else info.exit_code}")
    print(f"  profile:  {info.profile or MISSING}")
    print(f"  started:  {_when(info.started or info.created)}  ({_duration(info)})")
    print(f"  host:     {info.host}   workdir: {info.workdir}")
    built_in = [name for name in metric_names if name in BUILT_IN_METRICS]
    print(f"  metrics:  {', '.join(built_in) or 'none measured'}"
          f"{'; logged: ' + ', '.join(key.name for key in logged) if logged else ''}")
    print("  command:")
    for line in (info.command or "").splitlines():
        print(f"    {line}")
    if nodes and len(nodes) > 1:
        print("  nodes:")
        for node in nodes:
            print(f"    node {node.node_rank}  {node.host or '':<20} {node.state or '':<9} {node.detail or ''}")
    print("  ranks:" if live is None else f"  ranks (as the hub had counted them at {_when(live.t)[-8:]};"
                                          f" it writes them every {LIVE_STATISTICS_SECONDS:.0f} s):")
    for line in format_rank_table(listed):
        print(f"    {line}")
    for line in caption:
        print(f"    {line}")
    if caption:
        print(f"    every rank: rankwatch runs show {info.id} --ranks all   some: --ranks 512-519")
    phases = phase_lines([(entry.rank, entry.phase_shares) for entry in listed],
                         {entry.phase_clock for entry in stats}, _timed_steps(stats),
                         median_of=[entry.phase_shares for entry in stats] if len(listed) < len(stats) else None)
    if phases:
        print(f"  {phases[0]}")
        for line in phases[1:]:
            print(f"    {line}")
    if logged:
        print("  logged by the script (newest value per rank):")
        for line in format_logged_keys(logged):
            print(f"    {line}")
    if info.summary:
        render_summary(info, sys.stdout)
    return 0


def _listed_ranks(stats: list[RankStats], asked: str | None) -> tuple[list[RankStats], list[str]]:
    """The ranks `runs show` lists, and what it says of the others.

    Raises:
        ValueError: ``asked`` names no rank, or none of the run's.
    """
    if asked is None:
        return stored_ranks_that_stand_out(stats)
    if asked.strip().lower() == "all":
        return stats, []
    wanted = parse_rank_ranges(asked)
    listed = [entry for entry in stats if entry.rank in wanted]
    if not listed:
        known = ranks_text([entry.rank for entry in stats]) if stats else "no ranks yet"
        raise ValueError(f"the run has none of {ranks_text(wanted)} (it has {known})")
    return listed, []


def _timed_steps(stats: list[RankStats]) -> int | None:
    counts = [entry.measured_steps for entry in stats if entry.measured_steps]
    return min(counts) if counts else None


RANK_TABLE_COLUMNS = ("rank", "state", "host", "pid", "exit", "steps", "skipped", "last loss", "median step",
                      "data wait", "comm wait", "samples/s", "GPU", "GPU %", "GPU mem", "torch mem", "last seen",
                      "dropped")
OPTIONAL_COLUMNS = {"comm wait": ("comm_wait_share",), "dropped": ("dropped",), "skipped": ("skipped_steps",),
                    "GPU": ("gpu_index",), "GPU %": ("gpu_util",), "GPU mem": ("gpu_mem_used_peak",),
                    "torch mem": ("gpu_mem_allocated", "gpu_mem_reserved", "gpu_mem_peak")}
"""Shown only when some rank has one of the values (no process group: no comm wait; an old store: no drop
count; no GradScaler step skipped: no skipped column; a CPU job, or ranks on other nodes: no GPU columns)."""
LEFT_ALIGNED = {"state", "host", "exit"}
GPU_LEGEND = {
    "GPU %": "median utilisation of the rank's GPU while it made steps (NVML: the whole GPU, every process on it)",
    "GPU mem": "the most NVML saw the rank's process hold, of the GPU's memory",
    "torch mem": "torch's caching allocator: allocated/reserved at the last reading, and the peak allocated",
}
"""What each GPU column of `runs show` means, printed under the table when it is shown."""


def _shown(column: str, stats: list[RankStats]) -> bool:
    if column not in OPTIONAL_COLUMNS:
        return True
    empty = (None, 0) if column == "skipped" else (None,)
    return any(getattr(entry, name) not in empty for entry in stats for name in OPTIONAL_COLUMNS[column])


def _gpu_memory_cell(entry: RankStats) -> str:
    """``3.6/140.4 GiB``: the most the rank's process held (NVML), of its GPU's memory."""
    if entry.gpu_mem_used_peak is None:
        return MISSING
    if entry.gpu_mem_total is None:
        return format_bytes(entry.gpu_mem_used_peak)
    return format_memory_pair(entry.gpu_mem_used_peak, entry.gpu_mem_total)


def _allocator_cell(entry: RankStats) -> str:
    """``0.9/1.2 GiB, peak 1.5 GiB``: allocated/reserved at the last reading, and the peak allocated."""
    parts = []
    if entry.gpu_mem_allocated is not None or entry.gpu_mem_reserved is not None:
        parts.append(format_memory_pair(entry.gpu_mem_allocated, entry.gpu_mem_reserved))
    if entry.gpu_mem_peak is not None:
        parts.append(f"peak {format_bytes(entry.gpu_mem_peak)}")
    return ", ".join(parts) or MISSING


def format_rank_table(stats: list[RankStats]) -> list[str]:
    """The per-rank lines of `runs show` (a header, then one line per rank; "–" for what was not measured),
    then a line for each GPU column shown, saying what it means."""
    columns = [c for c in RANK_TABLE_COLUMNS if _shown(c, stats)]
    rows = []
    for entry in stats:
        cells = {
            "rank": str(entry.rank), "state": entry.state or MISSING, "host": entry.host or MISSING,
            "pid": MISSING if entry.pid is None else str(entry.pid), "exit": describe_exit_code(entry.exit_code),
            "steps": MISSING if entry.steps is None else str(entry.steps),
            "skipped": MISSING if entry.skipped_steps is None else str(entry.skipped_steps),
            "last loss": format_number(entry.last_loss),
            "median step": MISSING if entry.median_step_time is None else
            f"{format_amount(entry.median_step_time, 1000)} ms",
            "data wait": format_percent(entry.data_wait_share), "comm wait": format_percent(entry.comm_wait_share),
            "samples/s": format_amount(entry.samples_per_s),
            "GPU": MISSING if entry.gpu_index is None else str(entry.gpu_index),
            "GPU %": format_fixed(entry.gpu_util, "{:.0f}%"),
            "GPU mem": _gpu_memory_cell(entry), "torch mem": _allocator_cell(entry),
            "last seen": _clock(entry.last_seen),
            "dropped": MISSING if entry.dropped is None else str(entry.dropped),
        }
        rows.append([cells[c] for c in columns])
    widths = [max(len(c), *(len(r[i]) for r in rows)) if rows else len(c) for i, c in enumerate(columns)]

    def line(cells: list[str]) -> str:
        return "  ".join(cell.ljust(width) if column in LEFT_ALIGNED else cell.rjust(width)
                         for column, cell, width in zip(columns, cells, widths, strict=True)).rstrip()

    if not rows:
        return ["no rank reported yet"]
    legend = [f"{column}: {GPU_LEGEND[column]}" for column in columns if column in GPU_LEGEND]
    return [line(list(columns)), *(line(r) for r in rows), *legend]


def format_logged_keys(keys: list[LoggedKey], max_ranks: int = 8) -> list[str]:
    """One line per logged key: where it came from and the newest value of each rank (the first
    ``max_ranks``, then how many more)."""
    width = max(len(key.name) for key in keys)
    lines = []
    for key in keys:
        sources = ", ".join(SOURCE_NAMES.get(source, source) for source in key.sources)
        values = [f"r{rank} {format_number(value)}" for rank, value in list(key.last_by_rank.items())[:max_ranks]]
        more = len(key.last_by_rank) - max_ranks
        lines.append(f"{key.name.ljust(width)}  ({sources})  {' · '.join(values)}"
                     f"{f' … and {more} more ranks' if more > 0 else ''}")
    return lines


def _clock(t: float | None) -> str:
    return MISSING if t is None else datetime.datetime.fromtimestamp(t).strftime("%H:%M:%S")


def describe_ranks(ranks: list[int]) -> str:
    """``0-3``, or ``0, 2, 5`` when there are gaps."""
    if not ranks:
        return "no ranks"
    ranks = sorted(ranks)
    if ranks == list(range(ranks[0], ranks[-1] + 1)) and len(ranks) > 1:
        return f"ranks {ranks[0]}-{ranks[-1]}"
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(str(r) for r in ranks)


def logs_main(args: argparse.Namespace) -> int:
    if args.tail is not None and args.tail < 1:
        return fail("--tail: must be 1 or more")
    if args.rank is not None and args.launcher:
        return fail("give either --rank N or --launcher, not both")
    try:
        with _open_store() as store:
            run_id = store.resolve_run_id(args.run)
            run = store.stored_run(run_id)
            multi_node = len(store.stored_nodes(run_id)) > 1
            if args.rank is not None:
                known = _known_ranks(store, run_id, run.world_size)
                if args.rank not in known:
                    return fail(f"run {run_id} has {describe_ranks(known)}; there is no rank {args.rank}")
            if args.launcher:  # the launcher's lines have no rank; the store filters by rank only
                rows = [row for row in store.log_lines(run_id, contains=args.grep) if row.rank is None]
                rows = rows[-args.tail:] if args.tail else rows
            else:
                rows = store.log_lines(run_id, rank=args.rank, limit=args.tail, contains=args.grep)
    except RunNotFound as error:
        return fail(str(error), code=EXIT_FAILED)
    for row in rows:
        print(prefixed_line(row.rank, row.node, multi_node, row.line))
    if not rows:
        whose = ("rank " + str(args.rank) if args.rank is not None else "the launcher" if args.launcher
                 else f"run {run_id}")
        if args.grep:
            print(f"rankwatch: no line of {whose} contains {args.grep!r}", file=sys.stderr)
            return EXIT_FAILED  # as grep: nothing selected
        print(f"rankwatch: {whose} printed nothing{'' if run.ended else ' yet'}", file=sys.stderr)
    return 0


def _known_ranks(store: RunStore, run_id: int, world_size: int | None) -> list[int]:
    """Ranks the run had: those the store knows, else 0..world_size-1 from the plan."""
    ranks = {row.rank for row in store.ranks(run_id)}
    if not ranks and world_size:
        ranks = set(range(world_size))
    return sorted(ranks)


def export_main(args: argparse.Namespace) -> int:
    try:
        with _open_store() as store:
            written = store.export_csv(store.resolve_run_id(args.run), Path(args.csv))
    except RunNotFound as error:
        return fail(str(error), code=EXIT_FAILED)
    except OSError as error:
        return fail(f"cannot write to {args.csv}: {error.strerror or error}", code=EXIT_FAILED)
    for path in written:
        print(path)
    return 0


def attach_main(args: argparse.Namespace) -> int:
    try:
        with _open_store() as store:
            run = chosen_run(store, args.run, command="attach")
    except RunNotFound as error:
        return fail(str(error), code=EXIT_FAILED)
    if not runner_alive(run):
        print(f"run {run.id} is not running ({effective_status(run)}); showing what was stored", file=sys.stderr)
        show = argparse.Namespace(run=str(run.id), json=False, ranks=None)
        return show_main(show)
    view = TerminalView(live=False if args.plain else None, status_every=args.status_every)
    view.start()
    followed = FOLLOW_BYE
    try:
        try:
            followed = asyncio.run(_follow(run.socket or "", view))
        except KeyboardInterrupt:
            followed = FOLLOW_DETACHED  # Ctrl-C before the signals were ours; detaching leaves the run going
        except (ConnectionError, FileNotFoundError) as error:
            view.stop()
            return fail(f"cannot reach the runner of run {run.id} ({error}); is it still running?",
                        code=EXIT_FAILED)
        with _open_store() as store:
            final = store.stored_run(run.id)
            ended = bool(final.ended)
            # before stop: the live table's last frame shows them (not from a store the disk cut short:
            # its figures end where the storing did, and would be mixed with the live step)
            complete = not RunSummary.from_wire(final.summary or {}).store_incomplete
            if ended and complete and view.shows_results:
                view.show_results(run_statistics(store, run.id)[0])
    finally:
        view.stop()
    if ended:
        render_summary(final, sys.stderr)
        return final.exit_code or 0
    if followed == FOLLOW_DETACHED:
        print(detach_message(run.id), file=sys.stderr)
        return 0
    if followed == FOLLOW_HUNG_UP:
        return fail(hung_up_message(final), code=EXIT_FAILED)
    return 0


def hung_up_message(run: StoredRun) -> str:
    """Why a view ended without the run's end: the runner hung up on it (it drops a view that cannot
    keep up, and says so in the run's events), or the runner is gone."""
    if runner_alive(run):
        return (f"the runner of run {run.id} stopped sending to this view before the run ended (it drops a "
                f"view that falls too far behind; the run's events say why); the run goes on: "
                f"`rankwatch attach {run.id}` to watch again")
    return (f"the runner of run {run.id} is gone (status: {effective_status(run)}); "
            f"`rankwatch runs show {run.id}` shows what was stored")


def detach_message(run_id: int) -> str:
    return f"run {run_id} still running — `rankwatch attach {run_id}` to watch, `rankwatch stop {run_id}` to stop"


DETACH_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


FOLLOW_BYE, FOLLOW_HUNG_UP, FOLLOW_DETACHED = "bye", "hung up", "detached"
"""How following a run ended: the runner said bye, hung up without one, or the user detached."""


async def _follow(socket_path: str, view: TerminalView) -> str:
    """Show the run until the runner says bye (``FOLLOW_BYE``) or hangs up (``FOLLOW_HUNG_UP``) or
    a detach signal comes (Ctrl-C, SIGTERM, the terminal closing: ``FOLLOW_DETACHED``; the run goes on).

    The signals are handled here rather than left to ``KeyboardInterrupt``: a process that a
    non-interactive shell starts in the background (``rankwatch attach 3 &`` in a script, a
    CI step, ``nohup``) inherits SIGINT *ignored*, and Python then raises nothing: attach
    would never detach."""
    # The terminal shows the ranks' rows, the log lines and the events, not charts: a history
    # without the stored records, which at 1,024 ranks took attach 40 s before it went live.
    client = await HubClient.subscribe(socket_path, history=True, records=False)
    loop = asyncio.get_running_loop()
    detach = asyncio.Event()
    for number in DETACH_SIGNALS:
        loop.add_signal_handler(number, detach.set)
    showing = asyncio.ensure_future(_show_messages(client, view))
    detaching = asyncio.ensure_future(detach.wait())
    try:
        await asyncio.wait({showing, detaching}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for number in DETACH_SIGNALS:
            loop.remove_signal_handler(number)
        detaching.cancel()
        client.close()
    if showing.done():
        return FOLLOW_BYE if showing.result() else FOLLOW_HUNG_UP  # a connection error is the caller's
    showing.cancel()
    return FOLLOW_DETACHED


async def _show_messages(client: HubClient, view: TerminalView) -> bool:
    """Show the run's messages; True once the runner said bye, False when it hung up without one."""
    async for message in client.hub_messages():
        view.handle(message)
        if isinstance(message, Bye):
            return True
    return False
