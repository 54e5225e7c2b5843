"""The store's writer beside a busy thread: what the GIL costs it, at each switch interval.

The hub's writer thread runs SQLite without the GIL, but takes the GIL back after every statement
(to bind the next one's values, to commit); beside the hub's busy event loop that wait can reach
the interpreter's switch interval. This measures ``RunStore.write_batch`` as the hub's writer calls
it: the step records of 1,024 ranks (12 series each, as a zero-code step row makes them) in
commits of ``--commit`` records, into a store that already holds 20 steps of them, with beside it:

* ``alone``: nothing;
* ``thread``: a thread of this process running Python without pause (as the event loop nearly
  does at 1,024 ranks): the GIL is shared;
* ``process``: the same loop in another process: only the CPU is shared.

The ``thread`` case is run at each ``--switch`` interval. Configurations alternate, ``--rounds``
times; every round's figure is printed.

    .venv/bin/python tests/bench/bench_writer_convoy.py --rounds 2
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
for _path in (str(REPO), str(REPO / "runner" / "worker_path")):
    if _path not in sys.path:
        sys.path.insert(0, _path)

from rankwatch import protocol  # noqa: E402
from rankwatch.protocol import MetricRow  # noqa: E402
from runner.hub.writer import WRITER_CACHE_KIB  # noqa: E402
from runner.store.store import RecordBatch, RunStore  # noqa: E402

RANKS = 1024
WARM_STEPS = 20
TIMED_STEPS = 20
SERIES = (protocol.LOSS, protocol.STEP_TIME, protocol.SAMPLES_PER_SECOND, protocol.DATA_WAIT, protocol.PHASE_CLOCK,
          *protocol.PHASE_METRICS, protocol.COMPUTE_TIME)


def spin(stop: threading.Event | multiprocessing.synchronize.Event, rounds: list[int] | None = None) -> None:
    """Python without pause until ``stop``; ``rounds[0]`` counts the rounds done (what it got done)."""
    while not stop.is_set():
        total = 0
        for value in range(1000):
            total += value
        if rounds is not None:
            rounds[0] += 1


class Spinner:
    """``spin`` on a thread of this process."""

    def __init__(self) -> None:
        self.stop = threading.Event()
        self.counted = [0]
        self.thread = threading.Thread(target=spin, args=(self.stop, self.counted), daemon=True)

    @property
    def rounds(self) -> int:
        return self.counted[0]


def records(steps: range) -> list[MetricRow]:
    rows: list[MetricRow] = []
    for step in steps:
        for rank in range(RANKS):
            t = 1.7e9 + step * 0.5 + rank * 0.5 / RANKS
            rows.extend((rank, t, step, name, 1.0 + step, protocol.SOURCE_AUTO) for name in SERIES)
    return rows


def measure(commit: int) -> tuple[float, float]:
    """Records per second stored by ``write_batch`` in commits of ``commit`` records, and the
    seconds that took."""
    with tempfile.TemporaryDirectory() as folder:
        store = RunStore(Path(folder) / "runs.db")
        store.connection.execute(f"PRAGMA cache_size=-{WRITER_CACHE_KIB}")
        run_id = store.create_run(run_key="k", profile=None, spec_toml="", command=None, host="h", workdir=None,
                                  runner_pid=os.getpid(), socket=None, world_size=RANKS, status="running")
        warm = records(range(WARM_STEPS))
        for start in range(0, len(warm), 20_000):
            store.write_batch(run_id, RecordBatch(metrics=warm[start:start + 20_000]))
        timed = records(range(WARM_STEPS, WARM_STEPS + TIMED_STEPS))
        started = time.perf_counter()
        for start in range(0, len(timed), commit):
            store.write_batch(run_id, RecordBatch(metrics=timed[start:start + commit]))
        seconds = time.perf_counter() - started
        store.close()
    return len(timed) / seconds, seconds


def run_beside(beside: str, switch: float, commit: int) -> tuple[float, float | None]:
    """Records/s stored, and for ``thread`` the busy thread's rounds/s meanwhile."""
    default = sys.getswitchinterval()
    sys.setswitchinterval(switch)
    spinner = Spinner() if beside == "thread" else None
    stop = multiprocessing.Event()
    process = multiprocessing.Process(target=spin, args=(stop,), daemon=True) if beside == "process" else None
    if spinner is not None:
        spinner.thread.start()
    if process is not None:
        process.start()
    try:
        before = spinner.rounds if spinner is not None else 0
        rate, seconds = measure(commit)
        return rate, (spinner.rounds - before) / seconds if spinner is not None else None
    finally:
        stop.set()
        if spinner is not None:
            spinner.stop.set()
            spinner.thread.join()
        if process is not None:
            process.join()
        sys.setswitchinterval(default)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--commit", default="1300,13000", help="records per commit, comma-separated "
                        "(1,300: 50 ms of 1,024 ranks at 2 steps/s)")
    parser.add_argument("--switch", default="0.005,0.001,0.0005", help="switch intervals (s) for `thread`")
    args = parser.parse_args()
    commits = [int(value) for value in args.commit.split(",")]
    cases = [("alone", 0.005), ("process", 0.005)] + [("thread", float(value)) for value in args.switch.split(",")]
    print(f"command: python {' '.join(sys.argv)}", flush=True)
    results: dict[tuple[str, float, int], list[tuple[float, float | None]]] = {}
    for round_number in range(1, args.rounds + 1):
        for commit in commits:
            for beside, switch in cases:
                rate, busy = run_beside(beside, switch, commit)
                results.setdefault((beside, switch, commit), []).append((rate, busy))
                print(f"round {round_number}: {beside:8s} switch {switch * 1000:4.1f} ms, commits of {commit:6,d}: "
                      f"{rate:9,.0f} records/s" + (f", busy thread {busy:,.0f} rounds/s" if busy else ""), flush=True)
    print("\n| beside | switch interval | commit records | records/s per round | busy thread's rounds/s |"
          "\n|---|---|---|---|---|")
    for (beside, switch, commit), figures in results.items():
        rates = " / ".join(f"{rate:,.0f}" for rate, _ in figures)
        loop = " / ".join(f"{busy:,.0f}" for _, busy in figures if busy is not None) or "n/a"
        print(f"| {beside} | {switch * 1000:g} ms | {commit:,} | {rates} | {loop} |")


if __name__ == "__main__":
    main()
