"""Kill trials: how reliably a run ends every process it started, by ending.

Run on demand (not part of the test suite), from the repository root::

    PYTHONPATH=$PWD:$PWD/runner/worker_path .venv/bin/python tests/bench/bench_kill_trials.py

Each trial is a real ``rankwatch run --plain --nproc-per-node 2`` of
``tests/scripts/orphan_maker.py``: every rank has a child that ignores SIGTERM and holds the
rank's output pipes (and in the endings where the ranks wait, rank 0 ignores SIGTERM itself).
Once every rank's child is up, the run ends one of five ways (``tests/orphan_trials.py``):
rank 1 raises (``failure``), both ranks return (``success``), the runner and its sentinel are
SIGKILLed together, torchrun is SIGKILLed, or the runner gets a Ctrl-C (``stop``). A trial
counts the processes with the run's marker still alive 10 s after the ending (after the
runner returned, for an ending of the job itself), the asyncio tracebacks the runner printed,
how long after the job's end the runner returned, and how long after the ending the last
process with the marker was gone (for an ending of the job itself, after the runner returned:
0 means it left nothing to wait for). Trials run one at a time (``--trials`` of each ending,
interleaved: failure, success, ..., failure, ...) in a Rankwatch home of the bench's own; what
a trial leaves behind is killed (by its run's marker only) before the next starts.

Prints one line per trial, then per ending: trials, trials with survivors, survivors in all,
tracebacks, the runner's return time and the time until all were gone (median and max). Exits 1 when any trial left a
survivor or printed a traceback.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from runner.store.store import RunStore
from tests.orphan_trials import ENDINGS, Trial, run_trial


def fresh_home() -> None:
    """A Rankwatch home and socket folder of the bench's own (as the tests' ``rankwatch_home``)."""
    os.environ["RANKWATCH_HOME"] = tempfile.mkdtemp(prefix="rw-kill-trials-")
    os.environ["RANKWATCH_SOCKET_DIR"] = tempfile.mkdtemp(prefix="rw-", dir="/tmp")
    RunStore().close()


def describe(number: int, trial: Trial) -> str:
    returned = "-" if trial.end_seconds is None else f"{trial.end_seconds:5.1f} s"
    gone = "-" if trial.gone_seconds is None else f"{trial.gone_seconds:4.1f} s"
    line = (f"{trial.ending:<27} trial {number:>2}: survivors {len(trial.survivors)}  "
            f"tracebacks {trial.asyncio_traceback_count}  exit {trial.exit_code}  node {trial.node_state}  "
            f"runner returned after {returned}  all gone after {gone}")
    return line + "".join(f"\n    alive: {survivor}" for survivor in trial.survivors)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=10, help="trials of each ending (default 10)")
    parser.add_argument("--endings", nargs="+", choices=ENDINGS, default=list(ENDINGS))
    args = parser.parse_args(argv)
    fresh_home()
    results: dict[str, list[Trial]] = {ending: [] for ending in args.endings}
    started = time.monotonic()
    for number in range(1, args.trials + 1):
        for ending in args.endings:
            try:
                trial = run_trial(ending)
            except AssertionError as error:  # it never got as far as the kill: not a trial
                print(f"{ending:<27} trial {number:>2}: did not start: {str(error).splitlines()[0]}", flush=True)
                continue
            results[ending].append(trial)
            print(describe(number, trial), flush=True)
    print(f"\n{sum(len(t) for t in results.values())} trials in {time.monotonic() - started:.0f} s\n")
    print(f"{'ending':<27} {'trials':>6} {'with survivors':>14} {'survivors':>9} {'tracebacks':>10} "
          f"{'returned (median / max)':>24} {'all gone (median / max)':>24}")
    failed = False
    for ending, trials in results.items():
        survivors = sum(len(trial.survivors) for trial in trials)
        tracebacks = sum(trial.asyncio_traceback_count for trial in trials)
        failed = failed or survivors > 0 or tracebacks > 0
        returns = [trial.end_seconds for trial in trials if trial.end_seconds is not None]
        returned = f"{statistics.median(returns):.1f} / {max(returns):.1f} s" if returns else "- (runner killed)"
        gone_after = [trial.gone_seconds for trial in trials if trial.gone_seconds is not None]
        gone = f"{statistics.median(gone_after):.1f} / {max(gone_after):.1f} s" if gone_after else "-"
        print(f"{ending:<27} {len(trials):>6} {sum(bool(t.survivors) for t in trials):>14} {survivors:>9} "
              f"{tracebacks:>10} {returned:>24} {gone:>24}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
