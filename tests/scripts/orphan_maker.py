"""A rank whose child ignores SIGTERM, in one of three endings (no torch: starts at once).

The child stands for a helper, a server or a stuck DataLoader-like worker: it inherits the
rank's output pipes and the run's marker, shrugs off SIGTERM, and would live on with ppid 1
after its rank ended. ``MODE`` (first argument):

* ``fail``: once both ranks' children are up, rank 1 raises (torchrun then stops rank 0);
* ``succeed``: once its child is up, each rank returns normally;
* ``wait``: the ranks run until they are stopped or killed; rank 0 ignores SIGTERM itself too
  (a rank stuck in a collective, or with a checkpoint-on-preemption handler).

Each rank prints ``orphan maker up: rank R child PID`` once its child runs.
"""
import os
import signal
import subprocess
import sys
import time

mode = sys.argv[1] if len(sys.argv) > 1 else "wait"
rank = int(os.environ.get("RANK", "0"))
ready_read, ready_write = os.pipe()
child = subprocess.Popen([sys.executable, "-c", "import os, signal, sys, time\n"
                          "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
                          "os.write(int(sys.argv[1]), b'up'); os.close(int(sys.argv[1]))\n"
                          "while True: time.sleep(1)", str(ready_write)], pass_fds=[ready_write])
os.close(ready_write)
os.read(ready_read, 2)  # the child runs and ignores SIGTERM; it holds the rank's stdout and stderr
os.close(ready_read)
print(f"orphan maker up: rank {rank} child {child.pid}", flush=True)
if mode == "fail":
    time.sleep(2.0)  # both ranks' children are up by then
    if rank == 1:
        raise RuntimeError("rank 1 fails on purpose")
    while True:
        time.sleep(1)
elif mode == "succeed":
    time.sleep(1.0)
    sys.exit(0)
else:
    if rank == 0:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    while True:
        time.sleep(1)
