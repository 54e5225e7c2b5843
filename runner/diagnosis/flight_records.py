"""Gather the ranks' Flight Recorders after a stack capture, compare them, keep the result with the run.

Every rank's reporter reads its Flight Recorder when its stack file grew (the
runner signalled it for stacks: on a stall, ``rankwatch stacks``, the GUI's button)
and sends a ``FlightRecord`` message; a rank on another node sends it through
its agent's relay like any other message. This observer collects them; once no
new one came for ``SETTLE_SECONDS`` (or every running rank answered), it compares
them (``runner.diagnosis.flight_recorder``), writes every record and the analysis
to ``<run_dir>/stacks/flight-recorder-<n>.json`` (0600), and adds the event::

    flight_recorder {message, culprits, seq, group, lines, errors, ranks (answered), path, stuck}

Collectives are compared only when ranks are stuck (``flight_recorder``): the progress of
every rank (``progress_of``, the stall monitor's, as for the stack capture) is taken when
the first record of a capture arrives. A comparison of a progressing job is not a finding:
its event says so, and the run's summary does not keep it.

NCCL's dump-on-timeout files found in the stacks folder (``nccl-trace-rank-*``,
where the launch points ``TORCH_FR_DUMP_TEMP_FILE``) are read as records of the
ranks that wrote them when the rank sent none.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rankwatch._flight_recorder import NCCL_DUMP_PREFIX
from rankwatch.protocol import EventKind, FlightRecord, Message
from runner.diagnosis.findings import Findings
from runner.diagnosis.flight_recorder import (
    FlightAnalysis,
    FlightRecorderFinding,
    TorchRecord,
    analyse,
    read_dump_file,
)
from runner.diagnosis.progress import RankProgress
from runner.hub.observer import HubObserver
from runner.state import RankState

SETTLE_SECONDS = 1.5
NCCL_DUMP = re.compile("^" + re.escape(NCCL_DUMP_PREFIX) + r"(\d+)$")


class FlightRecorderMonitor(HubObserver):
    def __init__(self, hub, folder: Path, findings: Findings | None = None):
        self.hub = hub
        self.folder = Path(folder)
        self.findings = findings if findings is not None else Findings()
        self.records: dict[int, TorchRecord] = {}
        self.progress_of: Callable[[Any, float], RankProgress] | None = None
        """row, now -> how the rank moves (``StallMonitor.progress_of``); None: unknown."""
        self._stuck: set[int] | None = None
        self._last_arrival: float | None = None
        self._captures = 0

    def on_message(self, message: Message) -> None:
        if isinstance(message, FlightRecord):
            if not self.records:
                self._stuck = self._stuck_ranks()
            self.records[message.rank] = message.record
            self._last_arrival = _monotonic()

    def _stuck_ranks(self) -> set[int] | None:
        """The running ranks that do not progress now; None when no rank's progress is known."""
        if self.progress_of is None:
            return None
        now = time.time()
        progress = {row.rank: self.progress_of(row, now).progressing
                    for row in self.hub.model.ranks.values() if not RankState(row.state).finished}
        if all(value is None for value in progress.values()):
            return None
        return {rank for rank, value in progress.items() if value is not True}

    def tick(self, now: float) -> None:
        if self._last_arrival is None:
            return
        if _monotonic() - self._last_arrival < SETTLE_SECONDS and not self._everyone_answered():
            return
        self._last_arrival = None
        records, self.records = self.records, {}
        self._add_nccl_dumps(records)
        stuck, self._stuck = self._stuck, None
        self.publish(records, stuck)

    def publish(self, records: dict[int, TorchRecord], stuck: set[int] | None = None) -> FlightAnalysis:
        """Compare ``records`` (``stuck``: the ranks that made no progress; None: not known), store and say it."""
        result = analyse(records, stuck)
        self._captures += 1
        path = self.folder / f"flight-recorder-{self._captures}.json"
        try:
            self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(descriptor, "w", encoding="utf-8") as file:
                json.dump({"analysis": result.to_json(),
                           "records": {str(rank): record for rank, record in records.items()}},
                          file, default=str)
            result.path, result.stored = str(path), True
        except OSError as error:
            result.path, result.stored = None, False
            result.not_stored = f"{type(error).__name__}: {error}"
        if stuck is None or stuck:  # a snapshot of ranks that progress is not a finding of the run
            self.findings.flight_recorder = FlightRecorderFinding.of(result)
        self.hub.add_event(EventKind.FLIGHT_RECORDER, None, result.message or "no collective recorded",
                           ranks=sorted(records), culprits=result.culprits, seq=result.seq, group=result.group,
                           lines=result.lines, errors={str(rank): why for rank, why in result.errors.items()},
                           path=result.path, stuck=None if stuck is None else sorted(stuck))
        return result

    def _everyone_answered(self) -> bool:
        running = [rank for rank, row in self.hub.model.ranks.items() if not RankState(row.state).finished]
        return bool(running) and all(rank in self.records for rank in running)

    def _add_nccl_dumps(self, records: dict[int, TorchRecord]) -> None:
        try:
            names = os.listdir(self.folder)
        except OSError:
            return
        for name in names:
            match = NCCL_DUMP.match(name)
            if match is None or int(match.group(1)) in records:
                continue
            try:
                records[int(match.group(1))] = read_dump_file(self.folder / name)
            except (OSError, ValueError) as error:
                records[int(match.group(1))] = {"error": str(error)}


def _monotonic() -> float:
    return time.monotonic()
