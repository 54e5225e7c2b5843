"""Logs many metrics for SECONDS (default 12): enough to fill a small disk under the run store."""
import sys
import time

import rankwatch

seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 12.0
started = time.time()
step = 0
while time.time() - started < seconds:
    rankwatch.log(step=step, loss=1.0 / (1 + step), a=1.0, b=2.0, c=3.0, d=4.0)
    step += 1
    if step % 1000 == 0:
        print(f"step {step}", flush=True)
        time.sleep(0.01)
print(f"done: {step} steps", flush=True)
