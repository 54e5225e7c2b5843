"""Keeps one CPU busy the way other people's jobs on a shared machine do: in bursts.

Runs until killed: busy for 0.2-2 s, then idle for 0.2-2 s (``--steady``: busy all the time).
The noise test of the straggler monitor starts a few of these beside a healthy job.
"""
import argparse
import random
import time

parser = argparse.ArgumentParser()
parser.add_argument("--seed", type=int, default=None)
parser.add_argument("--steady", action="store_true")
args = parser.parse_args()
random.seed(args.seed)
while True:
    until = time.monotonic() + (3600.0 if args.steady else random.uniform(0.2, 2.0))
    while time.monotonic() < until:
        pass
    time.sleep(random.uniform(0.2, 2.0))
