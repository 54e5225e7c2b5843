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
