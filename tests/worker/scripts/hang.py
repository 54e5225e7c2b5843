"""Waits in ``wait_here`` until the file named by the first argument exists (a stand-in for a hang)."""

import os
import sys
import time


def wait_here(stop_file):
    while not os.path.exists(stop_file):
        time.sleep(0.01)


print("waiting", flush=True)
wait_here(sys.argv[1])
