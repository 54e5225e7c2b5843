"""`rankwatch gpus`, `rankwatch probe`, `rankwatch free-port`: facts about this machine."""

from __future__ import annotations

import argparse
import json
import sys

from runner.launch.ports import free_port
from runner.probe import probe_interpreter
from runner.profile.resolve import default_interpreter
from runner.sampling.gpu_report import GpuReport
from runner.sampling.nvml import shared_nvml
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


def gpus_main(args: argparse.Namespace) -> int:
    report = shared_nvml().report(with_processes=True)
    if args.json:
        print(json.dumps([g.to_json() for g in report.gpus]))
        return 0
    if not report.available:
        print(f"{report.describe_unavailable()}: jobs run in CPU mode (gloo)")
        return 0
    print(f"driver {report.driver_version or '?'}, CUDA {report.cuda_driver_version or '?'}")
    for gpu in report.gpus:
        busy = ", ".join(f"pid {p.pid} ({format_bytes(p.used_memory)})" for p in gpu.processes) or "idle"
        util = "-" if gpu.utilization is None else f"{gpu.utilization:.0f}%"
        print(f"  GPU {gpu.index}  {gpu.name or '?':<28} {format_bytes(gpu.memory_used)} / {format_bytes(gpu.memory_total)}"
              f"  util {util:>4}  {busy}")
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
