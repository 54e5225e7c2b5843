"""Logs ``N`` records, then leaves by ``os._exit(CODE)`` (``python os_exit.py N CODE``), as
scripts do to skip torch's process-group teardown: no atexit, no return to the bootstrap."""

import os
import sys

import rankwatch

count, code = int(sys.argv[1]), int(sys.argv[2])
for index in range(count):
    rankwatch.log(step=index, value=float(index))
print("logged", count, flush=True)
os._exit(code)
