"""What one step's telemetry costs after the training thread queued it: the reporter and the hub.

Run on demand (not part of the test suite; about 30 seconds)::

    .venv/bin/python tests/bench/bench_reporter_work.py
    .venv/bin/python tests/bench/bench_reporter_work.py --worker-path /tmp/rw-before/runner/worker_path

The reporter thread shares the worker's GIL with training: every microsecond it spends turning
queued step records into a ``metrics`` line is a microsecond the training thread may wait for
the GIL. The hub spends its own CPU reading the line back (``json.loads`` and
``protocol.metric_records``), on a core the ranks may need when every core is busy.

What runs, in this process: a batch of ``--batch`` step records as the zero-code instrumentation
queues them (a DDP step: loss, step time, data wait, samples; every 16th step timed, with comm and
CPU wait), drained and encoded by the real ``Reporter`` code (``_drain_items`` and
``protocol.encode_metric_items``), then decoded as the hub does. Best of ``--repeat`` timings of
``--number`` batches each (pure Python work on one thread: the minimum is the cost, the rest is
the machine's noise). ``--worker-path`` measures another checkout's ``rankwatch`` the same way.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import timeit
from pathlib import Path

WORKER_PATH = Path(__file__).resolve().parents[2] / "runner" / "worker_path"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=128, help="steps per metrics line (one 40 ms batch of 0.3 ms steps)")
    parser.add_argument("--number", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--worker-path", type=Path, default=WORKER_PATH)
    options = parser.parse_args()
    sys.path.insert(0, str(options.worker_path))
    from rankwatch import protocol
    from rankwatch._buffer import KIND_STEP, RecordBuffer
    from rankwatch._reporter import Reporter

    buffer = RecordBuffer()
    hello = protocol.Hello.__new__(protocol.Hello)
    reporter = Reporter("/nonexistent", hello, buffer, 0)
    started = time.time()

    def queue_steps() -> None:
        for index in range(options.batch):
            timed = index % 16 == 0
            phases = (["cpu", 1.2e-5, 2e-6, 8e-5, 1.2e-4, 5e-5, 1.5e-5, 1.1e-5] if timed else None)
            buffer.put((KIND_STEP, started + index * 3e-4, index, 0.6931 + index * 1e-5, 2.9e-4 + index * 1e-9,
                        1.2e-5, 64, 3e-6 if timed else None, False, phases))

    def drained_items() -> list:
        result = reporter._drain_items()
        return result[0] if isinstance(result, tuple) else result  # (items, sizes) since issue 17's step rows

    def reporter_work() -> bytes:
        queue_steps()
        return protocol.encode_metric_items(0, drained_items())

    def queue_only() -> None:
        queue_steps()
        buffer.drain()

    line = reporter_work()
    records = protocol.Metrics.from_wire(json.loads(line), 0).records

    def hub_work() -> int:
        return len(protocol.Metrics.from_wire(json.loads(line), 0).records)

    def per_step(function) -> float:
        best = min(timeit.repeat(function, number=options.number, repeat=options.repeat))
        return best / options.number / options.batch * 1e6

    queueing = per_step(queue_only)
    reporting = per_step(reporter_work) - queueing
    decoding = per_step(hub_work)
    print(f"rankwatch from {options.worker_path}; {options.batch} steps per line, best of {options.repeat}")
    print("| per step | reporter: drain + encode (us) | bytes on the wire | hub: decode + records (us) | records |")
    print("|---|---|---|---|---|")
    print(f"| | {reporting:.2f} | {len(line) / options.batch:.0f} | {decoding:.2f} | "
          f"{len(records) / options.batch:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
