"""Logs ``N`` records as fast as possible (``python flood.py N``), to overflow a small queue."""

import sys

import rankwatch

count = int(sys.argv[1])
for index in range(count):
    rankwatch.log(step=index, value=float(index))
print("logged", count)
