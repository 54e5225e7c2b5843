"""Trains for a fixed wall time (about SECONDS, default 8), printing a line per second."""
import sys
import time

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 8.0
started = last_print = time.time()
step = 0
while True:
    optimizer.zero_grad()
    model(torch.randn(4, 8)).pow(2).mean().backward()
    optimizer.step()
    step += 1
    time.sleep(0.02)
    flag = torch.tensor([1.0 if time.time() - started > seconds else 0.0])
    dist.all_reduce(flag)  # every rank stops at the same step
    if flag.item() > 0:
        break
    if time.time() - last_print > 1:
        print(f"rank {rank} step {step}")
        last_print = time.time()
dist.destroy_process_group()
