"""Replay stored runs' steps through the straggler rule, offline, one step at a time.

A change to the rule (``runner/diagnosis/stragglers.py``) can be judged on the steps of real
runs without running them again: keep their stores (``bench_straggler_noise.py --keep DIR``),
then replay them here before and after the change. Each run's step records (step time,
compute time, CPU wait, phases) go into a real ``StepWindows`` and ``StragglerMonitor`` in
step order, every rank's step ``n`` before any rank's ``n + 1``, with a judgement after each
step: the earliest the live rule could have said it. One line per store: the straggler events
as (rank, named, step, since step).

    .venv/bin/python tests/bench/replay_stragglers.py DIR/*/data/runs.db
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "runner" / "worker_path"))

from rankwatch import protocol  # noqa: E402
from runner.diagnosis.step_windows import StepWindows  # noqa: E402
from runner.diagnosis.stragglers import StragglerMonitor  # noqa: E402
from runner.store.store import RunStore  # noqa: E402

SERIES = (protocol.STEP_TIME, protocol.COMPUTE_TIME, protocol.CPU_WAIT, protocol.PHASE_CLOCK,
          *protocol.PHASE_METRICS)


class ReplayHub:
    """What the monitor asks of a hub: every rank running, and somewhere to put its events."""

    def __init__(self, ranks: list[int]) -> None:
        self.model = SimpleNamespace(ranks={rank: SimpleNamespace(state="running") for rank in ranks})
        self.events: list[tuple[Any, ...]] = []

    def add_event(self, kind: str, rank: int | None, message: str, **fields: Any) -> None:
        self.events.append((rank, fields.get("active"), fields.get("step"), fields.get("since_step")))


def steps_of(store_path: Path) -> dict[int, dict[int, dict[str, float | None]]]:
    """step -> rank -> {series: value} of the store's last run (the zero-code instrumentation's)."""
    by_step: dict[int, dict[int, dict[str, float | None]]] = {}
    with RunStore(store_path, readonly=True) as store:
        run_id = store.resolve_run_id("last")
        for name in SERIES:
            for record in store.metrics(run_id, name, source=protocol.SOURCE_AUTO):
                if record.step is not None:
                    by_step.setdefault(record.step, {}).setdefault(record.rank, {})[record.name] = record.value
    return by_step


def replay(store_path: Path) -> list[tuple[Any, ...]]:
    by_step = steps_of(store_path)
    hub = ReplayHub(sorted({rank for ranks in by_step.values() for rank in ranks}))
    windows = StepWindows()
    monitor = StragglerMonitor(hub, windows)
    for step in sorted(by_step):
        for rank, values in sorted(by_step[step].items()):
            windows.add_steps(rank, {step: values})
        monitor.tick(0.0)
    return hub.events


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("stores", nargs="+", type=Path)
    for store_path in parser.parse_args().stores:
        print(f"{store_path}: {replay(store_path)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
