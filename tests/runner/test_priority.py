"""The runner's scheduling (issue 17): below the ranks, never passed on to what it starts.

A real process lowers itself as the runner does, then starts a thread and a child as
the runner starts the keeper; the kernel's answers (``sched_getscheduler``) are the
evidence. In a child process, so that the test run itself keeps its scheduling.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from runner import paths

PROBE = r"""
import json, os, subprocess, sys, threading
from runner import priority

lowered = priority.lower_runner_priority()
seen = {}
thread = threading.Thread(target=lambda: seen.update(thread=os.sched_getscheduler(0)))
thread.start()
thread.join()
child = subprocess.run([sys.executable, "-c", "import os; print(os.sched_getscheduler(0), os.nice(0))"],
                       preexec_fn=priority.for_child(), capture_output=True, text=True, check=True)
helper = subprocess.run([sys.executable, "-c", "import os; print(os.sched_getscheduler(0))"],
                        capture_output=True, text=True, check=True)
policy, nice = child.stdout.split()
print(json.dumps({"lowered": lowered, "runner": os.sched_getscheduler(0), "runner_nice": os.nice(0),
                  "thread": seen["thread"], "child": int(policy), "child_nice": int(nice),
                  "helper": int(helper.stdout)}))
"""


def _probe(*prefix: str) -> dict:
    completed = subprocess.run([*prefix, sys.executable, "-c", PROBE], cwd=paths.REPO_ROOT, capture_output=True,
                               text=True, timeout=60)
    assert completed.returncode == 0, completed.stderr
    return json.loads(completed.stdout)


def test_the_runner_runs_batch_and_its_children_get_the_users_scheduling_back():
    result = _probe()

    assert result["lowered"] is True
    assert result["runner"] == result["thread"] == os.SCHED_BATCH  # threads started later inherit it
    assert result["child"] == os.SCHED_OTHER  # the keeper (and so torchrun and the ranks)
    assert result["helper"] == os.SCHED_BATCH  # a helper without for_child stays below the ranks


def test_a_user_nice_value_is_kept_for_the_ranks():
    result = _probe("nice", "-n", "3")

    assert result["runner"] == os.SCHED_BATCH
    assert result["child"] == os.SCHED_OTHER
    assert result["child_nice"] == result["runner_nice"] >= 3

