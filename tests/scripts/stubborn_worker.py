"""A worker that shrugs off SIGTERM and has a child that does too (no torch: starts at once).

It stands for a rank stuck in a collective or with its own SIGTERM handler (a checkpoint on
preemption), and for its DataLoader worker: what only a SIGKILL ends.
"""
import signal
import subprocess
import sys
import time

signal.signal(signal.SIGTERM, signal.SIG_IGN)
child = subprocess.Popen([sys.executable, "-c", "import signal, time\n"
                          "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
                          "while True: time.sleep(1)"])
print(f"stubborn worker up, child {child.pid}", flush=True)
while True:
    time.sleep(1)
