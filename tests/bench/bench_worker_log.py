"""Training-thread cost of one ``rankwatch.log(...)`` call with 5 scalars.

Run on demand (not part of the test suite)::

    .venv/bin/python tests/bench/bench_worker_log.py [--calls 20000] [--no-torch]

The worker side is set up exactly as the bootstrap does it (``WorkerSession``),
connected to a hub stand-in in *another process* that reads and discards every
line, so the reporter thread really encodes and sends while the calls are timed
(it competes for the GIL as it would in training). Calls come in bursts of 50
with 2 ms pauses, like logging from a training loop. Each call is timed on its
own with ``perf_counter_ns``; the timer's own cost is shown on the first row.

Target: median <= 20 us for 5 scalars (tensorboardX ``add_scalar`` x 5 is about
300 us on the same machine).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

WORKER_PATH = Path(__file__).resolve().parents[2] / "runner" / "worker_path"
sys.path.insert(0, str(WORKER_PATH))

import rankwatch  # noqa: E402
from rankwatch._environment import WorkerEnvironment  # noqa: E402
from rankwatch._session import WorkerSession  # noqa: E402

DRAINING_HUB = r"""
import os, socket, sys, threading
server = socket.socket(socket.AF_UNIX)
server.bind(sys.argv[1])
server.listen(8)
print("ready", flush=True)
def drain(client):
    while client.recv(1 << 16):
        pass
while True:
    client, _ = server.accept()
    threading.Thread(target=drain, args=(client,), daemon=True).start()
"""

BURST = 50
PAUSE_SECONDS = 0.002


def _timed_calls(call, count: int) -> list[float]:
    """Microseconds per call, each timed on its own, in bursts with pauses."""
    timings = []
    clock = time.perf_counter_ns
    while len(timings) < count:
        for step in range(BURST):
            started = clock()
            call(step)
            timings.append((clock() - started) / 1000)
        time.sleep(PAUSE_SECONDS)
    return timings


def _row(label: str, timings: list[float]) -> str:
    ordered = sorted(timings)
    p99 = ordered[int(len(ordered) * 0.99) - 1]
    return f"| {label} | {statistics.median(ordered):.2f} | {p99:.2f} | {len(ordered)} |"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--no-torch", action="store_true", help="skip the tensor-valued row")
    options = parser.parse_args()

    socket_path = os.path.join(tempfile.mkdtemp(prefix="rwbench-", dir="/tmp"), "hub.sock")
    hub = subprocess.Popen(
        [sys.executable, "-c", DRAINING_HUB, socket_path], stdout=subprocess.PIPE, text=True
    )
    assert hub.stdout is not None and hub.stdout.readline().strip() == "ready"
    rows = ["| case | median us | p99 us | calls |", "|---|---|---|---|"]
    try:
        rows.append(
            _row(
                "timer only (perf_counter_ns pair)", _timed_calls(lambda step: None, options.calls)
            )
        )
        rows.append(
            _row(
                "log() not launched by Rankwatch (no-op)",
                _timed_calls(
                    lambda step: rankwatch.log(step=step, a=1.0, b=2.0, c=3.0, d=4.0, e=5.0),
                    options.calls,
                ),
            )
        )
        environment = WorkerEnvironment.from_environ(
            {
                "RANKWATCH_SOCKET": socket_path,
                "RANKWATCH_TOKEN": "bench",
                "RANKWATCH_INSTRUMENT": "0",
                "RANK": "0",
            }
        )
        session = WorkerSession.start(environment, ["bench"])
        deadline = time.monotonic() + 5
        while session.reporter.connections == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        rows.append(
            _row(
                "log() 5 Python floats, reporter connected",
                _timed_calls(
                    lambda step: rankwatch.log(
                        step=step, loss=0.5, lr=1e-3, grad_norm=1.25, tokens=4096.0, accuracy=0.9
                    ),
                    options.calls,
                ),
            )
        )
        if not options.no_torch:
            import torch

            values = [
                torch.tensor(0.5),
                torch.tensor(1e-3),
                torch.tensor(1.25),
                torch.tensor(4096.0),
                torch.tensor(0.9),
            ]
            rows.append(
                _row(
                    "log() 5 one-element CPU tensors, reporter connected",
                    _timed_calls(
                        lambda step: rankwatch.log(
                            step=step,
                            loss=values[0],
                            lr=values[1],
                            grad_norm=values[2],
                            tokens=values[3],
                            accuracy=values[4],
                        ),
                        options.calls,
                    ),
                )
            )
        session.finish(0)
        dropped = session.reporter.dropped
    finally:
        hub.kill()
        hub.wait()
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cores, records dropped: {dropped}")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
