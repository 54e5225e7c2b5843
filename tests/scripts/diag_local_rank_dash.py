"""A script for torch >= 2.0's launch: it requires --local-rank (dash), the spelling that launch passes."""
import argparse

parser = argparse.ArgumentParser()
parser.add_argument("--local-rank", type=int, required=True)
args = parser.parse_args()
print(f"rank uses local rank {args.local_rank}", flush=True)
