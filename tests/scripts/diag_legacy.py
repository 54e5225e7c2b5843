"""A script written for torch.distributed.launch: it requires --local_rank on its command line."""
import argparse

import torch
import torch.distributed as dist

parser = argparse.ArgumentParser()
parser.add_argument("--local_rank", type=int, required=True)
args = parser.parse_args()
dist.init_process_group("gloo")
total = torch.tensor([1.0])
dist.all_reduce(total)
print(f"local rank {args.local_rank}: world {total.item():.0f}", flush=True)
dist.destroy_process_group()
