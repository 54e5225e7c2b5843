"""A script in the seed-tutorial style: one process per rank, started with its own arguments.

Usage: seed_tutorial.py --init_method tcp://HOST:PORT|file:///PATH --rank R --world_size N [--steps S]
Run under Rankwatch with templates: --init_method {init_method} --rank {rank} --world_size {world_size}.
"""
import argparse
import sys

import torch
import torch.distributed as dist

parser = argparse.ArgumentParser()
parser.add_argument("--init_method", required=True)
parser.add_argument("--rank", type=int, required=True)
parser.add_argument("--world_size", type=int, required=True)
parser.add_argument("--steps", type=int, default=3)
args = parser.parse_args()

# One write per line: under ``python -u`` print() writes the text and its newline apart, and two ranks
# sharing a pipe then interleave mid-line.
sys.stdout.write(f"rank {args.rank} of {args.world_size} joins {args.init_method}\n")
sys.stdout.flush()
dist.init_process_group("gloo", init_method=args.init_method, rank=args.rank, world_size=args.world_size)
torch.manual_seed(args.rank)
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
for _ in range(args.steps):
    optimizer.zero_grad()
    loss = model(torch.randn(4, 8)).pow(2).mean()
    loss.backward()
    optimizer.step()
sys.stdout.write(f"rank {args.rank} trained {args.steps} steps\n")
sys.stdout.flush()
dist.destroy_process_group()
