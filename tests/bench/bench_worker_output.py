"""How fast a worker can print under Rankwatch: its stdout on the runner's output socket.

Run on demand (not part of the test suite)::

    .venv/bin/python tests/bench/bench_worker_output.py [--lines 200000] [--rounds 3]

A worker (``python -m rankwatch._bootstrap``, unbuffered as the runner starts it) prints
``--lines`` lines of ~107 bytes as fast as it can and times itself, with its stdout:

* ``file``: a file on disk (what torchrun's ``--tee`` did before; a full disk then kills
  the rank);
* ``pipe``: a pipe drained by ``cat`` (plain torchrun with its output piped);
* ``socket``: Rankwatch's output socket, read by the real ``WorkerOutput`` on an asyncio
  loop in this process, every line assembled and counted.

Reported: the worker's own time for the prints (how much the capture slows a flood of
prints) and the lines the reader got. A training loop prints a few lines a second; this
is the pathological end.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
WORKER_PATH = REPO / "runner" / "worker_path"

from runner.launch.worker_output import WorkerOutput  # noqa: E402

FLOOD = r"""
import sys, time
count, report = int(sys.argv[1]), sys.argv[2]
line = "x" * 100
started = time.perf_counter()
for index in range(count):
    print(index, line)
with open(report, "w") as out:
    out.write(str(time.perf_counter() - started))
"""


def worker_env(extra: dict[str, str]) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(WORKER_PATH), "PYTHONUNBUFFERED": "1", "RANK": "0", "LOCAL_RANK": "0",
            **extra}


def run_to(kind: str, lines: int, folder: Path) -> tuple[float, int]:
    script, report = folder / "flood.py", folder / "report.txt"
    script.write_text(FLOOD)
    command = [sys.executable, "-m", "rankwatch._bootstrap", str(script), str(lines), str(report)]
    if kind == "file":
        with open(folder / "out.txt", "w") as out:
            subprocess.run(command, stdout=out, env=worker_env({}), check=True)
        received = (folder / "out.txt").read_text().count("\n")
    elif kind == "pipe":
        worker = subprocess.Popen(command, stdout=subprocess.PIPE, env=worker_env({}))
        counted = subprocess.run(["wc", "-l"], stdin=worker.stdout, capture_output=True, text=True, check=True)
        worker.wait()
        received = int(counted.stdout.split()[0])
    else:
        received = asyncio.run(_through_socket(command, folder))
    return float(report.read_text()), received


async def _through_socket(command: list[str], folder: Path) -> int:
    count = 0

    def on_lines(lines) -> None:
        nonlocal count
        count += len(lines)

    output = WorkerOutput(folder / "out.sock", on_lines)
    await output.start()
    worker = await asyncio.create_subprocess_exec(*command, env=worker_env(output.environment))
    await worker.wait()
    await output.drained()
    await output.close()
    return count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lines", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print(f"| stdout to | worker's time for {args.lines} prints, median s | lines/s | rounds (s) | lines received |")
    print("|---|---|---|---|---|")
    with tempfile.TemporaryDirectory(prefix="rw-bench-", dir="/tmp") as folder:
        for kind in ("file", "pipe", "socket"):
            results = [run_to(kind, args.lines, Path(folder)) for _ in range(args.rounds)]
            times = [seconds for seconds, _ in results]
            median = statistics.median(times)
            print(f"| {kind} | {median:.2f} | {args.lines / median:,.0f} | {', '.join(f'{t:.2f}' for t in times)} "
                  f"| {results[-1][1]} |")


if __name__ == "__main__":
    main()
