"""Logs a loss every step for SECONDS (default 60), and every 100th step values no store can hold.

Per bad step: an integer value beyond 64 bits (next to a good value in the same call), a step
beyond 64 bits, and a name with a lone surrogate: 3 records the runner must drop and count.
Prints a line every 10 steps and, at the end, how many steps it made.
"""
import os
import sys
import time

import rankwatch

seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 60.0
rank = int(os.environ.get("RANK", "0"))
started = time.time()
step = 0
bad = 0
while time.time() - started < seconds:
    rankwatch.log(step=step, loss=1.0 / (1 + step))
    if step % 100 == 0:
        rankwatch.log(step=step, fine=1.0, huge=2**64 - 1)
        rankwatch.log(step=2**70, beyond=1.0)
        rankwatch.log(step=step, **{"bad\ud800name": 1.0})
        bad += 3
    if step % 10 == 0:
        print(f"rank {rank} step {step}", flush=True)
    step += 1
    time.sleep(0.002)
print(f"rank {rank} done: {step} steps, {bad} bad records", flush=True)
