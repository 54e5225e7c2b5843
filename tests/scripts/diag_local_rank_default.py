"""A torch.distributed.launch-era script: --local_rank with a default, so a missing argument goes unnoticed."""
import argparse

parser = argparse.ArgumentParser()
parser.add_argument("--local_rank", type=int, default=0)
args = parser.parse_args()
print(f"rank uses cuda:{args.local_rank}", flush=True)
