"""`rankwatch runs list | show | logs | export` and `rankwatch attach`: runs from the store."""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import sys
from pathlib import Path

from runner.cli.output import EXIT_FAILED, fail
from runner.hub.client import HubClient
from runner.state import RunStatus
from runner.store.liveness import effective_status, runner_alive
from runner.store.store import RunNotFound, RunStore
from runner.view.terminal import TerminalView, format_prefix, render_summary


def add_parsers(commands) -> None:
    runs = commands.add_parser("runs", help="past and live runs from the run store")
    actions = runs.add_subparsers(dest="action", metavar="ACTION")
    listing = actions.add_parser("list", help="recent runs")
    listing.add_argument("--live", action="store_true", help="only runs still going")
    listing.add_argument("--limit", type=int, default=20)
    listing.add_argument("--json", action="store_true")
    listing.set_defaults(handler=list_main)
    show = actions.add_parser("show", help="one run: status, ranks, outcome")
    show.add_argument("run", metavar="RUN", help="a run id or 'last'")
    show.add_argument("--json", action="store_true")
    show.set_defaults(handler=show_main)
    logs = actions.add_parser("logs", help="a run's captured output, prefixed with the rank")
    logs.add_argument("run", metavar="RUN")
    logs.add_argument("--rank", type=int)
    logs.add_argument("--grep", metavar="TEXT", help="only lines containing TEXT")
    logs.add_argument("--tail", type=int, metavar="N")
    logs.set_defaults(handler=logs_main)
    export = actions.add_parser("export", help="write a run's tables as CSV files")
    export.add_argument("run", metavar="RUN")
    export.add_argument("--csv", required=True, metavar="DIR", help="folder for one CSV per table")
    export.set_defaults(handler=export_main)
    runs.set_defaults(handler=lambda args: (runs.print_help(), 2)[1])

    attach = commands.add_parser("attach", help="watch a run started elsewhere (live view from its runner)")
    attach.add_argument("run", metavar="RUN", nargs="?", default="last")
    attach.add_argument("--plain", action="store_true")
    attach.add_argument("--status-every", type=float, default=30.0, metavar="SECONDS")
    attach.set_defaults(handler=attach_main)


def _open_store() -> RunStore:
    return RunStore(readonly=True)


def _when(t: float | None) -> str:
    return datetime.datetime.fromtimestamp(t).strftime("%Y-%m-%d %H:%M:%S") if t else "-"


def _duration(run: dict) -> str:
    start, end = run.get("started") or run.get("created"), run.get("ended")
    if not start:
        return "-"
    seconds = (end or datetime.datetime.now().timestamp()) - start
    return f"{seconds:.0f}s" if seconds < 120 else f"{seconds / 60:.1f}m"


def list_main(args: argparse.Namespace) -> int:
    try:
        with _open_store() as store:
            runs = store.runs(limit=args.limit, live_only=args.live)
    except RunNotFound as error:
        if args.json:
            print("[]")
            return 0
        return fail(str(error), code=EXIT_FAILED)
    for run in runs:
        run["status"] = effective_status(run)
    if args.live:
        runs = [r for r in runs if r["status"] != RunStatus.LOST.value]
    if args.json:
        print(json.dumps(runs, default=str))
        return 0
    print(f"{'id':>5}  {'status':<10} {'exit':>4}  {'started':<19}  {'time':>6}  {'ranks':>5}  profile")
    for run in runs:
        exit_code = "-" if run["exit_code"] is None else str(run["exit_code"])
        print(f"{run['id']:>5}  {run['status']:<10} {exit_code:>4}  {_when(run['started'] or run['created']):<19}  "
              f"{_duration(run):>6}  {run['world_size'] or '-':>5}  {run['profile'] or '-'}")
    return 0


def show_main(args: argparse.Namespace) -> int:
    try:
        with _open_store() as store:
            run = store.run(store.resolve_run_id(args.run))
            ranks = store.ranks(run["id"])
            nodes = store.nodes(run["id"])
            metric_names = store.metric_names(run["id"])
    except RunNotFound as error:
        return fail(str(error), code=EXIT_FAILED)
    run["status"] = effective_status(run)
    if args.json:
        print(json.dumps({"run": run, "ranks": ranks, "nodes": nodes, "metrics": metric_names}, default=str))
        return 0
    print(f"run {run['id']}  {run['status']}  exit code {run['exit_code'] if run['exit_code'] is not None else '-'}")
    print(f"  profile:  {run['profile'] or '-'}")
    print(f"  started:  {_when(run['started'] or run['created'])}  ({_duration(run)})")
    print(f"  host:     {run['host']}   workdir: {run['workdir']}")
    print(f"  metrics:  {', '.join(metric_names) or 'none'}")
    print("  command:")
    for line in (run["command"] or "").splitlines():
        print(f"    {line}")
    if nodes and len(nodes) > 1:
        print("  nodes:")
        for node in nodes:
            print(f"    node {node['node_rank']}  {node['host']:<20} {node['state']:<9} {node['detail'] or ''}")
    print("  ranks:")
    for rank in ranks:
        code = "-" if rank["exit_code"] is None else rank["exit_code"]
        print(f"    rank {rank['rank']:<3} {rank['state']:<8} host {rank['host'] or '-':<16} pid {rank['pid'] or '-':<8} "
              f"exit {code}")
    if run.get("summary"):
        render_summary(run, sys.stdout)
    return 0


def logs_main(args: argparse.Namespace) -> int:
    try:
        with _open_store() as store:
            run_id = store.resolve_run_id(args.run)
            multi_node = len(store.nodes(run_id)) > 1
            rows = store.logs(run_id, rank=args.rank, limit=args.tail, contains=args.grep)
    except RunNotFound as error:
        return fail(str(error), code=EXIT_FAILED)
    for row in rows:
        print(f"{format_prefix(row['rank'], row['node'], multi_node)} {row['line']}")
    return 0


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
            run = store.run(store.resolve_run_id(args.run))
    except RunNotFound as error:
        return fail(str(error), code=EXIT_FAILED)
    if not runner_alive(run):
        print(f"run {run['id']} is not running ({effective_status(run)}); showing what was stored", file=sys.stderr)
        run["status"] = effective_status(run)
        show = argparse.Namespace(run=str(run["id"]), json=False)
        return show_main(show)
    view = TerminalView(live=False if args.plain else None, status_every=args.status_every)
    view.start()
    try:
        asyncio.run(_follow(run["socket"], view))
    except KeyboardInterrupt:
        pass  # detaching leaves the job running
    except (ConnectionError, FileNotFoundError) as error:
        view.stop()
        return fail(f"cannot reach the runner of run {run['id']} ({error}); is it still running?", code=EXIT_FAILED)
    finally:
        view.stop()
    with _open_store() as store:
        final = store.run(run["id"])
    if final.get("ended"):
        render_summary(final, sys.stderr)
        return int(final.get("exit_code") or 0)
    return 0


async def _follow(socket_path: str, view: TerminalView) -> None:
    client = await HubClient.subscribe(socket_path, history=True)
    try:
        async for message in client.messages():
            view.handle(message)
            if message["type"] == "bye":
                return
    finally:
        client.close()
