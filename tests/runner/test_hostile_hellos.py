"""Forged hellos against a real hub: a hello's pid is the worker's word, never a steering wheel."""

from __future__ import annotations

import asyncio
import logging

from runner.sampling.samplers import ProcessSampler
from tests.hubs import hello, open_hub


def test_a_hello_with_pid_minus_one_costs_no_other_rank_its_sampling(tmp_path, caplog):
    """A forged ``pid: -1`` is no pid: the rank has none, and the sampler still measures the others."""
    async def scenario():
        hub, socket_path = await open_hub(tmp_path)
        writers = []
        for rank, pid in ((0, -1), (1, None)):  # rank 1: this process, a real pid
            _, writer = await asyncio.open_unix_connection(str(socket_path))
            writer.write(hello(rank, pid=pid))
            await writer.drain()
            writers.append(writer)
        await asyncio.sleep(0.3)
        pids = hub.model.pids()
        rows = []
        sampler = ProcessSampler(1.0, pids=lambda: {**hub.model.pids(), 2: -1}, emit=rows.extend)
        with caplog.at_level(logging.WARNING):
            for _ in range(3):
                sampler.sample()
        for writer in writers:
            writer.close()
        await hub.close()
        return pids, rows
    pids, rows = asyncio.run(scenario())
    assert 0 not in pids and pids[1] > 0  # the forged pid was not taken
    assert [row.rank for row in rows] == [1, 1, 1]  # every sample, despite the bad entry
    assert not [record for record in caplog.records if record.exc_info]  # no traceback
    assert len([record for record in caplog.records if "cannot sample process -1" in record.getMessage()]) == 1
