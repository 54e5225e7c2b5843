"""Logs two bursts of 10 records; waits for the file ``GO`` (first argument) in between.

The reconnect test restarts the hub's connection between the bursts.
"""

import os
import sys
import time

import rankwatch

go_file = sys.argv[1]
for index in range(10):
    rankwatch.log(step=index, burst=1.0)
deadline = time.monotonic() + 20
while not os.path.exists(go_file) and time.monotonic() < deadline:
    time.sleep(0.01)
for index in range(10, 20):
    rankwatch.log(step=index, burst=2.0)
print("done")
