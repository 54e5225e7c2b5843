"""A tiny DDP job for the multi-node tests: N optimizer steps per rank, each one printed.

Each step sleeps a little so the job lasts a few seconds once the ranks are up: long
enough for a test to poke at the head runner while it runs.
"""
import argparse
import time

import torch
import torch.distributed as dist

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=20)
parser.add_argument("--sleep", type=float, default=0.1)
args = parser.parse_args()

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(rank)
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(args.steps):
    optimizer.zero_grad()
    loss = model(torch.randn(16, 8)).pow(2).mean()
    loss.backward()
    optimizer.step()
    print(f"rank {rank}/{world} step {step} loss {loss.item():.4f}", flush=True)
    time.sleep(args.sleep)
dist.destroy_process_group()
