"""`rankwatch doctor` and `rankwatch stacks`: is this machine ready, and where is every rank?"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import shutil
import sys
import time
from collections.abc import AsyncIterator

from rankwatch import protocol
from runner.cli.output import EXIT_FAILED, fail
from runner.cli.run_choice import chosen_run
from runner.diagnosis.doctor import TORCHRUN_DEFAULT_PORT, format_report, run_doctor
from runner.diagnosis.flight_recorder import format_flight_record
from runner.diagnosis.stacks import CaptureRecord, format_stacks
from runner.hub.client import HubClient
from runner.profile.resolve import default_interpreter
from runner.rows import StoredRun
from runner.runstate.messages import Bye, EventKind, HubMessage, UpdateMessage
from runner.store.liveness import effective_status, runner_alive
from runner.store.store import RunNotFound, RunStore

STACKS_TIMEOUT_SECONDS = 10.0
FLIGHT_RECORDER_WAIT_SECONDS = 4.0
"""After the capture: how long the ranks' Flight Recorders may take to be compared."""


def add_parsers(commands) -> None:
    doctor = commands.add_parser(
        "doctor", help="check this machine and an interpreter for distributed jobs",
        description="OS, Python, torch and its CUDA build, driver, NCCL, GPUs and who uses them, usable backends, "
                    "the rendezvous port, OMP threads per rank, CUDA_VISIBLE_DEVICES, the virtual environment.")
    doctor.add_argument("--interpreter", "--python", metavar="PATH", default=None,
                        help="the Python the workers would run (default: Rankwatch's own)")
    doctor.add_argument("--port", type=int, default=TORCHRUN_DEFAULT_PORT,
                        help=f"the rendezvous port to check (default {TORCHRUN_DEFAULT_PORT}, torchrun's)")
    doctor.add_argument("--nproc-per-node", type=int, metavar="N", default=None,
                        help="processes per node, for the threads check (default: one per GPU, else per CPU)")
    doctor.add_argument("--gpus", metavar="0,1|all|cpu", default=None, help="the GPUs a job would pick")
    doctor.add_argument("--json", action="store_true", help="the whole report as JSON")
    doctor.set_defaults(handler=doctor_main)

    stacks = commands.add_parser(
        "stacks", help="every rank's Python stack, identical ones collapsed, the odd one marked",
        description="For a running job: capture every rank's stacks now (no ptrace: the workers dump on a signal). "
                    "For a finished one: the last capture (taken on a stall or on request).")
    stacks.add_argument("run", metavar="RUN", nargs="?", default=None,
                        help="a run id, 'last' or 'last-N' (default: the live run when exactly one is live, "
                             "else the last run)")
    stacks.add_argument("--json", action="store_true", help="the capture as JSON (the 'stacks' event)")
    stacks.add_argument("--timeout", type=float, default=STACKS_TIMEOUT_SECONDS, help=argparse.SUPPRESS)
    stacks.set_defaults(handler=stacks_main)


def doctor_main(args: argparse.Namespace) -> int:
    if args.nproc_per_node is not None and args.nproc_per_node < 1:
        return fail("--nproc-per-node: must be 1 or more", as_json=args.json)
    try:
        report = run_doctor(args.interpreter or default_interpreter(), port=args.port,
                            processes=args.nproc_per_node, gpus=args.gpus)
    except ValueError:
        return fail(f"--gpus: {args.gpus!r} is not 'all', 'cpu' or a list of GPU indices like 0,1", as_json=args.json)
    if args.json:
        print(json.dumps(report.to_json(), default=str))
    else:
        sys.stdout.write(format_report(report))
    return 0 if report.ok else EXIT_FAILED


def stacks_main(args: argparse.Namespace) -> int:
    try:
        with RunStore(readonly=True) as store:
            run = chosen_run(store, args.run, command="stacks")
    except RunNotFound as error:
        return fail(str(error), code=EXIT_FAILED, as_json=args.json)
    capture = None
    alive = runner_alive(run)
    if alive and run.socket:
        try:
            capture = asyncio.run(request_stacks(run.socket, args.timeout))
        except (OSError, ConnectionError) as error:
            print(f"rankwatch: cannot reach the runner of run {run.id} ({error}); showing the last stored capture",
                  file=sys.stderr)
        else:
            if capture is None:
                print(f"rankwatch: no stacks from run {run.id} within {args.timeout:.0f} s; "
                      "showing the last stored capture", file=sys.stderr)
    if capture is None:
        capture = last_stored_capture(run.id)
        if capture is None:
            return fail(no_capture_message(run, alive), code=EXIT_FAILED, as_json=args.json)
    if args.json:
        print(json.dumps(capture, default=str))
    else:
        record = CaptureRecord.from_wire(capture)
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(record.t)) if record.t else "?"
        print(f"run {run.id} · captured {when}")
        sys.stdout.write(format_stacks(capture, width=shutil.get_terminal_size((120, 24)).columns))
        if record.text_path:
            print(f"every thread of every rank: {record.text_path}")
        flight = capture.get("flight_recorder")
        if isinstance(flight, dict) and flight:
            sys.stdout.write(format_flight_record(flight))
    return 0


def no_capture_message(run: StoredRun, alive: bool) -> str:
    """Why ``rankwatch stacks`` has nothing to show, and what to run instead: a finished run's ranks
    are gone, so asking again cannot capture them."""
    run_id = run.id
    if alive:
        return (f"run {run_id} is running but sent no stacks and has none stored: its ranks may not have "
                f"started yet; try again (`rankwatch stacks {run_id}`)")
    return (f"run {run_id} has ended ({effective_status(run)}) and no stacks were captured while it ran "
            "(they are taken when a rank stalls, or on request while the run goes on); what it left: "
            f"`rankwatch runs show {run_id}` (its summary) and `rankwatch runs logs {run_id}`")


async def request_stacks(socket_path: str, timeout: float) -> dict | None:
    """Ask a live runner for a capture and wait for the ``stacks`` event it publishes.

    Subscribes without history, so the first ``stacks`` event that arrives is new:
    either the one this request started, or one already in flight (which answers it).

    Raises:
        OSError: the socket cannot be reached.
    """
    client = await HubClient.subscribe(socket_path, history=False, logs=False)
    try:
        await client.send(protocol.DumpStacks())
        found: dict[str, dict] = {}
        messages = client.hub_messages()
        capture = await asyncio.wait_for(_next_events(messages, found, protocol.EventKind.STACKS), timeout)
        if capture is not None and "flight_recorder" not in found:  # the Flight Recorders follow the capture
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(_next_events(messages, found, protocol.EventKind.FLIGHT_RECORDER),
                                       FLIGHT_RECORDER_WAIT_SECONDS)
        if capture is not None and "flight_recorder" in found:
            capture["flight_recorder"] = found["flight_recorder"]
        return capture
    except asyncio.TimeoutError:
        return None
    finally:
        client.close()


async def _next_events(messages: AsyncIterator[HubMessage], found: dict[str, dict],
                       wanted: EventKind) -> dict | None:
    """Read updates until an event of kind ``wanted``; every stacks and flight_recorder event seen
    goes into ``found`` (one update may carry both, as published)."""
    kinds = (EventKind.STACKS, EventKind.FLIGHT_RECORDER)
    async for message in messages:
        if isinstance(message, Bye):
            return None
        if not isinstance(message, UpdateMessage):
            continue
        for event in message.events:
            if event.kind in kinds and event.kind.value not in found:
                found[event.kind.value] = event.to_wire()
        if wanted.value in found:
            return found[wanted.value]
    return None


def last_stored_capture(run_id: int) -> dict | None:
    with RunStore(readonly=True) as store:
        events = store.stored_events(run_id, kind="stacks")
    if not events:
        return None
    last = events[-1]
    capture = {"message": last.message, **last.fields, "kind": "stacks", "t": last.t, "rank": last.rank}
    with RunStore(readonly=True) as store:
        flights = [event for event in store.stored_events(run_id, kind=protocol.EventKind.FLIGHT_RECORDER.value)
                   if event.t >= last.t]
    if flights:
        capture["flight_recorder"] = {"message": flights[0].message, **flights[0].fields, "t": flights[0].t}
    return capture
