"""Trains a tiny model forever (for stop and cleanup tests); prints every 20 steps."""
import time

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
step = 0
while True:
    optimizer.zero_grad()
    loss = model(torch.randn(4, 8)).pow(2).mean()
    loss.backward()
    optimizer.step()
    if step % 20 == 0:
        print(f"rank {rank} step {step}", flush=True)
    step += 1
    time.sleep(0.01)
