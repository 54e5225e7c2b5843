"""`rankwatch gpus`, `rankwatch probe`, `rankwatch free-port`: facts about this machine."""

from __future__ import annotations

import argparse
import json
import sys

from runner.launch.ports import free_port
from runner.probe import probe_interpreter
from runner.profile.resolve import default_interpreter
from runner.sampling.gpu_report import GpuProcess, GpuReport
from runner.sampling.nvml import shared_nvml
from runner.sampling.process_names import with_local_names
from runner.store.rank_processes import RunProcess, run_processes
from runner.store.schema import StoreError, StoreVersionError
from runner.store.store import RunNotFound, RunStore
from runner.view.terminal import format_bytes


def add_parsers(commands) -> None:
    gpus = commands.add_parser("gpus", help="the GPUs here, how busy they are and who uses them")
    gpus.add_argument("--json", action="store_true", help="a JSON list ([] without GPUs)")
    gpus.set_defaults(handler=gpus_main)
    probe = commands.add_parser("probe", help="what an interpreter offers (torch, CUDA, backends) and the GPUs")
    probe.add_argument("--interpreter", "--python", metavar="PATH", default=None,
                       help="the Python to probe (default: Rankwatch's own)")
    probe.add_argument("--gpus-only", action="store_true", help="skip the interpreter (fast)")
    probe.add_argument("--json", action="store_true", help="one JSON object (what the GUI reads)")
    probe.set_defaults(handler=probe_main)
    port = commands.add_parser("free-port", help="print a TCP port that is free now")
    port.set_defaults(handler=lambda args: print(free_port()) or 0)


def report_json(report: GpuReport) -> dict:
    return {"available": report.available, "reason": report.reason, "driver_version": report.driver_version,
            "cuda_driver_version": report.cuda_driver_version, "gpus": [g.to_json() for g in report.gpus]}


def gpu_process_owners(report: GpuReport) -> dict[int, RunProcess]:
    """pid -> the live run and rank of each process on the GPUs that a run of ours started (the store's
    ranks, ``runner.store.rank_processes``); none when there is no store or it cannot be read."""
    pids = [process.pid for gpu in report.gpus for process in gpu.processes]
    if not pids:
        return {}
    try:
        with RunStore(readonly=True) as store:
            return run_processes(store, pids)
    except (RunNotFound, StoreVersionError, StoreError, OSError):
        return {}


def describe_gpu_process(process: GpuProcess, owner: RunProcess | None) -> str:
    """``pid 1573 python3 (3.6 GiB) — rank 0 of run 1 (train)``: the program's file name, its GPU
    memory (NVML), and the run and rank it is, when a live run of ours started it."""
    name = f" {process.name.rsplit('/', 1)[-1]}" if process.name else ""
    text = f"pid {process.pid}{name} ({format_bytes(process.used_memory)})"
    return f"{text} — {owner.describe()}" if owner is not None else text


def gpus_main(args: argparse.Namespace) -> int:
    report = with_local_names(shared_nvml().report(with_processes=True))
    owners = gpu_process_owners(report)
    if args.json:
        listed = []
        for gpu in report.gpus:
            data = gpu.to_json()
            for process in data["processes"]:
                owner = owners.get(process["pid"])
                process.update(run=owner.run if owner else None, rank=owner.rank if owner else None,
                               profile=owner.profile if owner else None)
            listed.append(data)
        print(json.dumps(listed))
        return 0
    if not report.available:
        print(f"{report.describe_unavailable()}: jobs run in CPU mode (gloo)")
        return 0
    print(f"driver {report.driver_version or '?'}, CUDA {report.cuda_driver_version or '?'}")
    for gpu in report.gpus:
        util = "-" if gpu.utilization is None else f"{gpu.utilization:.0f}%"
        print(f"  GPU {gpu.index}  {gpu.name or '?':<28} {format_bytes(gpu.memory_used)} / {format_bytes(gpu.memory_total)}"
              f"  util {util:>4}  {'idle' if not gpu.processes else ''}".rstrip())
        for process in gpu.processes:
            print(f"    {describe_gpu_process(process, owners.get(process.pid))}")
    return 0


def probe_main(args: argparse.Namespace) -> int:
    gpus = report_json(shared_nvml().report(with_processes=True))
    interpreter = None if args.gpus_only else probe_interpreter(args.interpreter or default_interpreter())
    result = {"interpreter": interpreter, "gpus": gpus}
    if args.json:
        print(json.dumps(result))
        return 0
    if interpreter is not None:
        if interpreter.get("ok"):
            print(f"{interpreter['python']}: Python {interpreter['python_version']}, torch {interpreter['torch']}, "
                  f"CUDA {'available' if interpreter['cuda_available'] else 'not available'}")
        else:
            print(f"{interpreter['python']}: {interpreter.get('error')}", file=sys.stderr)
        for name, backend in interpreter["backends"].items():
            print(f"  {name:<5} {'yes' if backend['available'] else 'no: ' + (backend['reason'] or '')}")
    print("GPUs: " + (f"{len(gpus['gpus'])}" if gpus["available"] else f"none ({gpus['reason']})"))
    return 0
