"""Work without steps, judged in the rank (``rankwatch._activity``): real threads, real clocks."""

from __future__ import annotations

import os
import threading
import time

from rankwatch._activity import (
    BASELINE_SECONDS,
    STEPLESS_SECONDS,
    TrainingActivity,
    cuda_allocations,
)


def _judge(activity: TrainingActivity, seconds: float) -> bool | None:
    """Two heartbeats ``seconds`` apart, well past the last step: the second one's judgement."""
    activity.sample(STEPLESS_SECONDS + 1.0)
    time.sleep(seconds)
    return activity.sample(STEPLESS_SECONDS + 1.0 + seconds)


def _thread_that(target) -> tuple[threading.Thread, threading.Event]:
    done = threading.Event()
    thread = threading.Thread(target=target, args=(done,), daemon=True)
    thread.start()
    return thread, done


def test_a_thread_that_computes_is_working_and_one_that_sleeps_or_blocks_is_not():
    def compute(done):
        x = 0
        while not done.is_set():
            x += 1

    def block(done):
        done.wait()

    for target, expected in ((compute, True), (block, False), (lambda done: time.sleep(5), False)):
        thread, done = _thread_that(target)
        try:
            assert _judge(TrainingActivity(lambda known=thread.native_id: known), 0.6) is expected, target
        finally:
            done.set()
            thread.join(6)


def test_nothing_is_judged_near_a_step_nor_without_a_baseline():
    activity = TrainingActivity()
    assert activity.sample(0.0) is None  # it just stepped: nothing read
    assert activity.sample(BASELINE_SECONDS) is None  # the first reading is the baseline
    assert activity.sample(STEPLESS_SECONDS - 0.1) is None  # too close to the step to judge
    assert activity.sample(STEPLESS_SECONDS) is not None
    assert activity.sample(0.0) is None and activity.sample(STEPLESS_SECONDS) is None  # a step resets it
    assert TrainingActivity(lambda: None).sample(10.0) is None
    ended = threading.Thread(target=lambda: None)
    ended.start()
    ended.join()
    deadline = time.monotonic() + 5  # the kernel lets the task go a moment after join returns
    while os.path.exists(f"/proc/self/task/{ended.native_id}") and time.monotonic() < deadline:
        time.sleep(0.01)
    gone = TrainingActivity(lambda: ended.native_id)  # a thread that ended: nothing to read, no crash
    gone.sample(10.0)
    assert gone.sample(11.0) is None


def test_a_process_that_never_used_cuda_reads_no_allocations():
    assert cuda_allocations() is None  # torch is not even imported here: CUDA is never initialised for this


def test_a_thread_fetching_batches_is_working_though_it_mostly_waits():
    fetched = [0]
    activity = TrainingActivity(lambda: threading.main_thread().native_id, lambda: fetched[0])
    activity.sample(STEPLESS_SECONDS + 1.0)
    time.sleep(0.6)  # this (main) thread sleeps: no CPU
    assert activity.sample(STEPLESS_SECONDS + 2.0) is False
    fetched[0] += 1  # but a DataLoader gave a batch meanwhile
    time.sleep(0.6)
    assert activity.sample(STEPLESS_SECONDS + 3.0) is True
