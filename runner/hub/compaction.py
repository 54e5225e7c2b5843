"""Keeping a live run's store within bounds: the metric and sample pyramids, applied as the run goes.

Every ``COMPACT_SECONDS`` the hub compacts what has grown old (``runner.store.pyramid`` for the
metrics, ``runner.store.sample_pyramid`` for the GPU and process samples), one slice per call to
its writer thread, so that ingest and publishing go on in between. It waits
while a subscriber's history replay is running: the replay reads the run in row order, and
rows replaced under it would be missed.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable

from runner.hub.writer import StoreWriter
from runner.store.pyramid import DEFAULT_FULL_DETAIL, Level, SliceResult, compact_slice, levels
from runner.store.sample_pyramid import (
    SAMPLE_TABLES,
    SampleSlice,
    SampleTable,
    compact_samples_slice,
)
from runner.store.store import RunStore

COMPACT_SECONDS = 300.0


class Compactor:
    def __init__(self, writer: StoreWriter, run_id: Callable[[], int | None], replaying: Callable[[], bool],
                 stats: Counter[str]) -> None:
        self.writer = writer
        self.run_id = run_id
        self.replaying = replaying
        self.stats = stats
        self.full_detail = DEFAULT_FULL_DETAIL
        """Seconds of full detail (the spec's ``telemetry.full_detail_hours``)."""

    async def run_forever(self) -> None:
        while True:
            await asyncio.sleep(COMPACT_SECONDS)
            await self.compact_now()

    async def compact_now(self, now: float | None = None) -> None:
        """Compact what is old enough at ``now`` (default: the clock), every level, slice by slice."""
        run_id = self.run_id()
        if run_id is None:
            return
        moment = time.time() if now is None else now
        for level in levels(self.full_detail):
            resume: tuple[str, int] | None = None
            while not self.replaying():
                result = await self.writer.call(self._one_slice, run_id, level, moment, resume)
                if result is None:
                    return
                self.stats["compacted_rows"] += result.replaced
                self.stats["compacted_points"] += result.points
                if result.resume is None:
                    break
                resume = result.resume
                await asyncio.sleep(0)
            for table in SAMPLE_TABLES:
                while not self.replaying():
                    samples = await self.writer.call(self._one_samples_slice, table, run_id, level, moment)
                    if samples is None:
                        return
                    self.stats["compacted_samples"] += samples.replaced
                    if samples.done:
                        break
                    await asyncio.sleep(0)

    def _one_slice(self, store: RunStore, run_id: int, level: Level, now: float,
                   resume: tuple[str, int] | None) -> SliceResult | None:
        """Writer thread: one slice; None when the store refused (a full disk: the writer says so)."""
        return self.writer.try_write(compact_slice, store.connection, run_id, level, now, resume)

    def _one_samples_slice(self, store: RunStore, table: SampleTable, run_id: int, level: Level,
                           now: float) -> SampleSlice | None:
        """Writer thread: one slice of a samples table; None when the store refused."""
        return self.writer.try_write(compact_samples_slice, store.connection, table, run_id, level, now)
