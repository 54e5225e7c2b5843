"""The process sampler's view of a rank's tree: /proc children files, psutil where absent.

A real process tree (a parent, a child, a grandchild started from a second thread of
the child, as a DataLoader worker may be): both ways must find the same pids.
"""

from __future__ import annotations

import subprocess
import sys

import psutil
import pytest

from runner.sampling import samplers
from tests.jobs import wait_for

TREE = """
import subprocess, sys, threading, time
child = subprocess.Popen([sys.executable, "-c", '''
import subprocess, sys, threading, time
started = []
worker = threading.Thread(target=lambda: started.append(subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])))
worker.start(); worker.join()
time.sleep(60)
'''])
time.sleep(60)
"""


@pytest.fixture
def tree():
    parent = subprocess.Popen([sys.executable, "-c", TREE])
    root = psutil.Process(parent.pid)
    try:
        wait_for(lambda: len(root.children(recursive=True)) == 2, 20, what="the child and grandchild")
        yield root
    finally:
        for process in root.children(recursive=True):
            process.kill()
        parent.kill()
        parent.wait()


@pytest.mark.parametrize("children_files", [True, False], ids=["proc-children-files", "psutil-fallback"])
def test_descendants_are_the_whole_tree(tree, monkeypatch, children_files):
    if children_files and not samplers._CHILDREN_FILES:
        pytest.skip("this kernel has no /proc/<pid>/task/<tid>/children")
    monkeypatch.setattr(samplers, "_CHILDREN_FILES", children_files)

    found = samplers._descendants(tree)

    assert sorted(found) == sorted(process.pid for process in tree.children(recursive=True))
    assert len(found) == 2


def test_a_rank_whose_process_is_gone_gets_no_sample_of_zeros():
    """After Ctrl-C or `stop` the summary showed CPU % 0 and RSS 0 B and the memory chart
    dropped to 0.0: the sampler recorded a process it could no longer read as zeros. Nothing was
    measured, so nothing is recorded: the rank's last sample stands as its last known values."""
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    emitted: list = []
    sampler = samplers.ProcessSampler(1.0, lambda: {0: process.pid}, emitted.extend)
    try:
        sampler.sample()
        assert [sample.rank for sample in emitted] == [0] and (emitted[0].rss_bytes or 0) > 0
        process.kill()
        process.wait()
        emitted.clear()
        sampler.sample()
        assert emitted == []
    finally:
        process.kill()
        process.wait()


def test_a_ranks_first_sample_has_no_cpu_figure_and_the_next_measures_it():
    """Seen: every rank's CPU chart began at 0 % and climbed to 95 %: psutil's first reading of
    a process is 0.0 whatever it does, and it was recorded. A busy process measures high from
    its second sample on (above 5 % here: a loaded CI machine shares its cores)."""
    process = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    emitted: list = []
    sampler = samplers.ProcessSampler(1.0, lambda: {0: process.pid}, emitted.extend)
    try:
        sampler.sample()
        [first] = emitted
        assert first.cpu_percent is None and (first.rss_bytes or 0) > 0
        wait_for(lambda: sum(psutil.Process(process.pid).cpu_times()[:2]) > 0.5, 20, what="half a second of CPU")
        emitted.clear()
        sampler.sample()
        [second] = emitted
        assert second.cpu_percent is not None and second.cpu_percent > 5  # well above 0 even on a loaded machine
    finally:
        process.kill()
        process.wait()


def test_ranks_that_share_a_process_each_get_its_one_reading():
    """Ranks in one process (threads as ranks; the scale benchmark's fake ranks): read once per
    rank, every rank after the first got 0 % CPU (psutil's figure since a reading an instant
    before), and 1,024 such ranks cost the sampler a fifth of a core."""
    process = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    emitted: list = []
    sampler = samplers.ProcessSampler(1.0, lambda: {rank: process.pid for rank in range(4)}, emitted.extend)
    try:
        sampler.sample()
        wait_for(lambda: sum(psutil.Process(process.pid).cpu_times()[:2]) > 0.5, 20, what="half a second of CPU")
        emitted.clear()
        sampler.sample()
        assert [sample.rank for sample in emitted] == [0, 1, 2, 3]
        assert len({tuple(sample)[2:] for sample in emitted}) == 1  # pid, CPU, RSS, threads
        assert emitted[0].cpu_percent is not None and emitted[0].cpu_percent > 5
    finally:
        process.kill()
        process.wait()
